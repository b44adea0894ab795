"""Messaging over RabbitMQ with protobuf bodies (DESIGN.md, Messaging; docs/messaging.md).

- :class:`Topology` — exchange, queue and routing-key names.
- :class:`Outbox` / :class:`OutboxRelay` — transactional outbox and its relay.
- :class:`EventConsumer` — event handlers with inbox receipts.
- :class:`CommandServer` / :class:`RequestClient` — typed request/reply.

Names are imported on first use (PEP 562): the ``metallo`` CLI needs only the
request client, and importing the outbox, relay and consumers too (SQLAlchemy and
their database code) cost it about a second per command on the lab machine.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {
    "CommandServer": "metallo.messaging.server",
    "EventConsumer": "metallo.messaging.events",
    "Outbox": "metallo.messaging.outbox",
    "OutboxRelay": "metallo.messaging.relay",
    "OutcomeUncertain": "metallo.messaging.errors",
    "PoisonMessage": "metallo.messaging.errors",
    "Rejected": "metallo.messaging.errors",
    "RequestClient": "metallo.messaging.client",
    "ServiceUnavailable": "metallo.messaging.client",
    "Topology": "metallo.messaging.topology",
}

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

if TYPE_CHECKING:
    from metallo.messaging.client import RequestClient, ServiceUnavailable
    from metallo.messaging.errors import OutcomeUncertain, PoisonMessage, Rejected
    from metallo.messaging.events import EventConsumer
    from metallo.messaging.outbox import Outbox
    from metallo.messaging.relay import OutboxRelay
    from metallo.messaging.server import CommandServer
    from metallo.messaging.topology import Topology


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'metallo.messaging' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
