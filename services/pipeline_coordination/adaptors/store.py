"""PostgreSQL rows of Pipelines and steps (:class:`~pipeline_coordination.application.ports.PipelineStore`).

Every writer of a Pipeline (coordinator, event handler, StopPipeline) locks the
Pipeline row first, reloads, applies a pure domain function and saves, so the
row lock orders them and no writer works from a stale copy.
"""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, case, func, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.persistence.leases import Claim, ClaimStatement, LeaseLost, fenced_update, held
from pipeline_coordination.adaptors import collection_store
from pipeline_coordination.adaptors.tables import pipeline_steps, pipelines
from pipeline_coordination.application.ports import Meta
from pipeline_coordination.domain.collection import Item, Shape
from pipeline_coordination.domain.pipeline import Pipeline, Step

# Built once (ADR 0013): the coordinator's poller runs it every pass.
_CLAIM = ClaimStatement(
    pipelines,
    ready=and_(pipelines.c.active, pipelines.c.next_wake_at <= func.now()),
    order_by=pipelines.c.next_wake_at,
)

_PIPELINE_FIELDS = [f.name for f in fields(Pipeline) if f.name not in ("steps", "pipeline_id", "requested_actions")]
_NEVER = datetime(9999, 1, 1, tzinfo=UTC)  # "only when woken"
# The graph (needs, when) and a carried result are written with the step and never updated.
_GRAPH_FIELDS = ("needs", "when", "carried_from")
_STEP_FIELDS = [f.name for f in fields(Step) if f.name not in ("index", "items", "collection", *_GRAPH_FIELDS)]


def _pipeline_values(p: Pipeline) -> dict[str, Any]:
    values = {name: getattr(p, name) for name in _PIPELINE_FIELDS}
    values["requested_actions"] = list(p.requested_actions)
    return values


def _step_values(s: Step) -> dict[str, Any]:
    return {name: getattr(s, name) for name in _STEP_FIELDS}


def _new_step_values(s: Step) -> dict[str, Any]:
    shape = s.collection.to_json() if s.collection is not None else None
    return _step_values(s) | {"needs": list(s.needs), "run_when": s.when, "carried_from": s.carried_from,
                              "collection": shape}


def _step(row, items: dict[tuple[str, int], tuple[Item, ...]]) -> Step:
    m = row._mapping
    return Step(
        index=m["step_index"],
        needs=tuple(m["needs"] or ()),
        when=m["run_when"],
        carried_from=m["carried_from"],
        collection=Shape.from_json(m["collection"]) if m["collection"] is not None else None,
        items=items.get((m["pipeline_id"], m["step_index"]), ()),
        **{name: m[name] for name in _STEP_FIELDS},
    )


