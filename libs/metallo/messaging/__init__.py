"""Messaging over RabbitMQ with protobuf bodies (DESIGN.md, Messaging; docs/messaging.md).

- :class:`Topology` — exchange, queue and routing-key names.
- :class:`Outbox` / :class:`OutboxRelay` — transactional outbox and its relay.
- :class:`EventConsumer` — event handlers with inbox receipts.
- :class:`CommandServer` / :class:`RequestClient` — typed request/reply.
"""

from metallo.messaging.client import RequestClient, ServiceUnavailable
from metallo.messaging.errors import OutcomeUncertain, PoisonMessage, Rejected
from metallo.messaging.events import EventConsumer
from metallo.messaging.outbox import Outbox
from metallo.messaging.relay import OutboxRelay
from metallo.messaging.server import CommandServer
from metallo.messaging.topology import Topology

__all__ = [
    "CommandServer",
    "EventConsumer",
    "Outbox",
    "OutboxRelay",
    "OutcomeUncertain",
    "PoisonMessage",
    "Rejected",
    "RequestClient",
    "ServiceUnavailable",
    "Topology",
]
