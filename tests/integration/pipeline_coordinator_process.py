"""A coordinator-only Pipeline Coordination process that SIGKILLs itself at a named point.

``python -m tests.integration.pipeline_coordinator_process`` with
``PC_DATABASE_URL``, ``METALLO_AMQP_URL``, ``METALLO_TOPOLOGY_PREFIX`` and,
optionally, ``PC_KILL_AT=<point>:<n>``: at the n-th time the coordinator reaches
``<point>`` (application/faults.py) the process sends itself SIGKILL — no
cleanup, no rollback but the database's own, exactly a ``kill -9``.
"""

from __future__ import annotations

import asyncio
import os
import signal

from metallo.governance import GovernanceFile
from metallo.messaging import Topology
from metallo.persistence.engine import create_engine
from pipeline_coordination.adaptors.governance_authority import GovernanceAuthority
from pipeline_coordination.adaptors.service import PipelineCoordination
from tests.integration.pipeline_coordination_support import FAST, GOVERNANCE


def kill_hook(spec: str):
    point, _, nth = spec.partition(":")
    seen = {"count": 0}

    async def hook(at: str) -> None:
        if at == point:
            seen["count"] += 1
            if seen["count"] == int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


async def main() -> None:
    engine = create_engine(os.environ["PC_DATABASE_URL"], pool_size=4)
    kwargs = {"fault": kill_hook(os.environ["PC_KILL_AT"])} if os.environ.get("PC_KILL_AT") else {}
    service = PipelineCoordination(
        engine=engine,
        amqp_url=os.environ["METALLO_AMQP_URL"],
        topology=Topology(prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", "")),
        authority=GovernanceAuthority(GovernanceFile(GOVERNANCE)),
        settings=FAST,
        parts=frozenset({"coordinator"}),
        **kwargs,
    )
    await service.start()
    print("coordinator started", flush=True)
    await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main())
