"""Exit facts of compute exactly (docs/site-runtime.md, Stage script versions: versions
4 and 5): each command runs as a job step, so a command killed by SIGKILL is recorded as
signal 9 from Slurm's step records, while a command's own ``exit 137`` stays exit code
137; the log keeps a killed step's last lines and names the signal (version 5). Run
under ``flock /tmp/metallo-slurm.lock``."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.scripts import SCRIPT_VERSION
from tests.slurm.lab import WORKSPACES, Driver, make_repository, observe_until, payload

pytestmark = pytest.mark.slurm


async def _compute_failure(executor, command) -> dict:
    obs, _ = await _compute_failure_and_log(executor, command)
    return obs


async def _compute_failure_and_log(executor, command) -> tuple[dict, str]:
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, command)))
    assert executor.journal.attempt(drv.attempt_id).record["script_version"] == SCRIPT_VERSION == 5
    await executor.start(drv.command("start"))
    done = await observe_until(executor, drv, {"succeeded", "failed", "cancelled"})
    obs = done.observation
    assert obs["phase"] == "failed" and obs["failure"]["stage"] == "compute", obs
    return obs, (WORKSPACES / f"{drv.attempt_id}.compute.log").read_text()


async def test_a_command_killed_by_sigkill_is_recorded_as_signal_9(executor):
    obs = await _compute_failure(executor, {"shell": "kill -9 $$"})
    assert (obs["failure"]["exit_code"], obs["failure"]["signal"]) == (None, 9), obs
    assert (obs["exit_code"], obs["signal"]) == (None, 9)


async def test_a_command_that_exits_137_stays_exit_code_137(executor):
    obs = await _compute_failure(executor, ["sh", "-c", "exit 137"])
    assert (obs["failure"]["exit_code"], obs["failure"]["signal"]) == (137, None), obs
    assert (obs["exit_code"], obs["signal"]) == (137, None)


async def test_a_killed_steps_last_lines_are_kept_and_its_log_names_the_signal(executor):
    # Slurm's I/O forwarding dropped a killed step's last lines about one time in two;
    # each run here writes a long line and two short ones right before SIGKILL.
    for n in range(6):
        script = f"seq 1 2000 | tr '\\n' ' '; echo; echo 'next to last {n}'; printf 'last {n}'; kill -9 $$"
        obs, log = await _compute_failure_and_log(executor, {"shell": script})
        assert obs["failure"]["signal"] == 9, obs
        assert f"next to last {n}\nlast {n}\n" in log, log[-400:]
        assert "command 0 was killed by signal 9 (SIGKILL)" in log, log[-400:]
        assert "exited with 137" not in log


async def test_a_commands_own_exit_137_is_logged_as_an_exit(executor):
    obs, log = await _compute_failure_and_log(executor, ["sh", "-c", "echo bye; exit 137"])
    assert (obs["failure"]["exit_code"], obs["failure"]["signal"]) == (137, None), obs
    assert "bye\n" in log and "command 0 exited with 137" in log and "signal" not in log
