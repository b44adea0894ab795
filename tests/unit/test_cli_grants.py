"""``metallo site grant create|list|revoke`` on a real, migrated Site Coordination
database (the operator functions of site_coordination.application.grants)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.cli_support import cli

MIGRATIONS = Path(__file__).resolve().parents[2] / "services" / "site_coordination" / "migrations"


@pytest.fixture
async def site_database(make_database, monkeypatch):
    url = await make_database("site_coordination", MIGRATIONS)
    monkeypatch.setenv("METALLO_SITE_COORDINATION_DATABASE_URL", url)
    monkeypatch.setenv("COLUMNS", "200")
    return url


async def test_create_list_revoke(site_database):
    created = await cli("site", "grant", "create", "--site", "lab-slurm", "--environment", "slurm",
                        "--expires", "2h", "--label", "test runtime")
    assert created.code == 0, created.stderr
    secret = created.stdout.strip()
    assert secret.startswith("psb_") and len(secret) == 47
    assert "shown only now" in created.stderr and secret not in created.stderr

    listed = await cli("site", "grant", "list", "--output", "json")
    grants = json.loads(listed.stdout)["grants"]
    assert len(grants) == 1 and grants[0]["site"] == "lab-slurm"
    assert grants[0]["environment"] == "slurm" and grants[0]["revoked_at"] is None
    assert secret not in listed.stdout
    grant_id = grants[0]["grant_id"]

    revoked = await cli("site", "grant", "revoke", grant_id)
    assert revoked.code == 0 and f"revoked {grant_id}" in revoked.stdout
    again = await cli("site", "grant", "revoke", grant_id)
    assert again.code == 3 and "next:" in again.stderr
    table = await cli("site", "grant", "list")
    assert grant_id in table.stdout


async def test_refusals_are_usage_errors(site_database):
    bad_env = await cli("site", "grant", "create", "--site", "lab-slurm", "--environment", "mars")
    assert bad_env.code == 2 and "slurm or k8s" in bad_env.stderr
    bad_duration = await cli("site", "grant", "create", "--site", "lab-slurm",
                             "--environment", "slurm", "--expires", "forever")
    assert bad_duration.code == 2 and "invalid-duration" in bad_duration.stderr
    unknown = await cli("site", "grant", "create", "--site", "nosuch", "--environment", "slurm")
    assert unknown.code == 2 and "no Site 'nosuch'" in unknown.stderr
    wrong = await cli("site", "grant", "create", "--site", "lab-slurm", "--environment", "k8s")
    assert wrong.code == 2 and "use --environment slurm" in wrong.stderr
    empty = await cli("site", "grant", "list", "-o", "json")
    assert json.loads(empty.stdout) == {"grants": []}


async def test_unreachable_database_is_uncertain(monkeypatch):
    monkeypatch.setenv("METALLO_SITE_COORDINATION_DATABASE_URL",
                       "postgresql+asyncpg://postgres@127.0.0.1:1/metallo_site_coordination")
    result = await cli("site", "grant", "list")
    assert result.code == 4 and "metallo dev up" in result.stderr
