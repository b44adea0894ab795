"""PostgreSQL rows of collection children (``collection_items``) and collection look-ups.

Used by :class:`~pipeline_coordination.adaptors.store.SqlPipelineStore` in the
caller's transaction: children are loaded with their Pipeline, inserted all at
once when the step starts (all identities or none), and each changed child is
updated under the Pipeline's row lock.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from pipeline_coordination.adaptors.tables import collection_items, pipeline_steps, pipelines
from pipeline_coordination.domain.collection import Item
from pipeline_coordination.domain.pipeline import Step

_ITEM_FIELDS = [f.name for f in fields(Item) if f.name != "index"]


def _values(i: Item) -> dict[str, Any]:
    return {name: getattr(i, name) for name in _ITEM_FIELDS}


async def load_items(session: AsyncSession, pipeline_ids: list[str]) -> dict[tuple[str, int], tuple[Item, ...]]:
    """Every child of these Pipelines' collection steps, by (pipeline_id, step_index), in item order."""
    rows = await session.execute(
        select(collection_items)
        .where(collection_items.c.pipeline_id.in_(pipeline_ids))
        .order_by(collection_items.c.pipeline_id, collection_items.c.step_index, collection_items.c.item_index)
    )
    out: dict[tuple[str, int], list[Item]] = {}
    for r in rows:
        m = r._mapping
        out.setdefault((m["pipeline_id"], m["step_index"]), []).append(
            Item(index=m["item_index"], **{name: m[name] for name in _ITEM_FIELDS})
        )
    return {k: tuple(v) for k, v in out.items()}


async def save_items(session: AsyncSession, pipeline_id: str, old: Step | None, new: Step) -> None:
    """Insert the children ``new`` has and ``old`` had not (in one statement); update changed ones."""
    before = {i.index: i for i in (old.items if old is not None else ())}
    fresh = [i for i in new.items if i.index not in before]
    if fresh:
        await session.execute(
            insert(collection_items),
            [{"pipeline_id": pipeline_id, "step_index": new.index, "item_index": i.index, **_values(i)} for i in fresh],
        )
    for i in new.items:
        if i.index in before and before[i.index] != i:
            if before[i.index].parameters != i.parameters:
                raise ValueError(f"pipeline {pipeline_id} step {new.index} child {i.index}: values are immutable")
            await session.execute(
                update(collection_items)
                .where(collection_items.c.pipeline_id == pipeline_id, collection_items.c.step_index == new.index,
                       collection_items.c.item_index == i.index)
                .values(**_values(i))
            )


async def find_collection(session: AsyncSession, collection_id: str) -> tuple[str, int] | None:
    """(pipeline_id, step_index) of a collection, or None."""
    row = (await session.execute(
        select(pipeline_steps.c.pipeline_id, pipeline_steps.c.step_index)
        .where(pipeline_steps.c.collection_id == collection_id)
    )).first()
    return (row.pipeline_id, row.step_index) if row else None


async def page_collections(
    session: AsyncSession, project: str, pipeline_id: str, after: tuple[int, int] | None, limit: int
) -> list[tuple[str, int, int]]:
    """(pipeline_id, step_index, pipeline seq) of the Project's collections, newest Pipeline first.

    ``after``: the (seq, step_index) of the previous page's last collection.
    """
    stmt = (
        select(pipeline_steps.c.pipeline_id, pipeline_steps.c.step_index, pipelines.c.seq)
        .join(pipelines, pipelines.c.pipeline_id == pipeline_steps.c.pipeline_id)
        .where(pipelines.c.project == project, pipeline_steps.c.collection_id != "")
    )
    if pipeline_id:
        stmt = stmt.where(pipelines.c.pipeline_id == pipeline_id)
    if after is not None:
        seq, step = after
        stmt = stmt.where(or_(pipelines.c.seq < seq, and_(pipelines.c.seq == seq, pipeline_steps.c.step_index > step)))
    stmt = stmt.order_by(pipelines.c.seq.desc(), pipeline_steps.c.step_index).limit(limit)
    return [(r.pipeline_id, r.step_index, r.seq) for r in await session.execute(stmt)]
