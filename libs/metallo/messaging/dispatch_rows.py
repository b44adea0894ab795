"""The statements the outbox relay runs on ``outbox_dispatch`` and the rows it claims
(:class:`~metallo.messaging.relay.OutboxRelay`; DESIGN.md, Messaging).

Claim a batch of publishable heads with their followers under a fenced lease
(docs/decisions/0008), mark confirmed rows ``done`` and failed ones for a retry with
:func:`backoff_seconds` — every write only while the lease token is still the
caller's — release skipped rows, and prune published rows past their retention.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import text

# Every step is driven from a small set through index lookups (LATERAL), so the
# plan stays linear in the pending rows whatever the statistics say: right after
# a quiet spell they say "nothing is pending", and a plain join of the pending
# rows with themselves then went quadratic under a burst (seconds per claim).
_CLAIM = text(
    """
WITH firsts AS (
    SELECT DISTINCT ON (p.aggregate_id) p.aggregate_id, p.message_pk
    FROM outbox_dispatch p
    WHERE p.state = 'pending'
    ORDER BY p.aggregate_id, p.message_pk
), heads AS (
    SELECT h.message_pk, h.aggregate_id
    FROM (SELECT * FROM firsts ORDER BY message_pk) f
    CROSS JOIN LATERAL (
        SELECT d.message_pk, d.aggregate_id
        FROM outbox_dispatch d
        WHERE d.aggregate_id = f.aggregate_id AND d.message_pk = f.message_pk
          AND d.state = 'pending'
          AND d.next_attempt_at <= now()
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
        FOR UPDATE SKIP LOCKED
    ) h
    LIMIT :batch
), followers AS (
    SELECT f.message_pk
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT e.message_pk
        FROM outbox_dispatch e
        WHERE e.aggregate_id = h.aggregate_id AND e.state = 'pending' AND e.message_pk > h.message_pk
        ORDER BY e.message_pk
        LIMIT :chain
    ) f
    ORDER BY f.message_pk
    LIMIT :batch
), claimed AS (
    UPDATE outbox_dispatch d
    SET lease_owner = :owner, lease_token = :token,
        lease_generation = d.lease_generation + 1,
        lease_expires_at = now() + make_interval(secs => :lease_seconds)
    FROM (SELECT message_pk FROM heads UNION ALL SELECT message_pk FROM followers) c
    -- coalesce: the same test, but one that cannot select the partial "pending"
    -- index, so each claimed row is found by its primary key
    WHERE d.message_pk = c.message_pk AND coalesce(d.state, '') = 'pending'
    RETURNING d.message_pk, d.attempts
)
SELECT m.id, m.message_id, m.aggregate_id, m.kind, m.exchange, m.routing_key, m.type,
       m.body, m.correlation_id, m.headers, c.attempts
FROM claimed c JOIN outbox_messages m ON m.id = c.message_pk
ORDER BY m.id
"""
)

# Settling: holding the token means the row is still pending (every way out of
# ``pending`` clears the token), and naming only the key keeps these on the
# primary key whatever the statistics say about the partial index.
_DONE = text(
    """
UPDATE outbox_dispatch SET state = 'done', published_at = now(), attempts = attempts + 1,
       last_error = NULL, lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE message_pk = ANY(:pks) AND lease_token = :token
"""
)

_FAILED = text(
    """
UPDATE outbox_dispatch SET attempts = attempts + 1, last_error = left(:error, 500),
       state = CASE WHEN :dead_after > 0 AND attempts + 1 >= :dead_after THEN 'dead' ELSE 'pending' END,
       next_attempt_at = now() + make_interval(secs => :delay),
       lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE message_pk = :pk AND lease_token = :token
"""
)

_RELEASE = text(
    """
UPDATE outbox_dispatch SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE message_pk = ANY(:pks) AND lease_token = :token
"""
)


# At most this many rows of one aggregate after its head per claim (each waits
# for the previous one's confirm, so a longer chain would only slow the batch).
_CHAIN = 100


# Retention: published rows are kept ``keep_seconds`` (to answer "was it sent,
# when?"), then deleted in bounded batches; ``dead`` rows stay until an operator
# acts on them. The oldest rows come first in the heap, so the scan stops early.
PRUNE_BATCH = 5000  # rows deleted per statement

_PRUNE = text(
    """
WITH gone AS (
    DELETE FROM outbox_dispatch
    WHERE message_pk IN (
        SELECT message_pk FROM outbox_dispatch
        WHERE state = 'done' AND published_at < now() - make_interval(secs => :keep_seconds)
        LIMIT :limit)
    RETURNING message_pk
)
DELETE FROM outbox_messages WHERE id IN (SELECT message_pk FROM gone)
"""
)


@dataclass(frozen=True)
class _Row:
    """One claimed outbox row: what is published and its dispatch attempts so far."""

    pk: int
    message_id: uuid.UUID
    aggregate_id: str
    kind: str
    exchange: str
    routing_key: str
    type: str
    body: bytes
    correlation_id: str | None
    headers: dict
    attempts: int


def backoff_seconds(attempts: int, base: float = 0.5, cap: float = 60.0) -> float:
    """Delay before the next try after ``attempts`` failed ones: base·2^(n-1), capped."""
    return min(cap, base * (2 ** max(0, attempts - 1)))
