"""The slurm executor on the real Slurm lab (docs/slurm-lab.md; docs/site-runtime.md).

Needs ``scripts/slurm-lab up`` (scripts/test runs it). Every test checks what
Slurm itself recorded (squeue/sacct), not only what the executor says. The Runtime
killed with SIGKILL at each step: test_slurm_executor_kill9.py; refusals (before any
native request, or definite ones from Slurm) and deferrals: test_slurm_executor_refusals.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time

import pytest

from tests.slurm.lab import (
    WORKSPACES,
    Driver,
    git,
    make_repository,
    observe_until,
    payload,
    sacct_jobs,
    squeue_jobs,
)

pytestmark = pytest.mark.slurm

TERMINAL = {"succeeded", "failed", "cancelled"}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def in_slurmctld(job_id: str) -> bool:
    shown = subprocess.run(["scontrol", "show", "job", job_id], check=False, capture_output=True)
    return shown.returncode == 0


def sacct_state(job_id: str) -> str:
    out = subprocess.run(
        ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "state"],
        check=False,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def set_limit(command: list[str], value: str) -> None:
    subprocess.run([*command, value], check=True, capture_output=True)


def names(attempt_id: str) -> dict[str, str]:
    return {
        "stage-in": f"metallo-{attempt_id}-in",
        "compute": f"metallo-{attempt_id}",
        "stage-out": f"metallo-{attempt_id}-out",
    }


def accounting(attempt_id: str, expect: int, timeout: float = 30.0) -> list[dict[str, str]]:
    """The Attempt's jobs in slurmdbd, waiting for accounting to catch up to ``expect`` rows."""
    end = time.monotonic() + timeout
    rows = sacct_jobs(f"metallo-{attempt_id}")
    while len(rows) < expect and time.monotonic() < end:
        time.sleep(0.5)
        rows = sacct_jobs(f"metallo-{attempt_id}")
    return rows


def one_job_per_stage(attempt_id: str, stages: tuple[str, ...]) -> dict[str, dict[str, str]]:
    rows = accounting(attempt_id, len(stages))
    by_name: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    wanted = {names(attempt_id)[s] for s in stages}
    assert set(by_name) == wanted, rows
    assert all(len(v) == 1 for v in by_name.values()), rows
    return {s: by_name[names(attempt_id)[s]][0] for s in stages}


class _Permits:
    """The Site edge's read permits (a port the real edge implements; tested there)."""

    def __init__(self) -> None:
        self.refuse = False
        self.requests: list[dict] = []
        self.checks = 0

    async def authorise_execution(self, request):
        return {"authorised": True}

    async def authorise_read(self, request):
        from site_runtime.application.log_reads import PermitRefused

        self.requests.append(request)
        if self.refuse:
            raise PermitRefused("authorisation-refused", "viewer-not-authorised")
        return {"permit_id": "rp-1", **request}

    async def check_read_permit(self, permit_id):
        self.checks += 1
        return {"permit_id": permit_id}


async def test_a_full_attempt_runs_three_exact_jobs_as_the_member_and_pushes_its_output(
    executor, tokens, grants, caplog
):
    caplog.set_level(logging.DEBUG)
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drv = Driver()
    command = {"shell": "env; id -un > whoami.txt; echo computed > out.txt"}
    prepared = await executor.prepare(drv.command("prepare", payload(url, commit, command)))
    assert prepared.outcome == "succeeded" and prepared.observation["phase"] == "prepared"
    started = await executor.start(drv.command("start"))
    assert started.outcome == "succeeded" and started.observation["phase"] == "queued"
    assert [j["stage"] for j in started.native_jobs] == ["stage-in"]

    final = await observe_until(executor, drv, TERMINAL)
    obs = final.observation
    assert obs["phase"] == "succeeded", obs
    assert obs["failure"] is None and obs["exit_code"] == 0

    # Slurm's own record: exact names, comments, partitions, account and Unix user.
    jobs = one_job_per_stage(drv.attempt_id, ("stage-in", "compute", "stage-out"))
    for stage, partition in (
        ("stage-in", "staging"),
        ("compute", "compute"),
        ("stage-out", "staging"),
    ):
        assert jobs[stage]["partition"] == partition
        assert jobs[stage]["user"] == "alice" and jobs[stage]["account"] == "demo"
        assert jobs[stage]["comment"] == f"metallo:{drv.run_id}:{drv.attempt_id}:{stage}"
        assert jobs[stage]["state"] == "COMPLETED"
    ids = {j["stage"]: j["job_id"] for j in final.native_jobs}
    assert ids == {s: jobs[s]["job_id"] for s in jobs}
    stages = executor.journal.stages(drv.attempt_id)
    assert "dependency" not in stages["stage-in"].request["job"]
    assert stages["compute"].request["job"]["dependency"] == f"afterok:{ids['stage-in']}"
    assert stages["stage-out"].request["job"]["dependency"] == f"afterok:{ids['compute']}"
    assert all(s.request["job"]["requeue"] is False for s in stages.values())

    # The output commit was pushed to the branch and holds the compute's files.
    assert git("-C", str(bare), "rev-parse", "refs/heads/main") == obs["output_commit"]
    assert git("-C", str(bare), "show", f"{obs['output_commit']}:out.txt") == "computed"
    assert git("-C", str(bare), "show", f"{obs['output_commit']}:whoami.txt") == "alice"
    assert git("-C", str(bare), "rev-parse", f"{obs['output_commit']}^") == commit

    # Grants: one per staging job, each released; the workspace is gone, the logs stay.
    assert len(grants.issued) == 2 and sorted(grants.released) == sorted(
        g.grant_id for g in grants.issued
    )
    assert not (WORKSPACES / drv.attempt_id).exists()
    logs = {
        s: (WORKSPACES / f"{drv.attempt_id}.{s}.log").read_text() for s in names(drv.attempt_id)
    }
    assert "exit status 0" in logs["compute"]
    # A log is read only under the viewer's read permit (seed 001, Private Run log commands).
    permits = _Permits()
    executor.authority = permits
    read = await executor.read_log(
        drv.command("read-log", {"stage": "compute", "max_bytes": 100000, "viewer": "m-alice"})
    )
    assert read.outcome == "succeeded" and read.observation["log"]["text"] == logs["compute"]
    assert permits.requests[0]["path"] == "logs/compute.log" and permits.checks == 2
    permits.refuse = True
    refused = await executor.read_log(
        drv.command("read-log", {"stage": "compute", "max_bytes": 100000, "viewer": "m-bob"})
    )
    assert (refused.outcome, refused.code, refused.observation) == (
        "refused",
        "authorisation-refused",
        None,
    )

    # No member token (nor Git token) in the journal, the logs, the job environment or log lines.
    journal_bytes = b"".join(
        p.read_bytes()
        for p in executor.journal.path.parent.iterdir()
        if p.name.startswith("jobs.sqlite")
    )
    secrets = [*tokens.issued, *(g.token for g in grants.issued)]
    assert secrets
    for secret in secrets:
        assert secret.encode() not in journal_bytes
        assert all(secret not in text for text in logs.values())
        assert secret not in caplog.text
    assert "METALLO_GIT_PASSWORD" not in logs["compute"]  # the compute job has no Git credential
    for token in tokens.issued:
        assert "X-SLURM-USER-TOKEN" not in logs["compute"] and token not in json.dumps(
            final.to_json()
        )


