"""The Portfolio port over Workload Portfolio's PrepareBranch / PrepareAction commands.

Called by the coordinator outside any transaction. A rejection is definite
(:class:`Refused` with Workload Portfolio's code, e.g. ``actions-invalid``,
``branch-not-found``, ``action-not-found``) except ``source-unavailable`` and
``governance-unavailable``, which are temporary; a timeout or an owner that is
not running is :class:`Unavailable` and is retried with the same command_id.
"""

from __future__ import annotations

from metallo.common.v1 import common_pb2
from metallo.messaging import OutcomeUncertain, Rejected, RequestClient, ServiceUnavailable
from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from pipeline_coordination.application.ports import Refused, Unavailable
from pipeline_coordination.domain import collection
from pipeline_coordination.domain.collection import Shape
from pipeline_coordination.domain.pipeline import PreparedAction

TEMPORARY = {"source-unavailable", "governance-unavailable"}


def collection_shape(c: wp.CollectionShape) -> Shape:
    """The domain Shape of PrepareBranch's CollectionShape, as given: a shape that
    breaks a rule fails its step (``collection-invalid``) when the step starts."""
    return collection.shape([(x.name, list(x.values)) for x in c.matrix], [dict(r.values) for r in c.parameters],
                            c.max_active, c.fail_fast, c.array)


def _prepared(a: wp.PrepareActionReply | wp.PreparedAction) -> PreparedAction:
    """The domain value of PrepareAction's reply, or of one action of PrepareBranch's with its graph."""
    graph = {"needs": tuple(a.needs), "when": a.when or "success"} if isinstance(a, wp.PreparedAction) else {}
    if isinstance(a, wp.PreparedAction) and a.HasField("collection"):
        graph["collection"] = collection_shape(a.collection)
    return PreparedAction(
        action=a.action,
        workload_id=a.workload_id,
        revision=a.revision,
        commit=a.commit,
        family=a.family,
        environment=a.environment,
        service_kind=a.service_kind,
        **graph,
    )


class PortfolioClient:
    """:class:`~pipeline_coordination.application.ports.Portfolio` through a RequestClient."""

    def __init__(self, client: RequestClient, *, timeout: float = 30.0):
        self.client = client
        self.timeout = timeout

    async def _request(self, message):
        try:
            return await self.client.request(message, timeout=self.timeout)
        except Rejected as e:
            if e.code in TEMPORARY:
                raise Unavailable(f"{e.code}: {e.message}", saved=True) from e
            raise Refused(e.code, e.message) from e
        except (OutcomeUncertain, ServiceUnavailable, ConnectionError, TimeoutError) as e:
            raise Unavailable(f"Workload Portfolio did not answer: {e}") from e

    async def prepare_branch(self, command_id, project, member, repository_url, branch):
        """Send ``PrepareBranch``; return (prepared actions in reply order, commit).

        Raises :class:`Refused` on a definite rejection, :class:`Unavailable` on a
        temporary one (``saved=True``) or no answer in time.
        """
        reply = await self._request(
            wp.PrepareBranch(
                metadata=common_pb2.CommandMetadata(command_id=command_id, acting_member=member, project=project),
                repository_url=repository_url,
                branch=branch,
            )
        )
        return [_prepared(a) for a in reply.actions], reply.commit

    async def prepare_action(self, command_id, project, member, repository_url, branch, action):
        """Send ``PrepareAction``; return the :class:`PreparedAction` (Refused / Unavailable)."""
        reply = await self._request(
            wp.PrepareAction(
                metadata=common_pb2.CommandMetadata(command_id=command_id, acting_member=member, project=project),
                repository_url=repository_url,
                branch=branch,
                action=action,
            )
        )
        return _prepared(reply)
