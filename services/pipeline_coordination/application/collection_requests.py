"""Collection commands and queries: CancelCollection, GetCollection, ListCollections (ADR 0031).

Each runs in the one transaction its caller opened and makes no outside call:
CancelCollection records the member's cancel on the step under the Pipeline's
row lock and wakes the coordinator, which cancels the children's Runs.
Refusals raise :class:`metallo.messaging.Rejected` (``permission-denied``,
``governance-unavailable``, ``invalid-argument``, ``not-found``).
"""

from __future__ import annotations

import re

from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging import Rejected
from pipeline_coordination.application.ports import PipelineStore, ProjectAuthority
from pipeline_coordination.application.requests import MAX_REASON, bounded_page_size, check
from pipeline_coordination.domain import collection_answers
from pipeline_coordination.domain import pipeline as d

_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


async def _own(session: AsyncSession, store: PipelineStore, project: str, collection_id: str, *, lock: bool
               ) -> tuple[d.Pipeline, d.Step]:
    if not _ID.match(collection_id):
        raise Rejected("invalid-argument", f"collection_id {collection_id[:80]!r} is not a collection id "
                       "(a lowercase UUID, as collections are listed)")
    where = await store.find_collection(session, collection_id)
    found = await store.load(session, where[0], lock=lock) if where else None
    if found is None or found[0].project != project:
        raise Rejected("not-found", f"no collection {collection_id} in Project {project}")
    p = found[0]
    return p, p.step(where[1])


async def get_collection(session: AsyncSession, store: PipelineStore, authority: ProjectAuthority, *,
                         project: str, member: str, collection_id: str) -> tuple[d.Pipeline, d.Step]:
    """The collection's Pipeline and step (with every child). Needs ``pipelines.read``."""
    check(authority, project, member, "pipelines.read")
    return await _own(session, store, project, collection_id, lock=False)


async def carried_pins(session: AsyncSession, store: PipelineStore, s: d.Step) -> dict[str, tuple[int, str]]:
    """{Pipeline id: (revision, pinned commit)} of the step in each Pipeline the collection's
    carried children come from: the revision and commit their Runs ran (a carried child keeps
    its own; the children run again run at the step's)."""
    pins: dict[str, tuple[int, str]] = {}
    for source in sorted({i.carried_from for i in s.items if i.carried_from}):
        found = await store.load(session, source)
        if found is not None and any(step.index == s.index for step in found[0].steps):
            step = found[0].step(s.index)
            pins[source] = (step.revision, step.pinned_commit)
    return pins


async def cancel_collection(session: AsyncSession, store: PipelineStore, authority: ProjectAuthority, *,
                            project: str, member: str, collection_id: str, reason: str
                            ) -> tuple[bool, d.Pipeline, d.Step]:
    """Record a member's cancel of the collection and wake the coordinator; (recorded, Pipeline, step).

    Needs ``pipelines.stop``. The fence: a child's launch intent is saved only
    while its collection does not halt, under the same row lock this takes, so
    no child is launched after this commits.
    """
    check(authority, project, member, "pipelines.stop")
    if len(reason) > MAX_REASON:
        raise Rejected("invalid-argument", f"reason is longer than {MAX_REASON} characters")
    p, s = await _own(session, store, project, collection_id, lock=True)
    new, recorded = collection_answers.request_cancel(p, s.index, member, reason)
    if recorded:
        await store.save(session, p, new)
        await store.wake(session, p.pipeline_id)
    return recorded, new, new.step(s.index)


async def list_collections(session: AsyncSession, store: PipelineStore, authority: ProjectAuthority, *,
                           project: str, member: str, pipeline_id: str, size: int, page_token: str
                           ) -> tuple[list[tuple[d.Pipeline, d.Step]], str]:
    """The Project's collections, newest Pipeline first; returns (page of (Pipeline, step), next_page_token).

    Needs ``pipelines.read``.
    """
    check(authority, project, member, "pipelines.read")
    limit = bounded_page_size(size)
    after = None
    if page_token:
        m = re.fullmatch(r"c(\d{1,18})\.(\d{1,4})", page_token)
        if not m:
            raise Rejected("invalid-argument", "page_token is not one this service gave")
        after = (int(m.group(1)), int(m.group(2)))
    rows = await store.page_collections(session, project, pipeline_id, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    out = []
    for pid, step, _seq in rows:
        found = await store.load(session, pid)
        assert found is not None
        p = found[0]
        out.append((p, p.step(step)))
    token = f"c{rows[-1][2]}.{rows[-1][1]}" if more and rows else ""
    return out, token