async def test_cancellation_during_compute_stops_the_chain_and_its_result_is_replayed(
    executor, grants
):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "300"])))
    await executor.start(drv.command("start"))
    running = await observe_until(executor, drv, {"running"})
    assert [j["stage"] for j in running.native_jobs] == ["stage-in", "compute"]
    cancel = drv.command("cancel", {"reason": "member-request"})
    result = await executor.cancel(cancel)
    assert (result.outcome, result.message) == ("succeeded", "accepted")
    assert (await executor.cancel(cancel)).to_json() == result.to_json()
    later = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert later.message == "accepted"
    final = await observe_until(executor, drv, TERMINAL)
    assert final.observation["phase"] == "cancelled"
    jobs = one_job_per_stage(drv.attempt_id, ("stage-in", "compute"))
    assert jobs["compute"]["state"].startswith("CANCELLED")
    assert squeue_jobs(f"metallo-{drv.attempt_id}") == []
    assert sorted(grants.released) == sorted(g.grant_id for g in grants.issued)
    compute_log = (WORKSPACES / f"{drv.attempt_id}.compute.log").read_text()
    assert "stopped by SIGTERM" in compute_log and "exit status 0" not in compute_log


async def test_a_finished_job_is_found_in_accounting_after_it_left_slurmctld(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    started = await executor.start(drv.command("start"))
    job_id = started.native_jobs[0]["job_id"]
    end = time.monotonic() + 150
    while time.monotonic() < end:
        if not in_slurmctld(job_id):
            break
        await asyncio.sleep(1)
    else:
        raise AssertionError("the stage-in job never left slurmctld")
    result = await executor.observe(drv.command("observe"))
    stage_in = executor.journal.stages(drv.attempt_id)["stage-in"].native
    assert stage_in["source"] == "slurmdbd" and stage_in["state"] == "COMPLETED"
    assert [j["stage"] for j in result.native_jobs] == ["stage-in", "compute"]
    assert (await observe_until(executor, drv, TERMINAL)).observation["phase"] == "succeeded"


async def test_cancellation_before_start_ends_the_attempt_without_any_job(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    cancelled = await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    assert (cancelled.outcome, cancelled.message) == ("succeeded", "not-found")
    observed = await executor.observe(drv.command("observe"))
    assert observed.observation["phase"] == "cancelled" and observed.native_jobs == []
    started = await executor.start(drv.command("start"))
    assert started.observation["phase"] == "cancelled" and started.native_jobs == []
    assert accounting(drv.attempt_id, 1, timeout=1) == []


async def test_one_observe_cycle_makes_one_native_list_request_for_all_attempts(executor):
    url, commit, _ = make_repository()
    drivers = [Driver() for _ in range(3)]
    for drv in drivers:
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "60"])))
        await executor.start(drv.command("start"))
    executor.rest.list_cache_seconds = 30.0
    executor.rest.forget_list()
    before = executor.rest.list_requests
    results = await asyncio.gather(*(executor.observe(d.command("observe")) for d in drivers))
    assert executor.rest.list_requests - before == 1
    assert all(r.observation["phase"] in ("queued", "running") for r in results)
    for drv in drivers:
        assert (
            await executor.cancel(drv.command("cancel", {"reason": "test"}))
        ).message == "accepted"
