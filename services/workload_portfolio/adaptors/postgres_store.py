"""PostgreSQL implementation of the WorkloadStore port (runs in the caller's transaction)."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from workload_portfolio.adaptors.tables import workload_revisions, workloads
from workload_portfolio.domain.workload import Revision, WorkloadKey, WorkloadSummary


class PostgresWorkloadStore:
    """Workloads and revisions through ``session`` (the command server's transaction).

    Concurrency (seed 004, 2D): ``lock_workload`` inserts the Workload with
    ``ON CONFLICT DO NOTHING`` and then takes its row lock (``FOR UPDATE``), so
    concurrent preparations of one action run their revision decision one after
    another; the unique constraints on (workload_id, revision) and
    (workload_id, spec_digest) refuse anything that slips past.
    """

    def __init__(self, session: AsyncSession):
        self.session = session

    async def lock_workload(self, key: WorkloadKey, *, action_type: str, family: str,
                            environment: str, service_kind: str | None) -> tuple[str, int | None]:
        """``INSERT ... ON CONFLICT DO NOTHING`` the Workload, then ``SELECT ... FOR UPDATE`` it.

        Returns (workload_id, latest revision or None when it has none yet).
        """
        await self.session.execute(
            insert(workloads)
            .values(
                id=str(uuid.uuid4()),
                project=key.project,
                repository_url=key.repository_url,
                action=key.action,
                action_type=action_type,
                family=family,
                environment=environment,
                service_kind=service_kind,
            )
            .on_conflict_do_nothing(constraint="workloads_one_per_action")
        )
        row = (
            await self.session.execute(
                select(workloads.c.id, workloads.c.latest_revision)
                .where(
                    workloads.c.project == key.project,
                    workloads.c.repository_url == key.repository_url,
                    workloads.c.action == key.action,
                )
                .with_for_update()
            )
        ).one()
        return row.id, (row.latest_revision or None)

    async def revision_with_digest(self, workload_id: str, spec_digest: str) -> Revision | None:
        """``SELECT`` the Workload's revision with this ``spec_digest``; None when absent."""
        row = (
            await self.session.execute(
                _revision_query().where(
                    workload_revisions.c.workload_id == workload_id,
                    workload_revisions.c.spec_digest == spec_digest,
                )
            )
        ).first()
        return _revision(row) if row else None

    async def add_revision(self, revision: Revision) -> Revision:
        """``INSERT`` the revision, then ``UPDATE workloads`` to point at it.

        Returns the revision with its database ``created_at``.
        """
        created_at = (
            await self.session.execute(
                insert(workload_revisions)
                .values(
                    workload_id=revision.workload_id,
                    revision=revision.revision,
                    action_type=revision.action_type,
                    family=revision.family,
                    environment=revision.environment,
                    service_kind=revision.service_kind,
                    commit=revision.commit,
                    branch=revision.branch,
                    spec_json=revision.spec_json,
                    spec_digest=revision.spec_digest,
                    created_by=revision.created_by,
                )
                .returning(workload_revisions.c.created_at)
            )
        ).scalar_one()
        await self.session.execute(
            update(workloads)
            .where(workloads.c.id == revision.workload_id)
            .values(
                latest_revision=revision.revision,
                action_type=revision.action_type,
                family=revision.family,
                environment=revision.environment,
                service_kind=revision.service_kind,
                updated_at=func.now(),
            )
        )
        return Revision(**{**revision.__dict__, "created_at": created_at})

    async def get_revision(self, workload_id: str, revision: int) -> Revision | None:
        """``SELECT`` the revision (``revision`` 0: the latest); None when absent."""
        q = _revision_query().where(workload_revisions.c.workload_id == workload_id)
        if revision:
            q = q.where(workload_revisions.c.revision == revision)
        else:
            q = q.where(workload_revisions.c.revision == workloads.c.latest_revision)
        row = (await self.session.execute(q)).first()
        return _revision(row) if row else None

    async def list_workloads(self, project: str, *, after: int, limit: int,
                             repository_url: str | None) -> tuple[list[WorkloadSummary], int | None]:
        """``SELECT`` up to ``limit`` Workloads with ``seq > after`` and their latest revision.

        Returns (page, the last row's ``seq`` when more remain, else None).
        """
        r = workload_revisions
        q = (
            select(workloads, r.c.commit, r.c.spec_digest)
            .join(r, (r.c.workload_id == workloads.c.id) & (r.c.revision == workloads.c.latest_revision))
            .where(workloads.c.project == project, workloads.c.seq > after)
            .order_by(workloads.c.seq)
            .limit(limit + 1)
        )
        if repository_url:
            q = q.where(workloads.c.repository_url == repository_url)
        rows = (await self.session.execute(q)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        items = [
            WorkloadSummary(
                workload_id=row.id, project=row.project, repository_url=row.repository_url,
                action=row.action, action_type=row.action_type, family=row.family,
                environment=row.environment, service_kind=row.service_kind,
                latest_revision=row.latest_revision, latest_commit=row.commit,
                latest_spec_digest=row.spec_digest, created_at=row.created_at, updated_at=row.updated_at,
            )
            for row in rows
        ]
        return items, (rows[-1].seq if more and rows else None)


def _revision_query():
    r = workload_revisions
    return select(
        r, workloads.c.project, workloads.c.repository_url, workloads.c.action
    ).join(workloads, workloads.c.id == r.c.workload_id)


def _revision(row) -> Revision:
    return Revision(
        workload_id=row.workload_id, project=row.project, repository_url=row.repository_url,
        action=row.action, revision=row.revision, action_type=row.action_type, family=row.family,
        environment=row.environment, service_kind=row.service_kind, commit=row.commit,
        branch=row.branch, spec_json=row.spec_json, spec_digest=row.spec_digest,
        created_by=row.created_by, created_at=row.created_at,
    )
