"""The outbox relay (DESIGN.md, Messaging); its statements live in ``dispatch_rows``.

Loop: claim a batch of publishable rows under a fenced lease → publish each
``mandatory`` with publisher confirms (an aggregate's rows in id order, different
aggregates concurrently) → mark the confirmed ones ``done`` (only while the lease
is still ours) and the failed ones for a retry with exponential backoff.

The background loop marks a batch that was confirmed whole ``done`` in the *next*
claim's transaction when that claim comes within ``settle_linger_seconds`` (a burst:
one transaction per batch instead of two), else on its own after that wait. Until
then the rows stay leased, so no relay claims them or their aggregate's later rows;
a crash in between republishes them once the lease ends (at least once, as always:
consumers keep inbox receipts). Failures and skipped rows are settled at once.

Claiming: a row is publishable when it is ``pending``, due, its lease is free,
and it is the oldest pending row of its aggregate (the *head*). The batch also
takes up to 100 of each head's followers: once a relay locks and leases an
aggregate's head, no other relay can claim any row of it until that lease
ends. The claim's SQL keeps every step an index lookup driven from the heads,
so it stays linear however wrong the statistics are (docs/decisions/0008).
A Return (unroutable) is a failure even when the broker then acks. With the broker unreachable the relay
claims nothing and retries the connection; publishing times out fast.

The connection is FastStream's broker; each row is published with aiormq's
``Channel.basic_publish`` on the broker's confirm channel (the aiormq channel
under aio-pika's; exchanges declared once per connection), not through
``RabbitBroker.publish`` or aio-pika's ``Exchange.publish``, whose per-call work
(argument validation, message objects, a declarer lookup) cost more than the
publish itself (docs/decisions/0007).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict

from aio_pika import DeliveryMode
from aio_pika.abc import AbstractExchange
from aio_pika.exceptions import DeliveryError
from aiormq import spec
from faststream.rabbit import RabbitBroker
from sqlalchemy.ext.asyncio import AsyncEngine

from metallo.messaging.broker import make_broker, principal_of, topic_exchange, was_returned
from metallo.messaging.dispatch_rows import (
    _CHAIN,
    _CLAIM,
    _DONE,
    _FAILED,
    _PRUNE,
    _RELEASE,
    PRUNE_BATCH,
    _Row,
    backoff_seconds,
)
from metallo.messaging.outbox import NOTIFY_CHANNEL
from metallo.messaging.topology import CONTENT_TYPE, Topology
from metallo.persistence.wakeups import WakeListener

log = logging.getLogger(__name__)

class OutboxRelay:
    """Publishes committed outbox rows of one service database (see module doc).

    ``owner`` names the relay in leases; ``batch`` rows per claim; ``lease_seconds``
    on PostgreSQL's clock; ``publish_timeout`` seconds per publish; replies that stay
    unroutable ``reply_dead_after`` times become ``dead`` (the requester is gone; its
    outcome stays in the command receipt). Rows published more than
    ``keep_published_seconds`` ago (default 7 days) are deleted when the relay is
    idle, at most every ``prune_every_seconds``; ``dead`` rows are kept.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        amqp_url: str,
        topology: Topology,
        *,
        owner: str = "relay",
        batch: int = 200,
        lease_seconds: float = 30.0,
        publish_timeout: float = 10.0,
        poll_seconds: float = 1.0,
        reply_dead_after: int = 3,
        keep_published_seconds: float = 7 * 86400,
        prune_every_seconds: float = 3600.0,
        settle_linger_seconds: float = 0.1,
    ):
        self.engine = engine
        self.amqp_url = amqp_url
        self._principal = principal_of(amqp_url)
        self.topology = topology
        self.owner = f"{owner}:{uuid.uuid4().hex[:8]}"
        self.batch = batch
        self.lease_seconds = lease_seconds
        self.publish_timeout = publish_timeout
        self.poll_seconds = poll_seconds
        self.reply_dead_after = reply_dead_after
        self.keep_published_seconds = keep_published_seconds
        self.prune_every_seconds = prune_every_seconds
        self.settle_linger_seconds = settle_linger_seconds
        self._next_prune = 0.0  # monotonic time; the first cycle prunes
        # Confirmed rows whose ``done`` waits for the next claim: (pks, lease token).
        self._unsettled: tuple[list[int], uuid.UUID] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        # LISTEN/NOTIFY only shortens the idle wait; the rows are the truth.
        self._wakeups = WakeListener(engine.url, NOTIFY_CHANNEL, self._wake.set)
        self._broker: RabbitBroker | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._stopping = False

    async def start(self) -> None:
        """Start the relay loop and the LISTEN wake-up in the background."""
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name=f"outbox-relay {self.owner}")
        await self._wakeups.start()

    async def stop(self) -> None:
        """Stop the loop, free nothing held (leases expire), close the connection."""
        self._stopping = True
        self._wake.set()
        await self._wakeups.stop()
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        try:
            await self.settle()  # else they go out again once their lease ends
        except Exception as exc:
            log.warning("outbox: settling the last batch failed (%s); it is republished later", exc)
        await self._disconnect()

    def wake(self) -> None:
        """Ask the loop to look for rows now."""
        self._wake.set()

    async def _run(self) -> None:
        connect_failures = 0
        while not self._stopping:
            try:
                await self._connect()
                connect_failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                connect_failures += 1
                delay = backoff_seconds(connect_failures, base=0.5, cap=10.0)
                log.warning("broker unreachable (%s); outbox rows wait; retry in %.1fs", exc, delay)
                await self._sleep(delay)
                continue
            try:
                published = await self.run_once(defer_settle=True)
                if published < self.batch and self._unsettled is not None:
                    await self._prune_when_due()  # a steady flow may never leave the linger
                    # A wake-up soon: the next claim settles this batch too.
                    if await self._woken_within(self.settle_linger_seconds):
                        continue
                    await self.settle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("outbox relay cycle failed")
                await self._disconnect()
                await self._sleep(1.0)
                continue
            if published < self.batch:
                await self._prune_when_due()
                await self._sleep(self.poll_seconds)

    async def _woken_within(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a wake-up; True (and cleared) when one came."""
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            return False
        self._wake.clear()
        return True

    async def settle(self) -> None:
        """Mark the confirmed batch that waits for the next claim ``done`` now (no-op
        when none waits). Raises the database's error; the batch then keeps waiting."""
        if self._unsettled is None:
            return
        pks, token = self._unsettled
        async with self.engine.begin() as conn:
            await conn.execute(_DONE, {"pks": pks, "token": token})
        self._unsettled = None

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout=seconds)
        except TimeoutError:
            pass
        self._wake.clear()

    async def _connect(self) -> None:
        if self._broker is not None:
            return
        broker = make_broker(self.amqp_url, connect_timeout=5)
        exchanges: dict[str, AbstractExchange] = {}
        try:
            await broker.connect()
            for name in (self.topology.events_exchange, self.topology.commands_exchange):
                exchanges[name] = await broker.declare_exchange(topic_exchange(name))
        except BaseException:
            await broker.stop()
            raise
        # The default exchange ("") carries replies to the requester's reply_to queue.
        exchanges[""] = exchanges[self.topology.events_exchange].channel.default_exchange
        self._broker, self._exchanges = broker, exchanges

    async def _exchange(self, name: str) -> AbstractExchange:
        """The declared exchange ``name`` on the current connection (rows may name others)."""
        exchange = self._exchanges.get(name)
        if exchange is None:
            exchange = self._exchanges[name] = await self._broker.declare_exchange(topic_exchange(name))
        return exchange

    async def _disconnect(self) -> None:
        broker, self._broker = self._broker, None
        self._exchanges = {}
        if broker is not None:
            try:
                await broker.stop()
            except Exception:
                pass

    async def prune(self, *, limit: int = PRUNE_BATCH) -> int:
        """Delete up to ``limit`` rows published more than ``keep_published_seconds``
        ago (dispatch and message rows); return how many. Pending and dead rows stay."""
        async with self.engine.begin() as conn:
            result = await conn.execute(_PRUNE, {"keep_seconds": self.keep_published_seconds, "limit": limit})
        return result.rowcount

    async def _prune_when_due(self) -> None:
        """Prune at most every ``prune_every_seconds``, only when the relay is idle
        (a full batch means work is waiting); a failure is logged and retried later."""
        now = asyncio.get_running_loop().time()
        if now < self._next_prune:
            return
        self._next_prune = now + self.prune_every_seconds
        try:
            while (deleted := await self.prune()) and not self._stopping:
                log.info("outbox: deleted %d rows published over %.0f s ago", deleted, self.keep_published_seconds)
                if deleted < PRUNE_BATCH:
                    break
        except Exception as exc:  # retention must never stop publishing
            log.warning("outbox: pruning published rows failed (%s); next try in %.0f s", exc, self.prune_every_seconds)

    async def run_once(self, *, defer_settle: bool = False) -> int:
        """Claim, publish and settle one batch; return how many rows were confirmed.

        A batch that waits to be settled (``defer_settle`` of the previous call) is
        marked ``done`` in this claim's transaction. With ``defer_settle``, a batch
        confirmed whole is left for the next claim or :meth:`settle`.
        """
        await self._connect()
        token = uuid.uuid4()
        unsettled = self._unsettled
        async with self.engine.begin() as conn:
            if unsettled is not None:
                await conn.execute(_DONE, {"pks": unsettled[0], "token": unsettled[1]})
            result = await conn.execute(
                _CLAIM,
                {
                    "batch": self.batch,
                    "chain": _CHAIN,
                    "owner": self.owner,
                    "token": token,
                    "lease_seconds": self.lease_seconds,
                },
            )
            rows = [_Row(*r) for r in result.all()]
        if unsettled is not None:
            self._unsettled = None  # committed with this claim
        if not rows:
            return 0
        by_aggregate: dict[str, list[_Row]] = defaultdict(list)
        for row in rows:
            by_aggregate[row.aggregate_id].append(row)
        outcomes = await asyncio.gather(*(self._publish_chain(chain) for chain in by_aggregate.values()))
        done = [pk for ok, _failed, _skipped in outcomes for pk in ok]
        failed = [f for _ok, fails, _skipped in outcomes for f in fails]
        skipped = [pk for _ok, _failed, skips in outcomes for pk in skips]
        if defer_settle and not failed and not skipped:
            self._unsettled = (done, token)
            return len(done)
        async with self.engine.begin() as conn:
            if done:
                await conn.execute(_DONE, {"pks": done, "token": token})
            for row, error in failed:
                dead_after = self.reply_dead_after if row.kind == "reply" else 0
                await conn.execute(
                    _FAILED,
                    {
                        "pk": row.pk,
                        "token": token,
                        "error": error,
                        "delay": backoff_seconds(row.attempts + 1),
                        "dead_after": dead_after,
                    },
                )
            if skipped:
                await conn.execute(_RELEASE, {"pks": skipped, "token": token})
        if failed:
            log.warning("outbox: %d of %d messages not confirmed; first error: %s", len(failed), len(rows), failed[0][1])
        return len(done)

    async def _publish_chain(self, chain: list[_Row]) -> tuple[list[int], list[tuple[_Row, str]], list[int]]:
        """Publish one aggregate's rows in id order, each confirmed before the next.

        Waiting for each confirm keeps the order exact even across a failure; the
        batch still runs different aggregates concurrently. Rows after a failed
        one are released untouched and go out after it on a later cycle.
        """
        ok: list[int] = []
        for i, row in enumerate(chain):
            error = await self._publish(row)
            if error is not None:
                return ok, [(row, error)], [r.pk for r in chain[i + 1 :]]
            ok.append(row.pk)
        return ok, [], []

    async def _publish(self, row: _Row) -> str | None:
        """Publish one row (mandatory, persistent) and wait for its confirm; return an error or None."""
        if self._broker is None:
            return "broker connection lost"
        headers = dict(row.headers or {})
        headers["x-metallo-aggregate"] = row.aggregate_id
        properties = spec.Basic.Properties(
            content_type=CONTENT_TYPE,
            message_type=row.type,
            message_id=str(row.message_id),
            correlation_id=row.correlation_id,
            headers=headers,
            delivery_mode=DeliveryMode.PERSISTENT,
            user_id=self._principal,
        )
        try:
            channel = await (await self._exchange(row.exchange)).channel.get_underlay_channel()
            result = await channel.basic_publish(
                row.body,
                exchange=row.exchange,
                routing_key=row.routing_key,
                properties=properties,
                mandatory=True,
                timeout=self.publish_timeout,
            )
        except DeliveryError as exc:  # Basic.Nack
            return f"not confirmed (nack): {exc}"
        except TimeoutError:
            await self._disconnect()
            return f"publish timed out after {self.publish_timeout}s"
        except Exception as exc:
            await self._disconnect()
            return f"publish failed: {type(exc).__name__}: {exc}"
        if was_returned(result):  # a Return is a failure even though an ack follows
            return f"unroutable: no queue bound for {row.routing_key!r} on {row.exchange!r}"
        return None
