"""Pipeline commands, queries and the Run-completion handler (seed 004 §8A, §8C, §8E).

Each function runs inside the one transaction its caller (CommandServer,
EventConsumer) opened, and makes no outside call: StartPipeline only records
the Pipeline as ``preparing`` and wakes the coordinator, which prepares the
branch through Workload Portfolio outside any transaction (DESIGN.md,
Persistence: no external call inside an open transaction).

Refusals raise :class:`metallo.messaging.Rejected` with a stable code:
``permission-denied``, ``governance-unavailable``, ``invalid-argument``,
``not-found``.
"""

from __future__ import annotations

import re
import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging import Rejected
from metallo.repository_policy import RepositoryPolicy, RepositoryRefused
from pipeline_coordination.application.ports import (
    AuthorityUnavailable,
    Meta,
    PipelineStore,
    ProjectAuthority,
)
from pipeline_coordination.domain import answers, collection_answers, graph, rerun
from pipeline_coordination.domain import pipeline as d

MAX_REASON = d.MAX_REASON
MAX_PAGE = 200
DEFAULT_PAGE = 50


def check(authority: ProjectAuthority, project: str, member: str, capability: str) -> None:
    """Refuse unless ``member`` holds ``capability`` in ``project`` now (never a cached verdict):
    ``project-not-found`` for a Project the authority does not know, else
    ``permission-denied``. Only the Project asked for is named, never another."""
    if not project or not member:
        raise Rejected("invalid-argument", "metadata.project and metadata.acting_member are required")
    try:
        ok = authority.allowed(project, member, capability)
        known = ok or authority.project_exists(project)
    except AuthorityUnavailable as e:
        raise Rejected("governance-unavailable", str(e)) from None
    if not known:
        raise Rejected("project-not-found", f"Project {project} is unknown to the Project authority")
    if not ok:
        raise Rejected("permission-denied", f"member {member} lacks {capability} in Project {project}")


async def start_pipeline(
    session: AsyncSession,
    store: PipelineStore,
    authority: ProjectAuthority,
    *,
    command_id: str,
    project: str,
    member: str,
    repository_url: str,
    branch: str,
    actions: list[str],
    policy: RepositoryPolicy | None = None,
    max_active: int = 0,
) -> tuple[str, str]:
    """Record a new Pipeline in ``preparing`` with its coordinator work; return (pipeline_id, state).

    Needs ``pipelines.start``. Idempotency by command_id is the CommandServer's
    (its receipt commits with this transaction). With ``policy``, a repository URL
    it refuses is rejected at once with the policy's code (e.g.
    ``repository-host-not-allowed``) instead of failing the Pipeline later in
    Workload Portfolio, which enforces the same policy.
    """
    check(authority, project, member, "pipelines.start")
    try:
        d.validate_start(repository_url, branch, actions, max_active)
    except d.InvalidStart as e:
        raise Rejected("invalid-argument", str(e), {f"problem_{i}": p for i, p in enumerate(e.problems)}) from None
    if policy is not None:
        try:
            policy.check(repository_url)
        except RepositoryRefused as e:
            raise Rejected(e.code, e.message) from None
    p = d.Pipeline(
        pipeline_id=str(uuid.uuid4()),
        project=project,
        initiating_member=member,
        repository_url=repository_url,
        branch=branch,
        requested_actions=tuple(actions),
        max_active=graph.bounded_max_active(max_active),
    )
    await store.insert(session, p, start_command_id=command_id)
    return p.pipeline_id, p.state


async def rerun_pipeline(
    session: AsyncSession,
    store: PipelineStore,
    authority: ProjectAuthority,
    *,
    command_id: str,
    project: str,
    member: str,
    pipeline_id: str,
    failed_only: bool,
    max_active: int = 0,
) -> d.Pipeline:
    """Record a new Pipeline rerunning an ended one's graph (domain/rerun.py); return it (``running``).

    Needs ``pipelines.start`` (each step's Run is launched in the member's name,
    so Execution Core checks ``runs.launch`` too). Rejections: ``invalid-argument``,
    ``not-found``, ``pipeline-not-ended``, ``nothing-to-rerun``. The original is
    read, never changed.
    """
    check(authority, project, member, "pipelines.start")
    original, _meta = await _own(session, store, project, pipeline_id, lock=False)
    try:
        new = rerun.rerun(
            original, pipeline_id=str(uuid.uuid4()), member=member, failed_only=failed_only, max_active=max_active
        )
    except rerun.RerunRefused as e:
        raise Rejected(e.code, str(e)) from None
    except (ValueError, graph.GraphError) as e:
        raise Rejected("invalid-argument", str(e)) from None
    await store.insert(session, new, start_command_id=command_id)
    return new


# A Pipeline id as issued and listed: a lowercase UUID.
_PIPELINE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


