"""The slurm executor on the real Slurm lab (docs/slurm-lab.md; docs/site-runtime.md).

Needs ``scripts/slurm-lab up`` (scripts/test runs it). Every test checks what
Slurm itself recorded (squeue/sacct), not only what the executor says.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import uuid

import pytest

from site_runtime.application.ports import Deferred
from site_runtime.domain.slurm_capacity import NodeRecord, PartitionRecord
from tests.slurm.lab import (
    WORKSPACES,
    Driver,
    LabTokens,
    RecordingGrants,
    git,
    make_executor,
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


async def test_a_missing_commit_fails_stage_in_and_leaves_no_pending_job(executor):
    url, _commit, _bare = make_repository()
    drv = Driver()
    missing = uuid.uuid4().hex + uuid.uuid4().hex[:8]
    await executor.prepare(drv.command("prepare", payload(url, missing, ["true"])))
    await executor.start(drv.command("start"))
    final = await observe_until(executor, drv, TERMINAL)
    failure = final.observation["failure"]
    assert final.observation["phase"] == "failed"
    assert failure["stage"] == "stage-in" and failure["code"] == "repository-commit-missing"
    assert failure["scheduler_state"] == "FAILED" and failure["exit_code"] == 86
    assert set(failure) == {"stage", "scheduler_state", "job_id", "exit_code", "signal", "code"}
    assert squeue_jobs(f"metallo-{drv.attempt_id}") == []
    one_job_per_stage(drv.attempt_id, ("stage-in",))
    # A later observation repeats the same immutable terminal evidence.
    again = await executor.observe(drv.command("observe"))
    assert again.observation == final.observation


async def test_a_staging_job_larger_than_the_node_is_a_definite_refusal(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(tmp_path / "state", tokens, grants, env={"SLURM_STAGING_CPUS": 1000})
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        start = drv.command("start")
        refused = await executor.start(start)
        assert (refused.outcome, refused.code) == ("refused", "slurm-error-2005")
        assert (await executor.start(start)).to_json() == refused.to_json()  # replayed exactly
        assert accounting(drv.attempt_id, 1, timeout=2) == []
        assert len(grants.issued) == 1 and grants.released == [grants.issued[0].grant_id]
    finally:
        await executor.rest.close()


@pytest.mark.parametrize(
    ("resources", "names"),
    [
        ({"cpus": 1000}, "1000 CPUs"),
        ({"memoryMiB": 10_000_000}, "10000000 MiB"),
        ({"nodes": 5}, "5 nodes"),
    ],
)
async def test_a_compute_request_that_can_never_fit_is_refused_at_start_before_stage_in(
    executor, grants, resources, names
):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"], **resources)))
    refused = await executor.start(drv.command("start"))
    assert (refused.outcome, refused.code) == ("refused", "slurm-request-never-fits")
    assert names in refused.message and "partition compute" in refused.message
    assert executor.journal.stages(drv.attempt_id)["stage-in"].state == "prepared"
    assert grants.issued == [] and accounting(drv.attempt_id, 1, timeout=2) == []


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


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(
            lambda t: t.forged(
                exp=int(time.time()) - 5, iat=int(time.time()) - 100, nbf=int(time.time()) - 100
            ),
            id="expired",
        ),
        pytest.param(lambda t: t.forged(iss="https://elsewhere/issuer"), id="wrong-issuer"),
        pytest.param(lambda t: t.forged(azp="another-client"), id="wrong-azp"),
        pytest.param(lambda t: t.forged(kid="unknown-kid"), id="unknown-kid"),
        pytest.param(
            lambda t: ".".join(
                [
                    base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').decode().rstrip("="),
                    t.forged().split(".")[1],
                    "",
                ]
            ),
            id="alg-none",
        ),
    ],
)
async def test_unacceptable_member_tokens_are_refused_before_any_native_request(
    executor, tokens, forge
):
    url, commit, _ = make_repository()
    drv = Driver()
    await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    tokens.override[drv.attempt_id] = forge(tokens)
    refused = await executor.start(drv.command("start"))
    assert (refused.outcome, refused.code) == ("refused", "member-token-rejected")
    assert tokens.override[drv.attempt_id] not in json.dumps(refused.to_json())
    assert executor.rest.list_requests == 0
    assert executor.journal.stages(drv.attempt_id)["stage-in"].state == "prepared"
    assert accounting(drv.attempt_id, 1, timeout=1) == []


async def test_a_refused_connection_sends_the_stage_back_to_prepared(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(tmp_path / "state", tokens, grants, rest_url="http://127.0.0.1:9")
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
        # The partition's capacity is read first: nothing is issued or submitted.
        with pytest.raises(Deferred) as deferred:
            await executor.start(drv.command("start"))
        assert deferred.value.code == "slurm-unavailable" and grants.issued == []
        # With the capacity known (cached), the submission itself meets the refusal.
        executor.capacity._cache["compute"] = (
            time.monotonic(),
            PartitionRecord("compute", (NodeRecord("vm", 8, 16384),)),
        )
        with pytest.raises(Deferred) as deferred:
            await executor.start(drv.command("start"))
        assert deferred.value.code == "slurm-unavailable"
        assert executor.journal.stages(drv.attempt_id)["stage-in"].state == "prepared"
        assert grants.released == [grants.issued[0].grant_id]
    finally:
        await executor.rest.close()


async def test_the_submission_limit_defers_and_the_stage_is_submitted_once_allowed(
    slurm_lab, tmp_path
):
    bob = {"id": "m-bob", "site_username": "bob", "account": "demo"}
    executor = make_executor(tmp_path / "state", LabTokens(bob), RecordingGrants())
    limit = ["sacctmgr", "-i", "modify", "user", "bob", "set"]
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        await executor.prepare(drv.command("prepare", payload(url, commit, ["true"], member=bob)))
        set_limit(limit, "MaxSubmitJobs=0")
        start = drv.command("start")
        with pytest.raises(Deferred) as deferred:
            await executor.start(start)
        assert deferred.value.code == "slurm-submission-limited"
        assert executor.journal.stages(drv.attempt_id)["stage-in"].state == "prepared"
        set_limit(limit, "MaxSubmitJobs=-1")
        result = await executor.start(start)
        assert result.outcome == "succeeded"
        jobs = one_job_per_stage(drv.attempt_id, ("stage-in",))
        assert jobs["stage-in"]["user"] == "bob"
        await executor.cancel(drv.command("cancel", {"reason": "member-request"}))
    finally:
        set_limit(limit, "MaxSubmitJobs=-1")
        await executor.rest.close()


async def test_gpu_class_and_wall_time_are_refused_before_any_workspace_effect(
    slurm_lab, tmp_path, tokens, grants
):
    executor = make_executor(
        tmp_path / "state",
        tokens,
        grants,
        env={"SLURM_GPU_GRES": "a100=gpu:a100", "SLURM_MAX_WALL_SECONDS": 3600},
    )
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        r = await executor.prepare(
            drv.command("prepare", payload(url, commit, ["true"], gpus=1, gpuClass="h100"))
        )
        assert (r.outcome, r.code) == ("refused", "unsupported-slurm-accelerator-class")
        r = await executor.prepare(
            drv.command("prepare", payload(url, commit, ["true"], wallTimeSeconds=7200))
        )
        assert (r.outcome, r.code) == ("refused", "slurm-wall-time-above-limit")
        assert executor.journal.attempt(drv.attempt_id) is None
        assert grants.issued == [] and not (WORKSPACES / drv.attempt_id).exists()
        r = await executor.prepare(
            drv.command("prepare", payload(url, commit, ["true"], gpus=2, gpuClass="a100"))
        )
        assert r.outcome == "succeeded"
        compute = executor.journal.attempt(drv.attempt_id).record["compute"]
        assert compute["tres_per_node"] == "gres:gpu:a100:2"
    finally:
        await executor.rest.close()


# ----------------------------------------------------------------- kill -9 of the Runtime
async def wait_completed(job_id: str, timeout: float = 120.0) -> None:
    """Wait until Slurm reports ``job_id`` COMPLETED (without asking the executor)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sacct_state(job_id) == "COMPLETED":
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"job {job_id} did not complete")


