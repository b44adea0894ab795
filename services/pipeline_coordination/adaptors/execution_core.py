"""The Runs port over Execution Core's LaunchRun / CancelRun / GetRun.

Called by the coordinator outside any transaction; rejections are definite
(:class:`Refused`) except ``governance-unavailable``; timeouts and an owner
that is not running are :class:`Unavailable` (retried with the same command_id).

Contract gap, isolated in :func:`service_ready`: Execution Core's ``Run`` has no
explicit health/readiness field for a ``reconciled-service``; readiness is read
from the closest fields it has (see that function).
"""

from __future__ import annotations

from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import OutcomeUncertain, Rejected, RequestClient, ServiceUnavailable
from pipeline_coordination.application.ports import LaunchRequest, Refused, Unavailable
from pipeline_coordination.domain.pipeline import RunView

TEMPORARY = {"governance-unavailable"}


def service_ready(run: ec.Run) -> bool:
    """Whether a ``reconciled-service`` Run is healthy with an endpoint (seed 004 §8B).

    Execution Core publishes no readiness signal and no health field, so this
    reads: not terminal, phase ``running``, the Site's latest observation
    ``running`` with ``current`` confidence, and a non-empty ``endpoint``. An
    explicit ``Run.ready``/``health`` field (or a ``ServiceReady`` event) would
    replace this function and nothing else.
    """
    return (
        not run.outcome
        and run.phase == "running"
        and run.observation_phase == "running"
        and run.observation_confidence == "current"
        and bool(run.endpoint)
    )


class ExecutionCoreClient:
    """:class:`~pipeline_coordination.application.ports.Runs` through a RequestClient."""

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
            raise Unavailable(f"Execution Core did not answer: {e}") from e

    async def launch(self, request: LaunchRequest) -> str:
        """Send ``LaunchRun`` and return its ``run_id``.

        Raises :class:`Refused` on a definite rejection, :class:`Unavailable` on a
        temporary one (``saved=True``) or no answer within ``self.timeout`` seconds.
        """
        reply = await self._request(
            ec.LaunchRun(
                metadata=common_pb2.CommandMetadata(
                    command_id=request.command_id, acting_member=request.member, project=request.project
                ),
                workload_id=request.workload_id,
                revision=request.revision,
                launch_key=request.launch_key,
                labels=request.labels,
                repository_commit=request.repository_commit,
                parameters=request.parameters,
                array_group=(ec.ArrayGroup(**vars(request.array_group)) if request.array_group else None),
            )
        )
        return reply.run_id

    async def cancel(self, command_id, project, member, run_id, reason):
        """Send ``CancelRun``; return ``(outcome, "")`` when the Run had ended, else ``("", "")``.

        Raises :class:`Refused` or :class:`Unavailable` as :meth:`launch` does.
        """
        reply = await self._request(
            ec.CancelRun(
                metadata=common_pb2.CommandMetadata(command_id=command_id, acting_member=member, project=project),
                run_id=run_id,
                reason=reason,
            )
        )
        if reply.outcome:
            return reply.outcome, ""
        return "", ""

    async def get(self, project, member, run_id) -> RunView:
        """Send ``GetRun`` and reduce the Run to a :class:`RunView` (Refused / Unavailable)."""
        run = await self._request(
            ec.GetRun(metadata=common_pb2.QueryMetadata(acting_member=member, project=project), run_id=run_id)
        )
        return RunView(
            run_id=run.run_id,
            outcome=run.outcome,
            reason_code=run.reason_code,
            output_commit=run.output_commit,
            ready=service_ready(run),
            endpoint=run.endpoint,
            array_start=run.array_start,
        )
