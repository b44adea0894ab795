"""The member-token owner's permanent refusals end the Attempt on the real Slurm lab
(seed 001; domain/consent.py): no deferral holds the Site's stream, so a later
command of another member is handled right after. Run under
``flock /tmp/metallo-slurm.lock``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from metallo.identity.verify import MemberCredential
from site_runtime.application.delivery import EdgeRefused
from site_runtime.application.ports import Deferred
from site_runtime.domain.consent import CONSENT_REFUSED
from tests.slurm.lab import (
    MEMBER,
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

pytestmark = pytest.mark.slurm

BOB = {"id": "m-bob", "site_username": "bob", "account": "demo"}


class EdgeTokens:
    """Member tokens from the lab issuer per member; for an Attempt in ``refusing`` the
    Site edge's answer ``EdgeRefused(403, authorisation-refused, reason)`` instead (its
    shape for accepted-work authority that no longer holds)."""

    def __init__(self) -> None:
        self.members = {MEMBER["id"]: LabTokens(MEMBER), BOB["id"]: LabTokens(BOB)}
        self.owner: dict[str, str] = {}
        self.refusing: dict[str, tuple[int, str]] = {}  # attempt -> (status, reason)
        self.asked: list[str] = []

    async def member_token(self, attempt_id: str) -> MemberCredential:
        self.asked.append(attempt_id)
        if attempt_id in self.refusing:
            status, reason = self.refusing[attempt_id]
            raise EdgeRefused(status, "authorisation-refused", "refused", reason)
        return await self.members[self.owner[attempt_id]].member_token(attempt_id)


def _admin_cancel(job_id: str) -> None:
    subprocess.run(["scancel", job_id], check=False, cwd="/tmp")


def workspace(attempt_id: str) -> Path:
    return WORKSPACES / attempt_id


async def _bob_crosses(executor, tokens: EdgeTokens, url: str, commit: str) -> None:
    """Another member's Attempt is launched, observed and cancelled."""
    other = Driver()
    tokens.owner[other.attempt_id] = BOB["id"]
    await executor.prepare(
        other.command("prepare", payload(url, commit, ["sleep", "300"], member=BOB))
    )
    assert (await executor.start(other.command("start"))).outcome == "succeeded"
    await observe_until(executor, other, {"queued", "running"})
    cancelled = await executor.cancel(other.command("cancel", {"reason": "test"}))
    assert cancelled.message == "accepted"


@pytest.fixture
def edge_tokens() -> EdgeTokens:
    return EdgeTokens()


async def test_a_permanent_refusal_before_stage_in_rejects_start_and_another_member_crosses(
    slurm_lab, tmp_path, edge_tokens
):
    executor = make_executor(tmp_path / "state", edge_tokens, RecordingGrants())
    try:
        url, commit, _ = make_repository()
        refused = Driver()
        edge_tokens.owner[refused.attempt_id] = MEMBER["id"]
        await executor.prepare(refused.command("prepare", payload(url, commit, ["true"])))
        # A temporary refusal (a credential being rotated) defers the same start.
        edge_tokens.refusing[refused.attempt_id] = (401, None)
        with pytest.raises(Deferred) as deferred:
            await executor.start(refused.command("start"))
        assert deferred.value.code == "identity-provider-unavailable"
        # The member's binding changed: refused for good, a rejection, not a deferral.
        edge_tokens.refusing[refused.attempt_id] = (403, "binding-changed")
        start = await executor.start(refused.command("start"))
        assert (start.outcome, start.code) == ("refused", CONSENT_REFUSED), start
        assert "binding-changed" in start.message and "refused" in start.message
        stage_in = executor.journal.stages(refused.attempt_id)["stage-in"]
        assert (stage_in.state, stage_in.job_id) == ("refused", None)
        assert stage_in.refusal == {"code": CONSENT_REFUSED, "reason": "binding-changed"}
        assert not workspace(refused.attempt_id).exists()
        assert squeue_jobs(f"metallo-{refused.attempt_id}") == []
        # The saved refusal is replayed: even with a token again nothing is submitted.
        del edge_tokens.refusing[refused.attempt_id]
        again = await executor.start(refused.command("start"))
        assert (again.outcome, again.code) == ("refused", CONSENT_REFUSED)
        assert squeue_jobs(f"metallo-{refused.attempt_id}") == []

        await _bob_crosses(executor, edge_tokens, url, commit)
    finally:
        await executor.rest.close()
        executor.journal.close()


async def test_a_permanent_refusal_between_stages_fails_the_attempt_and_does_not_hold(
    slurm_lab, tmp_path, edge_tokens
):
    executor = make_executor(tmp_path / "state", edge_tokens, RecordingGrants())
    compute_job = None
    try:
        url, commit, _ = make_repository()
        drv = Driver()
        edge_tokens.owner[drv.attempt_id] = MEMBER["id"]
        await executor.prepare(drv.command("prepare", payload(url, commit, ["sleep", "300"])))
        await executor.start(drv.command("start"))
        running = await observe_until(executor, drv, {"running"})
        stage_in_job = running.native_jobs[0]["job_id"]
        compute_job = executor.journal.stages(drv.attempt_id)["compute"].job_id
        assert compute_job and workspace(drv.attempt_id).is_dir()

        # The Project no longer has the Site: the token owner refuses for good.
        edge_tokens.refusing[drv.attempt_id] = (403, "site-not-in-project")
        ended = await executor.observe(drv.command("observe"))
        obs = ended.observation
        assert obs["phase"] == "failed", obs
        assert obs["failure"]["code"] == CONSENT_REFUSED
        assert obs["failure"]["stage"] == "compute" and obs["failure"]["job_id"] == compute_job
        # Completed native jobs keep their recorded identities; cleanup is done.
        assert [j["job_id"] for j in ended.native_jobs][:2] == [stage_in_job, compute_job]
        assert not workspace(drv.attempt_id).exists()
        assert executor.journal.attempt(drv.attempt_id).cleanup_state == "done"
        # A later observe and a cancel answer from the saved end, never deferred.
        assert (await executor.observe(drv.command("observe"))).observation == obs
        cancel = await executor.cancel(drv.command("cancel", {"reason": "test"}))
        assert cancel.message == "already-terminal" and cancel.observation == obs
        stage_out = executor.journal.stages(drv.attempt_id)["stage-out"]
        assert stage_out.job_id is None

        await _bob_crosses(executor, edge_tokens, url, commit)
    finally:
        if compute_job:
            # The member may no longer act: the lab's administrator ends the job.
            _admin_cancel(compute_job)
        await executor.rest.close()
        executor.journal.close()