def run_in_process(state_dir, command, fault: str | None = None) -> subprocess.CompletedProcess:
    """Run one command in a separate Runtime process that SIGKILLs itself at ``fault``."""
    args = [
        sys.executable,
        "-m",
        "tests.slurm.runner",
        str(state_dir),
        json.dumps(dataclasses.asdict(command)),
    ]
    if fault:
        args.append(fault)
    return subprocess.run(args, check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("start", "intent:stage-in"),  # intent saved, POST never sent
        ("start", "posted:stage-in"),  # POST answered, job id not saved
        ("observe", "posted:compute"),  # between stages: compute's answer lost
        ("observe", "held:stage-out"),  # job id saved, not yet released
    ],
)
async def test_kill_9_at_each_step_then_restart_gives_exactly_one_job_per_stage(
    slurm_lab, tmp_path, tokens, grants, kind, fault
):
    state = tmp_path / "state"
    url, commit, bare = make_repository()
    drv = Driver()
    executor = make_executor(state, tokens, grants)
    try:
        command = {"shell": "echo recovered > out.txt"}  # an output to push
        await executor.prepare(drv.command("prepare", payload(url, commit, command)))
        start = drv.command("start")
        if kind == "observe":
            await executor.start(start)
            stage = fault.split(":")[1]
            prior = "stage-in" if stage == "compute" else "compute"
            if prior == "compute":
                # Drive the chain here until compute is submitted, and no further.
                end = time.monotonic() + 120
                while executor.journal.stages(drv.attempt_id)["compute"].state != "submitted":
                    assert time.monotonic() < end, "compute was not submitted"
                    try:
                        await executor.observe(drv.command("observe"))
                    except Deferred:
                        pass
                    await asyncio.sleep(0.3)
            await wait_completed(executor.journal.stages(drv.attempt_id)[prior].job_id)
            # The next observation submits the next stage, in a process that dies.
            crashed = run_in_process(state, drv.command("observe"), fault)
        else:
            crashed = run_in_process(state, start, fault)
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        # Restart: a fresh executor on the same journal recovers and finishes the Attempt.
        await executor.rest.close()
        executor.journal.close()
        executor = make_executor(state, tokens, grants)
        if kind == "start":
            recovered = await executor.recover(start)
            assert recovered.outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "succeeded", final.observation
        one_job_per_stage(drv.attempt_id, ("stage-in", "compute", "stage-out"))
        pushed = final.observation["output_commit"]
        assert git("-C", str(bare), "rev-parse", "refs/heads/main") == pushed
        assert git("-C", str(bare), "rev-parse", f"{pushed}^") == commit  # one commit, once
    finally:
        await executor.rest.close()


