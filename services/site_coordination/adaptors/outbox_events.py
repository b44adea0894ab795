"""Events through the lead's transactional outbox (DESIGN.md, Messaging)."""

from __future__ import annotations

from google.protobuf.message import Message
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging import Outbox


class OutboxEvents:
    """:class:`EventPublisher` writing into ``session``'s outbox rows."""

    def __init__(self, outbox: Outbox, session: AsyncSession) -> None:
        self.outbox = outbox
        self.session = session

    async def publish(self, event: Message, aggregate_id: str) -> None:
        """Write ``event`` as an outbox event row in ``self.session``'s transaction."""
        await self.outbox.publish_event(self.session, event, aggregate_id=aggregate_id)
