"""The dev stack's lab issuer signs with one key, kept across ``dev down``/``dev up``
whatever the executor, so a ``metallo dev login`` from before a restart still verifies;
only ``dev up --fresh`` replaces the stack's own key. The key is owner-only.

The key files, the Site Coordination settings of the real plan and the real issuer's
tokens are used; no process is started (tests/e2e/test_login_across_restart.py runs
the whole stack)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from metallo.devstack import components
from metallo.devstack.components import Options, plan
from metallo.devstack.layout import Layout
from metallo.devstack.prepare import ensure_issuer_key
from metallo.identity.issuer import LabIssuer, generate_key
from tests.unit.devstack_support import with_broker_users

CLIENT = "metallo-cli"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _signing_key(layout: Layout, executor: str) -> Path:
    """The key Site Coordination's lab issuer is told to sign with under ``executor``."""
    site_coordination = next(c for c in plan(layout, Options(executor=executor))[0]
                             if c.name == "site_coordination")
    return Path(site_coordination.env["METALLO_LAB_ISSUER_KEY"])


def _issuer(key: Path) -> LabIssuer:
    return LabIssuer(key, issuer="https://127.0.0.1:8443/lab-issuer")


@pytest.fixture
def layout(tmp_path, monkeypatch) -> Layout:
    """A dev stack layout on a machine without the Slurm lab's key."""
    monkeypatch.setattr(components, "SLURM_LAB_STATE", tmp_path / "no-slurm-lab")
    return with_broker_users(Layout(tmp_path / "dev"))


def test_the_stacks_own_key_is_owner_only_and_kept_across_restarts(layout):
    key = ensure_issuer_key(layout)
    assert key == layout.issuer / "private.pem"
    assert _mode(key) == 0o600 and _mode(layout.issuer) == 0o700
    login = _issuer(key).issue_refresh("lab-alice", CLIENT)[0]
    before = key.read_bytes()

    # dev down, then dev up: the same key, and the login from before is still accepted.
    layout.make()
    again = ensure_issuer_key(layout)
    assert again == key and key.read_bytes() == before
    assert _issuer(again).refreshed_subject(login, CLIENT) == "lab-alice"


def test_every_executor_signs_with_the_same_key(layout):
    key = ensure_issuer_key(layout)
    assert _signing_key(layout, "local") == key
    assert _signing_key(layout, "slurm") == key


def test_the_slurm_labs_key_serves_every_executor_when_the_lab_has_one(layout, tmp_path,
                                                                       monkeypatch):
    lab_key = generate_key(tmp_path / "slurm-lab" / "issuer")
    monkeypatch.setattr(components, "SLURM_LAB_STATE", tmp_path / "slurm-lab")
    before = lab_key.read_bytes()

    assert ensure_issuer_key(layout, fresh=True) == lab_key
    # A login made under the slurm executor verifies after a restart with the local one.
    assert _signing_key(layout, "slurm") == _signing_key(layout, "local") == lab_key
    assert lab_key.read_bytes() == before  # the lab's key is never replaced by dev up


def test_fresh_replaces_the_stacks_own_key_and_its_logins(layout):
    key = ensure_issuer_key(layout)
    login = _issuer(key).issue_refresh("lab-alice", CLIENT)[0]
    old_jwks = _issuer(key).jwks()

    fresh = ensure_issuer_key(layout, fresh=True)

    assert fresh == key and _mode(fresh) == 0o600
    assert _issuer(fresh).jwks() != old_jwks
    with pytest.raises(ValueError):
        _issuer(fresh).refreshed_subject(login, CLIENT)