async def test_kill_9_during_cancellation_then_restart_replays_one_cancellation(
    slurm_lab, tmp_path, tokens, grants
):
    state = tmp_path / "state"
    url, commit, _ = make_repository()
    drv = Driver()
    executor = make_executor(state, tokens, grants)
    try:
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "300"])))
        await executor.start(drv.command("start"))
        await observe_until(executor, drv, {"running"})
        cancel = drv.command("cancel", {"reason": "member-request"})
        crashed = run_in_process(state, cancel, "cancelled:compute")
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.rest.close()
        executor.journal.close()
        executor = make_executor(state, tokens, grants)
        result = await executor.recover(cancel)
        assert (result.outcome, result.message) == ("succeeded", "accepted")
        assert (await executor.cancel(cancel)).to_json() == result.to_json()
        final = await observe_until(executor, drv, TERMINAL)
        assert final.observation["phase"] == "cancelled"
        jobs = one_job_per_stage(drv.attempt_id, ("stage-in", "compute"))
        assert jobs["compute"]["state"].startswith("CANCELLED")
        assert squeue_jobs(f"metallo-{drv.attempt_id}") == []
    finally:
        await executor.rest.close()


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


class _Authority:
    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.requests: list[dict] = []

    async def authorise_execution(self, request):
        from site_runtime.application.delivery import EdgeRefused

        self.requests.append(request)
        if self.refuse:
            raise EdgeRefused(403, "authorisation-refused", "refused")
        return {"authorised": True}


async def test_preparation_asks_current_authority_and_a_refusal_changes_nothing(executor):
    url, commit, _ = make_repository()
    drv = Driver()
    executor.authority = _Authority(refuse=True)
    refused = await executor.prepare(drv.command("prepare", payload(url, commit, ["true"])))
    assert (refused.outcome, refused.code) == ("refused", "authorisation-refused")
    assert executor.journal.attempt(drv.attempt_id) is None
    request = executor.authority.requests[0]
    assert request["attempt_id"] == drv.attempt_id and request["site_username"] == "alice"
    assert request["account"] == "demo" and request["member_id"] == "m-alice"


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
