"""Inbox receipts: one per (consumer, message_id) (DESIGN.md, Messaging).

Written in the transaction that applies the message, so a redelivery after a
crash finds the receipt and has no second effect.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from metallo.messaging.errors import PoisonMessage
from metallo.messaging.schema import inbox_receipts


async def record_receipt(session: AsyncSession, consumer: str, message_id: str, body: bytes) -> bool:
    """Record the receipt; True when new, False for a redelivery of the same bytes.

    Raises :class:`PoisonMessage` when the same message_id arrives with other bytes.
    """
    digest = hashlib.sha256(body).hexdigest()
    inserted = (
        await session.execute(
            insert(inbox_receipts)
            .values(consumer=consumer, message_id=message_id, body_sha256=digest)
            .on_conflict_do_nothing()
            .returning(inbox_receipts.c.message_id)
        )
    ).first()
    if inserted is not None:
        return True
    saved = (
        await session.execute(
            select(inbox_receipts.c.body_sha256).where(
                inbox_receipts.c.consumer == consumer, inbox_receipts.c.message_id == message_id
            )
        )
    ).scalar_one()
    if saved != digest:
        raise PoisonMessage(
            f"message_id {message_id} seen before with other bytes (sha256 {saved[:12]}… ≠ {digest[:12]}…)"
        )
    return False


_RECORD_MANY = text(
    """
INSERT INTO inbox_receipts (consumer, message_id, body_sha256)
SELECT :consumer, m.id, m.sha FROM unnest(CAST(:ids AS text[]), CAST(:shas AS text[])) AS m(id, sha)
ON CONFLICT DO NOTHING
RETURNING message_id
"""
)


async def record_receipts(session: AsyncSession, consumer: str, deliveries: list[tuple[str, bytes]]) -> set[str]:
    """Record receipts for many (message_id, body) at once; return the ids that were new.

    One statement whatever the count, so its compiled form is cached.
    """
    result = await session.execute(
        _RECORD_MANY,
        {
            "consumer": consumer,
            "ids": [mid for mid, _ in deliveries],
            "shas": [hashlib.sha256(body).hexdigest() for _, body in deliveries],
        },
    )
    return {r[0] for r in result}
