"""RerunRun: a new Run of the same Workload revision at the same pinned commits (docs/runs.md).

The rerun is accepted exactly as a launch is (the same row, transition and
``RunAccepted``; planning and the Project's limits follow in the launch worker),
under its own capability ``runs.rerun``, checked now. It keeps the original's
revision and repository commit; the revision's inputs are pinned in the
revision itself, so every commit the Run reads is the same. Lineage:
``rerun_of`` names the original.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.ports import MessageOutbox, ProjectAuthority, RunStore
from execution_core.application.requests import (
    _ID,
    _check_permission,
    _require,
    _require_run_id,
    accept_run,
)
from execution_core.domain import reasons
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected

RERUN_CAPABILITY = "runs.rerun"
# A Pipeline step's (and a collection child's) labels name the step; the rerun is the member's own Run.
_STEP_LABEL_PREFIX = ("pipeline_", "collection_")


def _pinned_commit(run: dict) -> str:
    """The commit the original ran its action at: the hand-off commit, else the planned one, else ""."""
    if run["repository_commit"]:
        return run["repository_commit"]
    for repo in run.get("repositories") or []:
        if repo.get("role") == "action" and repo.get("commit"):
            return str(repo["commit"])
    return ""  # never planned: the revision's own commit, which is immutable


async def rerun_run(
    session: AsyncSession,
    cmd: pb.RerunRun,
    *,
    store: RunStore,
    authority: ProjectAuthority,
    outbox: MessageOutbox,
) -> pb.RerunRunReply:
    """Accept a rerun of ``cmd.run_id``; return the new Run (phase ``accepted``).

    Raises Rejected ``invalid-argument``, ``not-found`` (also for another
    Project's Run), ``permission-denied`` or transient ``governance-unavailable``.
    Idempotency by command_id is the CommandServer's.
    """
    meta = cmd.metadata
    _require(bool(_ID.match(meta.project)), "metadata.project is required")
    _require(bool(_ID.match(meta.acting_member)), "metadata.acting_member is required")
    _require_run_id(cmd.run_id)
    _check_permission(authority, meta.project, meta.acting_member, RERUN_CAPABILITY)
    original = await store.find_run(session, cmd.run_id)
    if original is None or original["project"] != meta.project:
        raise Rejected(reasons.NOT_FOUND, f"no Run {cmd.run_id} in Project {meta.project}")
    commit = _pinned_commit(original)
    labels = {k: v for k, v in (original["labels"] or {}).items() if not k.startswith(_STEP_LABEL_PREFIX)}
    accepted = await accept_run(
        session,
        store,
        outbox,
        {
            "project": meta.project,
            "workload_id": original["workload_id"],
            "revision": original["revision"],
            "initiating_member": meta.acting_member,
            "launch_command_id": meta.command_id,
            "launch_key": None,
            "labels": labels,
            "repository_commit": commit,
            "rerun_of": original["run_id"],
            "parameters": dict(original.get("parameters") or {}),
        },
    )
    return pb.RerunRunReply(
        run_id=accepted.run_id,
        phase=accepted.phase,
        version=accepted.version,
        rerun_of=original["run_id"],
        revision=original["revision"],
        repository_commit=commit,
    )
