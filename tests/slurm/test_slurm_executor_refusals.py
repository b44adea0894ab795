"""The slurm executor's refusals and deferrals on the real Slurm lab: what can never run is
refused before any workspace effect or native request (member tokens, GPU class, wall
time, a request no node could hold, a missing commit), what Slurm refuses for good is a
definite refusal, and what may pass later (a refused connection, the submission limit,
the authority's answer) defers and changes nothing (docs/slurm-lab.md; docs/site-runtime.md).

Needs ``scripts/slurm-lab up`` (scripts/test runs it).
"""

from __future__ import annotations

import base64
import json
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
    make_executor,
    make_repository,
    observe_until,
    payload,
    squeue_jobs,
)
from tests.slurm.test_slurm_executor import (
    TERMINAL,
    accounting,
    one_job_per_stage,
    set_limit,
)

pytestmark = pytest.mark.slurm


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
