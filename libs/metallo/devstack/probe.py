"""Health probes for containers (``k8s/`` and ``docker-compose.yml``)::

    python -m metallo.devstack.probe queue workload_portfolio.commands
    python -m metallo.devstack.probe file /var/lib/metallo-runtime/delivery.sqlite

``queue``: exit 0 when the RabbitMQ queue exists and has at least one consumer
(the service is consuming), 1 otherwise. ``file``: exit 0 when the path exists
(the Site Runtime has opened its journal). Reads ``METALLO_AMQP_URL`` and
``METALLO_TOPOLOGY_PREFIX``; prints one line, never a secret.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from metallo.messaging.broker import amqp_url_from_environment


async def queue_consumed(amqp_url: str, queue: str) -> bool:
    """True when ``queue`` exists with ≥ 1 consumer (passive declare, 5 s timeout)."""
    import aio_pika
    from aiormq.exceptions import AMQPError

    try:
        connection = await aio_pika.connect(amqp_url, timeout=5)
    except (TimeoutError, OSError, AMQPError):  # broker unreachable: not healthy
        return False
    try:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return (declared.declaration_result.consumer_count or 0) >= 1
    except AMQPError:  # the queue does not exist
        return False
    finally:
        await connection.close()


def main(argv: list[str] | None = None) -> int:
    """Probe ``queue NAME`` or ``file PATH``; print one line and return 0 (ok) or 1.

    Returns 2 on bad usage. The queue name gets ``METALLO_TOPOLOGY_PREFIX`` prepended.
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("queue", "file"):
        print("usage: python -m metallo.devstack.probe queue NAME | file PATH", file=sys.stderr)
        return 2
    if args[0] == "file":
        ok = Path(args[1]).exists()
    else:
        name = os.environ.get("METALLO_TOPOLOGY_PREFIX", "") + args[1]
        ok = asyncio.run(queue_consumed(
            amqp_url_from_environment(), name))
    print(f"{args[0]} {args[1]}: {'ok' if ok else 'not ready'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
