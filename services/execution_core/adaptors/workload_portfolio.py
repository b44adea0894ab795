"""Workload-revisions port over Workload Portfolio's ``GetWorkloadRevision`` query.

Used by the launch worker outside any transaction (DESIGN.md, Persistence).
A definite ``not-found`` (or ``permission-denied``: the revision is not the
Project's to read) ends planning; a timeout or an unavailable broker is temporary.

A revision is immutable (seed 001), so a reply is kept for ``cache_seconds`` per
(project, member, workload, revision): a burst of launches of one action asks
Workload Portfolio once, not one request/reply per Run. Only what
WP's read check said of that member can be that old; the launch permit was
checked when the launch was accepted and the member's Site bindings are read
from governance at every planning. Refusals and failures are never kept.
"""

from __future__ import annotations

import copy
import dataclasses
import json

from cachetools import TTLCache

from execution_core.application.ports import RevisionNotFound, RevisionUnavailable
from execution_core.domain.planning import RevisionFacts
from metallo.common.v1 import common_pb2
from metallo.messaging import OutcomeUncertain, Rejected, RequestClient, ServiceUnavailable
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp

DEFINITE = {"not-found", "permission-denied", "invalid-argument"}


class PortfolioRevisions:
    """:class:`~execution_core.application.ports.WorkloadRevisions` through a RequestClient."""

    def __init__(
        self,
        client: RequestClient,
        *,
        timeout: float = 10.0,
        cache_seconds: float = 60.0,
        cache_size: int = 1024,
    ):
        self.client = client
        self.timeout = timeout
        self._cache: TTLCache[tuple[str, str, str, int], RevisionFacts] | None = (
            TTLCache(maxsize=cache_size, ttl=cache_seconds) if cache_seconds > 0 else None
        )

    async def get(
        self, project: str, member: str, workload_id: str, revision: int
    ) -> RevisionFacts:
        """Send ``GetWorkloadRevision`` and map the reply to :class:`RevisionFacts`.

        Waits at most ``self.timeout`` seconds. Raises :class:`RevisionNotFound` on a
        definite refusal (``not-found``, ``permission-denied``, ``invalid-argument``)
        or a spec that is not a JSON object, :class:`RevisionUnavailable` on any other
        refusal, a timeout or an unreachable broker. A reply for the same (project,
        member, workload, revision) younger than ``cache_seconds`` is answered from memory.
        """
        key = (project, member, workload_id, revision)
        if self._cache is not None and (hit := self._cache.get(key)) is not None:
            return _own(hit)
        facts = await self._fetch(project, member, workload_id, revision)
        if self._cache is not None:
            self._cache[key] = facts
            return _own(facts)
        return facts

    async def _fetch(
        self, project: str, member: str, workload_id: str, revision: int
    ) -> RevisionFacts:
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


def _own(facts: RevisionFacts) -> RevisionFacts:
    """A copy with its own spec: a caller changing it cannot change the cached one."""
    return dataclasses.replace(facts, spec=copy.deepcopy(facts.spec))
