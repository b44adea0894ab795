"""Commands and queries of the Workload Portfolio over the foundation's request/reply.

PrepareAction / PrepareBranch read actions.yaml from source control *before* the
command's transaction opens (DESIGN.md: no git call inside a transaction): the
server reads first, then the messaging layer runs the handler in one transaction
with the command receipt, the new revisions, their ``WorkloadRevisionCreated``
events (outbox) and the reply. A replayed command_id gets its saved outcome.

ListBranches reads the branches with git before its (read-only) transaction opens.

Rejection codes: project-not-found, permission-denied, governance-unavailable,
invalid-argument, repository-not-found, branch-not-found, commit-not-found,
file-not-found, source-unavailable, actions-invalid, action-not-found, not-found.
"""

from __future__ import annotations

import base64
import logging
from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from metallo.common.v1 import common_pb2
from metallo.messaging import CommandServer, Outbox, Rejected, Topology
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from workload_portfolio.adaptors.postgres_store import PostgresWorkloadStore
from workload_portfolio.application.branches import list_branches
from workload_portfolio.application.ports import BranchList, ProjectAuthority
from workload_portfolio.application.preparation import (
    READ_CAPABILITIES,
    Preparation,
    PreparedRevision,
    SourceRead,
    save_revisions,
    select_actions,
)
from workload_portfolio.domain.errors import InvalidArgument, NotFound, PortfolioError
from workload_portfolio.domain.workload import Revision

log = logging.getLogger(__name__)

CONTEXT = "workload_portfolio"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200


_TRANSIENT = {"source-unavailable", "governance-unavailable"}


def collection_shape(fields: dict | None) -> wp.CollectionShape | None:
    """The CollectionShape of an action's collection fields (ActionsFile.collection), or None."""
    if fields is None:
        return None
    return wp.CollectionShape(
        matrix=[wp.ParameterAxis(name=n, values=list(v)) for n, v in (fields.get("matrix") or {}).items()],
        parameters=[wp.ParameterRecord(values=dict(r)) for r in fields.get("parameters") or []],
        max_active=int(fields.get("maxActive", 0)),
        fail_fast=bool(fields.get("failFast", False)),
        array=str(fields.get("array", "")),
    )


def _rejected(e: PortfolioError) -> Rejected:
    # A dependency that is down now is not a decision: reply, but let a retry
    # with the same command_id be decided afresh.
    return Rejected(e.code, e.message, e.details, transient=e.code in _TRANSIENT)