def _pipeline(row, steps: tuple[Step, ...]) -> tuple[Pipeline, Meta]:
    m = row._mapping
    p = Pipeline(
        pipeline_id=m["pipeline_id"],
        requested_actions=tuple(m["requested_actions"] or ()),
        steps=steps,
        **{name: m[name] for name in _PIPELINE_FIELDS},
    )
    meta = Meta(
        seq=m["seq"],
        version=m["version"],
        wake_seq=m["wake_seq"],
        start_command_id=m["start_command_id"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )
    return p, meta


class SqlPipelineStore:
    """The PostgreSQL adaptor of the PipelineStore port."""

    async def insert(self, session: AsyncSession, p: Pipeline, start_command_id: str) -> None:
        """``INSERT`` the ``pipelines`` row, then one ``pipeline_steps`` row per step."""
        await session.execute(
            insert(pipelines).values(
                pipeline_id=p.pipeline_id, start_command_id=start_command_id, **_pipeline_values(p)
            )
        )
        for s in p.steps:
            await session.execute(
                insert(pipeline_steps).values(pipeline_id=p.pipeline_id, step_index=s.index, **_new_step_values(s))
            )
            if s.items:
                await collection_store.save_items(session, p.pipeline_id, None, s)

    async def _steps(self, session: AsyncSession, pipeline_ids: list[str]) -> dict[str, tuple[Step, ...]]:
        rows = await session.execute(
            select(pipeline_steps)
            .where(pipeline_steps.c.pipeline_id.in_(pipeline_ids))
            .order_by(pipeline_steps.c.pipeline_id, pipeline_steps.c.step_index)
        )
        items = await collection_store.load_items(session, pipeline_ids)
        out: dict[str, list[Step]] = {pid: [] for pid in pipeline_ids}
        for r in rows:
            out[r.pipeline_id].append(_step(r, items))
        return {k: tuple(v) for k, v in out.items()}

    async def load(self, session: AsyncSession, pipeline_id: str, *, lock: bool = False) -> tuple[Pipeline, Meta] | None:
        """``SELECT`` the Pipeline (``FOR UPDATE`` when ``lock``) and its steps; None if absent."""
        stmt = select(pipelines).where(pipelines.c.pipeline_id == pipeline_id)
        if lock:
            stmt = stmt.with_for_update()
        row = (await session.execute(stmt)).first()
        if row is None:
            return None
        steps = await self._steps(session, [pipeline_id])
        return _pipeline(row, steps[pipeline_id])

    async def save(self, session: AsyncSession, old: Pipeline, new: Pipeline) -> None:
        """Write what changed from ``old`` to ``new`` (the caller holds the row lock)."""
        if old == new:
            return
        await session.execute(
            update(pipelines)
            .where(pipelines.c.pipeline_id == new.pipeline_id)
            .values(version=pipelines.c.version + 1, updated_at=func.now(), **_pipeline_values(new))
        )
        before = {s.index: s for s in old.steps}
        for s in new.steps:
            if s.index not in before:
                await session.execute(
                    insert(pipeline_steps).values(pipeline_id=new.pipeline_id, step_index=s.index, **_new_step_values(s))
                )
                if s.items:
                    await collection_store.save_items(session, new.pipeline_id, None, s)
            elif any(getattr(before[s.index], f) != getattr(s, f) for f in (*_GRAPH_FIELDS, "collection")):
                raise ValueError(f"pipeline {new.pipeline_id} step {s.index}: the graph is immutable")
            elif before[s.index] != s:
                old_step = before[s.index]
                if replace(old_step, items=s.items) != s:  # the step's own columns changed
                    await session.execute(
                        update(pipeline_steps)
                        .where(pipeline_steps.c.pipeline_id == new.pipeline_id, pipeline_steps.c.step_index == s.index)
                        .values(**_step_values(s))
                    )
                if old_step.items != s.items:
                    await collection_store.save_items(session, new.pipeline_id, old_step, s)

    async def wake(self, session: AsyncSession, pipeline_id: str) -> None:
        """Ask the coordinator to look at the Pipeline now (an event or a stop arrived)."""
        await session.execute(
            update(pipelines)
            .where(pipelines.c.pipeline_id == pipeline_id)
            .values(active=True, next_wake_at=func.now(), wake_seq=pipelines.c.wake_seq + 1)
        )

    async def now(self, session: AsyncSession) -> datetime:
        """PostgreSQL's clock: the only clock the coordinator uses (DESIGN.md, Persistence)."""
        return (await session.execute(select(func.now()))).scalar_one()

    async def claim(self, session: AsyncSession, owner: str, lease_seconds: float, limit: int) -> list[Claim]:
        """Lease due active Pipelines by ``next_wake_at`` (a prebuilt claim, ADR 0013)."""
        return await _CLAIM.claim(session, owner, lease_seconds, limit)

    async def hold(self, session: AsyncSession, claim: Claim, lease_seconds: float) -> None:
        """Renew the lease by ``lease_seconds`` (:func:`fenced_update`; LeaseLost if lost)."""
        await fenced_update(session, pipelines, claim, extend_seconds=lease_seconds)

    async def release(
        self, session: AsyncSession, claim: Claim, *, seen_wake_seq: int, active: bool, wake_in: float | None
    ) -> None:
        """Free the lease; keep any wake that arrived after ``seen_wake_seq`` was read."""
        woken = pipelines.c.wake_seq != seen_wake_seq
        later = (
            func.now() + func.make_interval(0, 0, 0, 0, 0, 0, wake_in)
            if wake_in is not None
            else literal(_NEVER)
        )
        result = await session.execute(
            update(pipelines)
            .where(held(pipelines, claim))
            .values(
                lease_owner=None,
                lease_token=None,
                lease_expires_at=None,
                active=case((woken, literal(True)), else_=literal(bool(active))),
                next_wake_at=case((woken, func.now()), else_=later),
            )
        )
        if result.rowcount != 1:
            raise LeaseLost(f"lease on pipeline {claim.key} lost")

    async def page(
        self, session: AsyncSession, project: str, state: str, before_seq: int | None, limit: int
    ) -> list[tuple[Pipeline, Meta]]:
        """``SELECT`` a keyset page of the Project's Pipelines by ``seq``, with their steps."""
        stmt = select(pipelines).where(pipelines.c.project == project)
        if state:
            stmt = stmt.where(pipelines.c.state == state)
        if before_seq is not None:
            stmt = stmt.where(pipelines.c.seq < before_seq)
        rows = (await session.execute(stmt.order_by(pipelines.c.seq.desc()).limit(limit))).all()
        steps = await self._steps(session, [r.pipeline_id for r in rows]) if rows else {}
        return [_pipeline(r, steps[r.pipeline_id]) for r in rows]

    async def find_collection(self, session: AsyncSession, collection_id: str) -> tuple[str, int] | None:
        """(pipeline_id, step_index) of a collection, or None."""
        return await collection_store.find_collection(session, collection_id)

    async def page_collections(
        self, session: AsyncSession, project: str, pipeline_id: str, after: tuple[int, int] | None, limit: int
    ) -> list[tuple[str, int, int]]:
        """(pipeline_id, step_index, seq) of the Project's collections, newest Pipeline first."""
        return await collection_store.page_collections(session, project, pipeline_id, after, limit)
