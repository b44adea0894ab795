"""Exit facts of compute exactly (docs/site-runtime.md, Stage script versions: version
4): each command runs as a job step, so a command killed by SIGKILL is recorded as
signal 9 from Slurm's step records, while a command's own ``exit 137`` stays exit code
137. Run under ``flock /tmp/metallo-slurm.lock``."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.scripts import SCRIPT_VERSION
from tests.slurm.lab import Driver, make_repository, observe_until, payload

pytestmark = pytest.mark.slurm


async def _compute_failure(executor, command) -> dict:
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, command)))
    assert executor.journal.attempt(drv.attempt_id).record["script_version"] == SCRIPT_VERSION == 4
    await executor.start(drv.command("start"))
    done = await observe_until(executor, drv, {"succeeded", "failed", "cancelled"})
    obs = done.observation
    assert obs["phase"] == "failed" and obs["failure"]["stage"] == "compute", obs
    return obs


async def test_a_command_killed_by_sigkill_is_recorded_as_signal_9(executor):
    obs = await _compute_failure(executor, {"shell": "kill -9 $$"})
    assert (obs["failure"]["exit_code"], obs["failure"]["signal"]) == (None, 9), obs
    assert (obs["exit_code"], obs["signal"]) == (None, 9)


async def test_a_command_that_exits_137_stays_exit_code_137(executor):
    obs = await _compute_failure(executor, ["sh", "-c", "exit 137"])
    assert (obs["failure"]["exit_code"], obs["failure"]["signal"]) == (137, None), obs
    assert (obs["exit_code"], obs["signal"]) == (137, None)