def _timestamp(dt: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(dt)
    return ts


class PortfolioCommandServer(CommandServer):
    """The context's CommandServer, with the source read moved before the transaction."""

    def __init__(self, engine: AsyncEngine, amqp_url: str, topology: Topology, *,
                 preparation: Preparation, authority: ProjectAuthority, prefetch: int = 16):
        super().__init__(CONTEXT, engine, amqp_url, topology, prefetch=prefetch)
        self.preparation = preparation
        self.authority = authority
        self.events = Outbox(topology)
        # The source read runs before the command's transaction (and not on replays).
        self.command(wp.PrepareAction, before=self._read_source)(self._prepare_action)
        self.command(wp.PrepareBranch, before=self._read_source)(self._prepare_branch)
        self.query(wp.GetWorkloadRevision)(self._get_revision)
        self.query(wp.ListWorkloads)(self._list_workloads)
        # git runs before the query's (read-only) transaction opens.
        self.query(wp.ListBranches, before=self._read_branches)(self._list_branches)

    async def _read_source(self, msg: wp.PrepareAction | wp.PrepareBranch) -> SourceRead:
        """Read actions.yaml at the requested ref, outside any transaction."""
        if isinstance(msg, wp.PrepareAction) and not msg.action:
            raise _rejected(InvalidArgument("action is required"))
        try:
            return await self.preparation.read(
                project=msg.metadata.project, member=msg.metadata.acting_member,
                repository_url=msg.repository_url, branch=msg.branch, commit=msg.commit,
            )
        except PortfolioError as e:
            raise _rejected(e) from None

    def _check_prepare(self, msg: wp.PrepareAction | wp.PrepareBranch) -> None:
        # Access is checked again at decision time, inside the transaction.
        try:
            self.preparation.check_prepare(msg.metadata.project, msg.metadata.acting_member)
        except PortfolioError as e:
            raise _rejected(e) from None

    async def _save(self, session: AsyncSession, read: SourceRead, action: str | None,
                    msg: wp.PrepareAction | wp.PrepareBranch) -> list[PreparedRevision]:
        try:
            chosen = select_actions(read, action)
        except PortfolioError as e:
            raise _rejected(e) from None
        prepared = await save_revisions(
            PostgresWorkloadStore(session), read, chosen,
            project=msg.metadata.project, member=msg.metadata.acting_member,
        )
        for p in prepared:
            if p.created:
                await self.events.publish_event(
                    session, _event(p.revision), aggregate_id=f"workload:{p.revision.workload_id}"
                )
        return prepared

    async def _prepare_action(
        self, session: AsyncSession, msg: wp.PrepareAction, read: SourceRead
    ) -> wp.PrepareActionReply:
        self._check_prepare(msg)
        (p,) = await self._save(session, read, msg.action, msg)
        r = p.revision
        return wp.PrepareActionReply(
            workload_id=r.workload_id, revision=r.revision, commit=r.commit, family=r.family,
            environment=r.environment, action_type=r.action_type, service_kind=r.service_kind or "",
            spec_digest=r.spec_digest, created=p.created, action=r.action,
        )

    async def _prepare_branch(
        self, session: AsyncSession, msg: wp.PrepareBranch, read: SourceRead
    ) -> wp.PrepareBranchReply:
        self._check_prepare(msg)
        prepared = await self._save(session, read, None, msg)
        return wp.PrepareBranchReply(
            commit=read.commit,
            actions=[
                wp.PreparedAction(
                    action=p.revision.action, workload_id=p.revision.workload_id,
                    revision=p.revision.revision, commit=p.revision.commit, family=p.revision.family,
                    environment=p.revision.environment, action_type=p.revision.action_type,
                    service_kind=p.revision.service_kind or "", spec_digest=p.revision.spec_digest,
                    created=p.created, needs=list(read.actions.needs(p.revision.action)),
                    when=read.actions.when(p.revision.action),
                    collection=collection_shape(read.actions.collection(p.revision.action)),
                )
                for p in prepared
            ],
        )

    def _check_read(self, project: str, member: str) -> None:
        try:
            self.authority.check(project, member, READ_CAPABILITIES)
        except PortfolioError as e:
            raise _rejected(e) from None

    async def _get_revision(self, session: AsyncSession, q: wp.GetWorkloadRevision) -> wp.WorkloadRevision:
        if not q.workload_id or q.revision < 0:
            raise Rejected("invalid-argument", "workload_id is required and revision must be >= 0")
        r = await PostgresWorkloadStore(session).get_revision(q.workload_id, q.revision)
        # A Workload of another Project is reported as missing, not as forbidden.
        if r is None or (q.metadata.project and q.metadata.project != r.project):
            raise _rejected(NotFound(f"no revision {q.revision or 'latest'} of Workload {q.workload_id}"))
        self._check_read(r.project, q.metadata.acting_member)
        return revision_message(r)

    async def _list_workloads(self, session: AsyncSession, q: wp.ListWorkloads) -> wp.ListWorkloadsReply:
        project = q.metadata.project
        if not project:
            raise Rejected("invalid-argument", "metadata.project is required")
        self._check_read(project, q.metadata.acting_member)
        size = q.page.page_size or DEFAULT_PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise Rejected("invalid-argument", f"page_size must be 1..{MAX_PAGE_SIZE}")
        after = _decode_token(q.page.page_token)
        items, nxt = await PostgresWorkloadStore(session).list_workloads(
            project, after=after, limit=size, repository_url=q.repository_url or None
        )
        return wp.ListWorkloadsReply(
            workloads=[
                wp.WorkloadSummary(
                    workload_id=w.workload_id, project=w.project, repository_url=w.repository_url,
                    action=w.action, action_type=w.action_type, family=w.family,
                    environment=w.environment, service_kind=w.service_kind or "",
                    latest_revision=w.latest_revision, latest_commit=w.latest_commit,
                    latest_spec_digest=w.latest_spec_digest,
                    created_at=_timestamp(w.created_at), updated_at=_timestamp(w.updated_at),
                )
                for w in items
            ],
            page=common_pb2.PageInfo(next_page_token=_encode_token(nxt) if nxt is not None else ""),
        )


    async def _read_branches(self, q: wp.ListBranches) -> BranchList:
        try:
            return await list_branches(self.preparation.source, self.authority,
                                       project=q.metadata.project,
                                       member=q.metadata.acting_member,
                                       repository_url=q.repository_url)
        except PortfolioError as e:
            raise _rejected(e) from None

    async def _list_branches(self, _session: AsyncSession, _q: wp.ListBranches,
                             found: BranchList) -> wp.ListBranchesReply:
        return wp.ListBranchesReply(
            branches=[wp.Branch(name=name, commit=commit) for name, commit in found.branches],
            default_branch=found.default_branch, truncated=found.truncated)


def revision_message(r: Revision) -> wp.WorkloadRevision:
    """The protobuf form of a saved revision."""
    return wp.WorkloadRevision(
        workload_id=r.workload_id, project=r.project, repository_url=r.repository_url,
        action=r.action, action_type=r.action_type, family=r.family, environment=r.environment,
        service_kind=r.service_kind or "", revision=r.revision, commit=r.commit, branch=r.branch,
        spec_json=r.spec_json, spec_digest=r.spec_digest, created_at=_timestamp(r.created_at),
    )


def _event(r: Revision) -> wp.WorkloadRevisionCreated:
    return wp.WorkloadRevisionCreated(
        workload_id=r.workload_id, project=r.project, repository_url=r.repository_url,
        action=r.action, revision=r.revision, commit=r.commit, branch=r.branch, family=r.family,
        environment=r.environment, action_type=r.action_type, service_kind=r.service_kind or "",
        spec_digest=r.spec_digest, acting_member=r.created_by, created_at=_timestamp(r.created_at),
    )


def _encode_token(seq: int) -> str:
    return base64.urlsafe_b64encode(f"wl:{seq}".encode()).decode().rstrip("=")


def _decode_token(token: str) -> int:
    if not token:
        return 0
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        prefix, seq = raw.split(":", 1)
        if prefix != "wl" or not seq.isdigit():
            raise ValueError(raw)
        return int(seq)
    except (ValueError, UnicodeDecodeError):
        raise Rejected("invalid-argument", "page_token is not one this service issued") from None