async def _own(session: AsyncSession, store: PipelineStore, project: str, pipeline_id: str, *, lock: bool):
    # A malformed id is a wrong request (invalid-argument, exit 2), not a missing
    # Pipeline — as for Run ids in Execution Core.
    if not _PIPELINE_ID.match(pipeline_id):
        raise Rejected(
            "invalid-argument",
            f"pipeline_id {pipeline_id[:80]!r} is not a Pipeline id (a lowercase UUID, "
            "as Pipelines are listed)",
        )
    found = await store.load(session, pipeline_id, lock=lock)
    if found is None or found[0].project != project:
        raise Rejected("not-found", f"no Pipeline {pipeline_id} in Project {project}")
    return found


async def stop_pipeline(
    session: AsyncSession,
    store: PipelineStore,
    authority: ProjectAuthority,
    *,
    project: str,
    member: str,
    pipeline_id: str,
    reason: str,
) -> tuple[bool, str, int]:
    """Record a stop and wake the coordinator; return (recorded, state, version).

    Needs ``pipelines.stop``. The fence: the coordinator saves a step's launch
    intent only while the Pipeline's desired state is ``run``, under the same
    row lock this takes, so a launch not yet made is never made after this
    commits (seed 004 §8C).
    """
    check(authority, project, member, "pipelines.stop")
    if len(reason) > MAX_REASON:
        raise Rejected("invalid-argument", f"reason is longer than {MAX_REASON} characters")
    p, meta = await _own(session, store, project, pipeline_id, lock=True)
    new, recorded = answers.request_stop(p, member, reason)
    if recorded:
        await store.save(session, p, new)
        await store.wake(session, pipeline_id)
        return True, new.state, meta.version + 1
    return False, p.state, meta.version


async def get_pipeline(
    session: AsyncSession, store: PipelineStore, authority: ProjectAuthority, *, project: str, member: str, pipeline_id: str
) -> tuple[d.Pipeline, Meta]:
    """One Pipeline with its steps. Needs ``pipelines.read``."""
    check(authority, project, member, "pipelines.read")
    return await _own(session, store, project, pipeline_id, lock=False)


def bounded_page_size(requested: int) -> int:
    """A page size: 0 → the default, else 1..MAX_PAGE (invalid-argument outside)."""
    if requested < 0 or requested > MAX_PAGE:
        raise Rejected("invalid-argument", f"page_size must be 0..{MAX_PAGE}")
    return requested or DEFAULT_PAGE


async def list_pipelines(
    session: AsyncSession,
    store: PipelineStore,
    authority: ProjectAuthority,
    *,
    project: str,
    member: str,
    page_size: int,
    page_token: str,
    state: str,
) -> tuple[list[tuple[d.Pipeline, Meta]], str]:
    """The Project's Pipelines, newest first; returns (page, next_page_token). Needs ``pipelines.read``.

    The page token is the position after the page's last Pipeline (opaque to callers).
    """
    check(authority, project, member, "pipelines.read")
    size = bounded_page_size(page_size)
    before: int | None = None
    if page_token:
        if not page_token.startswith("p") or not page_token[1:].isdigit() or len(page_token) > 20:
            raise Rejected("invalid-argument", "page_token is not one this service gave")
        before = int(page_token[1:])
    rows = await store.page(session, project, state, before, size + 1)
    more = len(rows) > size
    rows = rows[:size]
    return rows, (f"p{rows[-1][1].seq}" if more and rows else "")


async def run_completed(
    session: AsyncSession,
    store: PipelineStore,
    *,
    run_id: str,
    outcome: str,
    reason_code: str,
    output_commit: str,
    launch_key: str,
    labels: dict[str, str],
    array_start: str = "",
) -> bool:
    """Apply an Execution Core RunCompleted to the step that launched the Run; True when it changed something.

    Runs in the EventConsumer's transaction with the inbox receipt, so a
    redelivery has no second effect; a repeat with another message id, a Run no
    Pipeline launched, or an unknown Pipeline change nothing. Wakes the
    coordinator so the Pipeline advances at once.
    """
    ident = d.step_of_run(labels, launch_key)
    if ident is None:
        return False
    try:
        uuid.UUID(ident.pipeline_id)
    except ValueError:
        return False
    found = await store.load(session, ident.pipeline_id, lock=True)
    if found is None:
        return False
    p, _meta = found
    try:
        step = p.step(ident.step)
    except KeyError:
        return False
    if step.launch_attempt != ident.attempt or bool(ident.item) != step.is_collection:
        return False
    if ident.item:
        new = collection_answers.on_item_completed(p, ident.step, ident.item, run_id, outcome, reason_code,
                                                   output_commit, array_start)
    else:
        new = answers.on_run_completed(p, ident.step, run_id, outcome, reason_code, output_commit)
    if new == p:
        return False
    await store.save(session, p, new)
    await store.wake(session, p.pipeline_id)
    return True
