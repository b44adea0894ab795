"""Exchange, queue and routing-key names (DESIGN.md, Messaging; docs/messaging.md).

- ``metallo.commands`` (topic): typed commands and queries. Routing key
  ``<owner>.command.<Name>`` or ``<owner>.query.<Name>``; the owner consumes
  ``<owner>.commands`` and ``<owner>.queries``.
- ``metallo.events`` (topic): integration events, routing key
  ``<context>.<EventName>.v<N>``; every consumer has its own durable queue
  ``<consumer>.events``.
- replies go through the default exchange to the requester's ``reply_to``.
- every consumed queue ``Q`` has ``Q.retry`` (delayed redelivery) and ``Q.dlq``.

``prefix`` namespaces every name (tests use a random one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import Message

from metallo.messaging.registry import full_name, parse_name

CONTENT_TYPE = "application/x-protobuf"


@dataclass
class Topology:
    """Names of the shared exchanges and queues under an optional ``prefix``."""

    prefix: str = ""
    declared_queues: set[str] = field(default_factory=set)

    @property
    def commands_exchange(self) -> str:
        """Topic exchange for commands and queries: ``<prefix>metallo.commands``."""
        return f"{self.prefix}metallo.commands"

    @property
    def events_exchange(self) -> str:
        """Topic exchange for integration events: ``<prefix>metallo.events``."""
        return f"{self.prefix}metallo.events"

    def command_queue(self, owner: str) -> str:
        """The owner's durable command queue: ``<prefix><owner>.commands``."""
        return f"{self.prefix}{owner}.commands"

    def query_queue(self, owner: str) -> str:
        """The owner's durable query queue: ``<prefix><owner>.queries``."""
        return f"{self.prefix}{owner}.queries"

    def request_queue(self, message: Message | type[Message]) -> str:
        """The owner's queue a command or query goes to."""
        owner, _key = request_routing_key(message)
        return self.query_queue(owner) if is_query(message) else self.command_queue(owner)

    def event_queue(self, consumer: str) -> str:
        """A consumer's own durable event queue: ``<prefix><consumer>.events``."""
        return f"{self.prefix}{consumer}.events"

    def reply_queue(self, client_id: str) -> str:
        """One client process's exclusive reply queue: ``<prefix>metallo.reply.<id>``."""
        return f"{self.prefix}metallo.reply.{client_id}"


def is_query(message: Message | type[Message]) -> bool:
    """True when field 1 of the message is ``QueryMetadata`` (a query), else a command."""
    fields = message.DESCRIPTOR.fields_by_number
    meta = fields.get(1)
    return bool(meta and meta.message_type and meta.message_type.name == "QueryMetadata")


def request_routing_key(message: Message | type[Message]) -> tuple[str, str]:
    """(owner context, routing key) of a command or query message."""
    context, _version, name = parse_name(full_name(message))
    kind = "query" if is_query(message) else "command"
    return context, f"{context}.{kind}.{name}"


def event_routing_key(message: Message | type[Message]) -> str:
    """``<context>.<Name>.v<N>`` for an event message."""
    context, version, name = parse_name(full_name(message))
    return f"{context}.{name}.{version}"


def contract_version(message: Message | type[Message]) -> str:
    """The contract version (``v1``) from the message's package."""
    return parse_name(full_name(message))[1]
