"""Waiting starts of the local executor (ADR 0015) with the stage launcher and the
Site edge replaced by fakes: a failing launch must not stop the supervision pass, a
deadline passes while the Runtime is full, authority is asked when one leaves the
queue. The real edge and real processes: tests/integration/test_site_runtime_local.py."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

from site_runtime.adaptors.local.executor import LocalExecutor, LocalSettings
from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.ports import SiteCommand

NUMBERS = itertools.count(1)


class Authority:
    """The edge's execution authorisation: refuses the Attempts named in ``refuse``."""

    def __init__(self) -> None:
        self.refuse: set[str] = set()

    async def authorise_execution(self, request):
        if request["attempt_id"] in self.refuse:
            raise EdgeRefused(403, "authorisation-refused", "binding-changed")


class NoGrants:
    """A local repository path needs no grant."""

    async def issue(self, *args):
        raise AssertionError("no grant for a local repository")

    async def release_many(self, ids):
        return {g: "revoked" for g in ids}


def payload(deadline: datetime | None = None) -> dict:
    deadline = deadline or datetime.now(UTC) + timedelta(hours=2)
    return {
        "project": "demo", "workload_id": "w", "revision": 1, "action": "a",
        "action_type": "slurm-job", "family": "queued-batch", "service_kind": None,
        "material_digest": "d" * 64,
        "repository": {"url": "/tmp/nowhere.git", "commit": "a" * 40, "branch": "main"},
        "member": {"id": "m", "site_username": "u", "account": "demo"},
        "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": {"specVersion": 1, "action": "a", "actionType": "slurm-job", "command": ["true"],
                 "preCommands": [], "runtime": {"environment": {}, "workingDirectory": "."},
                 "resources": {"cpus": 1, "memoryMiB": 1, "gpus": 0, "wallTimeSeconds": 60,
                               "nodes": 1}, "inputs": []},
    }


def command(kind: str, attempt: str, body: dict | None = None) -> SiteCommand:
    n = next(NUMBERS)
    return SiteCommand(n, f"c{n}", kind, "s", "local", f"run-{attempt}", attempt, 1, body or {})


def executor(tmp_path, max_active: int = 1) -> LocalExecutor:
    ex = LocalExecutor(
        LocalSettings(workspace_root=tmp_path / "ws", max_active=max_active, poll_seconds=0.05),
        LocalJobsJournal(tmp_path / "jobs.sqlite"), Authority(), NoGrants())

    pids = itertools.count(4_000_000)  # never a real process: nothing is ever signalled
    stopped: set[int] = set()

    def spawn(control, env, log):
        if "broken" in str(control):
            raise OSError("no launcher answered")
        return next(pids), None  # a stage that "runs" until it is stopped

    ex.processes.spawn = spawn
    ex.processes.alive = lambda pid, ticks: pid not in stopped
    ex.processes.terminate = lambda pid, ticks: stopped.add(pid)
    ex.processes.kill = lambda control, pid: stopped.add(pid)
    return ex


async def prepare_and_start(ex: LocalExecutor, attempt: str, **kw):
    assert (await ex.prepare(command("prepare", attempt, payload(**kw)))).outcome == "succeeded"
    return await ex.start(command("start", attempt))


async def test_a_launch_that_fails_does_not_stop_the_supervision_pass(tmp_path):
    ex = executor(tmp_path, max_active=2)
    for busy in ("busy-1", "busy-2"):
        await prepare_and_start(ex, busy)  # the two slots
    assert (await prepare_and_start(ex, "broken")).observation["phase"] == "queued"
    await prepare_and_start(ex, "later")
    for busy in ("busy-1", "busy-2"):
        await ex.cancel(command("cancel", busy, {"reason": "member-request"}))  # slots free
    await ex.start_supervision()
    try:
        for _ in range(100):
            if ex.journal.attempt("later").state != "waiting":
                break
            await asyncio.sleep(0.05)
        # "broken" failed to launch (its stage-in is retried after the launch timeout);
        # the pass went on and started the next one.
        assert ex.journal.attempt("later").state == "stage-in"
        assert not ex._task.done()  # the pass goes on
    finally:
        await ex.stop_supervision()
        ex.close()


async def test_a_deadline_that_passes_while_the_runtime_is_full_fails_the_attempt(tmp_path):
    ex = executor(tmp_path)
    await prepare_and_start(ex, "busy")
    soon = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    assert (await prepare_and_start(ex, "late", deadline=soon)).observation["phase"] == "queued"
    await asyncio.sleep((soon - datetime.now(UTC)).total_seconds() + 0.5)
    seen = await ex.observe(command("observe", "late"))  # the slot is still taken
    assert seen.observation["phase"] == "failed"
    assert seen.observation["failure"]["code"] == "attempt-deadline-passed"
    ex.close()


async def test_authority_refused_when_leaving_the_queue_fails_the_attempt(tmp_path):
    ex = executor(tmp_path)
    await prepare_and_start(ex, "busy")
    await prepare_and_start(ex, "revoked")
    ex.authority.refuse.add("revoked")
    await ex.cancel(command("cancel", "busy", {"reason": "member-request"}))
    seen = await ex.observe(command("observe", "revoked"))
    assert seen.observation["phase"] == "failed"
    assert seen.observation["failure"]["code"] == "authorisation-refused"
    ex.close()
