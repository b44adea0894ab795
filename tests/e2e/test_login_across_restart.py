"""A ``metallo dev login`` outlives ``metallo dev down`` / ``metallo dev up``, also when
the stack comes back with another executor: the lab issuer signs with one kept key
(docs/quickstart.md). Real stack, real CLI, a real token and its refresh."""

from __future__ import annotations

import json

import pytest

from metallo.devstack.components import slurm_lab_running
from tests.e2e.conftest import CREDENTIALS, metallo

pytestmark = pytest.mark.e2e


def _expire_access_token() -> None:
    """Make the kept access token look expired: the next command must refresh it."""
    stored = json.loads(CREDENTIALS.read_text())
    stored["expires_at"] = 0
    CREDENTIALS.write_text(json.dumps(stored))


def test_a_login_from_before_dev_down_still_works_after_dev_up(local_stack, _stack_owner):
    assert metallo("run", "list", timeout=120).code == 0  # logged in by local_stack
    token_before = json.loads(CREDENTIALS.read_text())["access_token"]

    assert metallo("dev", "down", timeout=180).code == 0
    other = "slurm" if slurm_lab_running() else "local"
    up = metallo("dev", "up", "--executor", other, timeout=400)
    assert up.code == 0, up.stderr[-3000:]
    _stack_owner.append(True)

    # The access token from before the restart is still accepted...
    assert json.loads(CREDENTIALS.read_text())["access_token"] == token_before
    listed = metallo("run", "list", timeout=120)
    assert listed.code == 0, listed.stderr
    # ...and so is its refresh token, once the access token has run out.
    _expire_access_token()
    refreshed = metallo("run", "list", timeout=120)
    assert refreshed.code == 0, refreshed.stderr
    assert "login" not in refreshed.stderr
    assert json.loads(CREDENTIALS.read_text())["access_token"] != token_before

    if other != "local":  # the next module expects the local executor (it checks anyway)
        assert metallo("dev", "down", timeout=180).code == 0
