"""Workload-revisions port over Workload Portfolio's ``GetWorkloadRevision`` query.

Used by the launch worker outside any transaction (DESIGN.md, Persistence).
A definite ``not-found`` (or ``permission-denied``: the revision is not the
Project's to read) ends planning; a timeout or an unavailable broker is temporary.
"""

from __future__ import annotations

import json

from execution_core.application.ports import RevisionNotFound, RevisionUnavailable
from execution_core.domain.planning import RevisionFacts
from metallo.common.v1 import common_pb2
from metallo.messaging import OutcomeUncertain, Rejected, RequestClient, ServiceUnavailable
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

DEFINITE = {"not-found", "permission-denied", "invalid-argument"}


class PortfolioRevisions:
    """:class:`~execution_core.application.ports.WorkloadRevisions` through a RequestClient."""

    def __init__(self, client: RequestClient, *, timeout: float = 10.0):
        self.client = client
        self.timeout = timeout

    async def get(
        self, project: str, member: str, workload_id: str, revision: int
    ) -> RevisionFacts:
        """Send ``GetWorkloadRevision`` and map the reply to :class:`RevisionFacts`.

        Waits at most ``self.timeout`` seconds. Raises :class:`RevisionNotFound` on a
        definite refusal (``not-found``, ``permission-denied``, ``invalid-argument``)
        or a spec that is not a JSON object, :class:`RevisionUnavailable` on any other
        refusal, a timeout or an unreachable broker.
        """
        query = wp.GetWorkloadRevision(
            metadata=common_pb2.QueryMetadata(acting_member=member, project=project),
            workload_id=workload_id,
            revision=revision,
        )
        try:
            reply = await self.client.request(query, timeout=self.timeout)
        except Rejected as exc:
            if exc.code in DEFINITE:
                raise RevisionNotFound(f"{exc.code}: {exc.message}") from exc
            raise RevisionUnavailable(f"{exc.code}: {exc.message}") from exc
        except (OutcomeUncertain, ServiceUnavailable, ConnectionError, TimeoutError) as exc:
            raise RevisionUnavailable(f"Workload Portfolio did not answer: {exc}") from exc
        try:
            spec = json.loads(reply.spec_json) if reply.spec_json else {}
        except ValueError as exc:
            raise RevisionNotFound(f"revision spec is not JSON: {exc}") from exc
        if not isinstance(spec, dict):
            raise RevisionNotFound("revision spec is not an object")
        return RevisionFacts(
            workload_id=reply.workload_id,
            project=reply.project,
            revision=reply.revision,
            repository_url=reply.repository_url,
            action=reply.action,
            action_type=reply.action_type,
            family=reply.family,
            environment=reply.environment,
            service_kind=reply.service_kind,
            commit=reply.commit,
            branch=reply.branch,
            spec=spec,
            spec_digest=reply.spec_digest,
        )
