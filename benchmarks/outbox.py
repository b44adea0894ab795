"""Benchmark: outbox → relay → broker → inbox consumer vs raw aio-pika.

Both paths move the same number of persistent messages through the same local
RabbitMQ in the same run, with the consumer in another process (as in
production, where the publishing service and the consuming one differ):

- outbox: an application process writes events in transactions (``--per-tx``
  per transaction, with one ``Outbox.publish_events`` call each; ``--one-by-one``:
  one ``publish_event`` call per event) to a fresh PostgreSQL database; :class:`OutboxRelay` in this
  process publishes them (mandatory, confirms); an :class:`EventConsumer` in a
  third process records an inbox receipt and one effect row per message, in
  batched transactions;
- raw: aio-pika publish with publisher confirms (``--window`` in flight) to a
  durable queue, consumed and acked in another process.

On both sides every connection is open before the clock starts (the outbox
processes' database pools too), and the clock stops when the consumer has
handled the last message (outbox: its effect row is committed).

The two paths run alternately ``--pairs`` times (default 3): on this shared 2-core
machine one pair's ratio moves by ±0.05, mostly through the raw side.

Prints one JSON line: {"outbox_msgs_per_s", "raw_msgs_per_s", "ratio", "ratios",
...}: the medians over the pairs, ``ratio`` being the median of the pairs' ratios.
Usage: .venv/bin/python -m benchmarks.outbox [--messages 5000] [--pairs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import time
import uuid

import aio_pika
import asyncpg
from sqlalchemy.engine import make_url

from metallo.messaging import Outbox, OutboxRelay, Topology
from metallo.persistence.engine import create_engine, database_url, drop_database, session_factory
from metallo.persistence.migrations import migrate
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.service import MIGRATIONS, effect_recorder

# The broker login (METALLO_BENCH_AMQP_URL; the suite passes its test principal). Names
# are under a ``t<10 hex>.`` namespace, the form the test principals may use.
AMQP_URL = os.environ.get("METALLO_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def _raw_consumer(name: str, n: int, ready, finished) -> None:
    """Child process: consume and ack ``n`` messages from queue ``name``."""

    async def consume() -> None:
        conn = await aio_pika.connect(AMQP_URL)
        async with conn:
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=256)
            queue = await ch.declare_queue(name, durable=True)
            received = 0
            done = asyncio.Event()

            async def on_message(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
                nonlocal received
                await msg.ack()
                received += 1
                if received == n:
                    done.set()

            await queue.consume(on_message)
            ready.set()
            await asyncio.wait_for(done.wait(), 600)
            finished.value = time.perf_counter()

    asyncio.run(consume())


async def raw_run(n: int, window: int) -> float:
    """Messages/s for raw confirmed publish → consume+ack (child process) of ``n`` messages."""
    name = f"t{uuid.uuid4().hex[:10]}.bench.raw"
    ctx = multiprocessing.get_context("spawn")
    ready, finished = ctx.Event(), ctx.Value("d", 0.0)
    child = ctx.Process(target=_raw_consumer, args=(name, n, ready, finished))
    child.start()
    await asyncio.to_thread(ready.wait, 60)
    conn = await aio_pika.connect(AMQP_URL)
    async with conn:
        pub = await conn.channel(publisher_confirms=True)
        body = tk.Deposited(account="raw", amount=1, sequence=1).SerializeToString()
        sem = asyncio.Semaphore(window)
        start = time.perf_counter()

        async def publish_one() -> None:
            async with sem:
                await pub.default_exchange.publish(
                    aio_pika.Message(body, message_id=str(uuid.uuid4()), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=name,
                )

        await asyncio.gather(*(publish_one() for _ in range(n)))
        await asyncio.to_thread(child.join, 600)
        elapsed = finished.value - start
        await pub.queue_delete(name)
    return n / elapsed


async def _open_pool(engine, connections: int) -> None:
    """Open ``connections`` pooled database connections now, before the clock
    starts (the raw side, too, connects before it starts)."""
    opened = [await engine.connect() for _ in range(connections)]
    for conn in opened:
        await conn.close()  # back to the pool, which keeps it


def _outbox_consumer(url: str, prefix: str, n: int, ready, finished) -> None:
    """Child process: an EventConsumer with inbox applying ``n`` events."""

    async def consume() -> None:
        engine = create_engine(url, pool_size=10)
        consumer = effect_recorder("bench", engine, AMQP_URL, Topology(prefix=prefix), prefetch=256)
        await _open_pool(engine, 4)  # one per lane
        await consumer.start()
        # The stopwatch counts committed effects on one held connection. Counting
        # costs PostgreSQL about 0.5 ms at 5000 rows, so it polls every 10 ms only
        # over the last tenth, where the stop time is decided, and every 100 ms
        # before: the measuring then costs the measured path little.
        watch = await asyncpg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))
        ready.set()
        while (applied := await watch.fetchval("SELECT count(*) FROM effects")) < n:
            await asyncio.sleep(0.01 if n - applied <= n // 10 else 0.1)
        finished.value = time.perf_counter()
        await watch.close()
        await consumer.stop()
        await engine.dispose()

    asyncio.run(consume())


def _outbox_writer(url: str, prefix: str, n: int, per_tx: int, aggregates: int, one_by_one: bool, go, started) -> None:
    """Child process: the application writing ``n`` events in transactions of ``per_tx``
    (one ``publish_events`` call per transaction, or one ``publish_event`` per event)."""

    async def write_all() -> None:
        engine = create_engine(url, pool_size=10)
        outbox = Outbox(Topology(prefix=prefix))
        sessions = session_factory(engine)
        sem = asyncio.Semaphore(8)

        async def write(batch_no: int) -> None:
            async with sem, sessions() as session, session.begin():
                events = []
                for j in range(per_tx):
                    seq = batch_no * per_tx + j
                    account = f"acc{seq % aggregates}"
                    events.append((tk.Deposited(account=account, amount=1, sequence=seq), account))
                if one_by_one:
                    for message, account in events:
                        await outbox.publish_event(session, message, aggregate_id=account)
                else:
                    await outbox.publish_events(session, events)

        await _open_pool(engine, 8)  # one per concurrent transaction
        await asyncio.to_thread(go.wait, 60)
        started.value = time.perf_counter()
        await asyncio.gather(*(write(i) for i in range(n // per_tx)))
        await engine.dispose()

    asyncio.run(write_all())


async def outbox_run(n: int, per_tx: int, aggregates: int, one_by_one: bool = False) -> float:
    """Messages/s from the first outbox write (writer process) until the consumer
    (another process) applied all ``n``; the relay runs in this process."""
    url = database_url("ledger", f"bench_ledger_{uuid.uuid4().hex[:8]}")
    await migrate(url, MIGRATIONS)
    engine = create_engine(url, pool_size=20)
    topology = Topology(prefix=f"t{uuid.uuid4().hex[:10]}.")
    ctx = multiprocessing.get_context("spawn")
    ready, go, finished, started = ctx.Event(), ctx.Event(), ctx.Value("d", 0.0), ctx.Value("d", 0.0)
    consumer = ctx.Process(target=_outbox_consumer, args=(url, topology.prefix, n, ready, finished))
    writer = ctx.Process(target=_outbox_writer,
                         args=(url, topology.prefix, n, per_tx, aggregates, one_by_one, go, started))
    consumer.start()
    writer.start()
    relay = OutboxRelay(engine, AMQP_URL, topology, owner="bench", batch=500, poll_seconds=0.05)
    try:
        await asyncio.to_thread(ready.wait, 60)
        await relay.run_once()  # connects to the broker and the database; nothing to publish yet
        await relay.start()
        go.set()
        await asyncio.to_thread(writer.join, 600)
        await asyncio.to_thread(consumer.join, 600)
        elapsed = finished.value - started.value
    finally:
        await relay.stop()
        await engine.dispose()
        await drop_database(url)
        conn = await aio_pika.connect(AMQP_URL)
        async with conn:
            ch = await conn.channel()
            for suffix in ("", ".retry", ".dlq"):
                await ch.queue_delete(topology.event_queue("bench") + suffix)
            for exchange in (topology.events_exchange, topology.commands_exchange):  # the relay declares both
                await ch.exchange_delete(exchange)
    return n / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--per-tx", type=int, default=10)
    parser.add_argument("--aggregates", type=int, default=500)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--one-by-one", action="store_true",
                        help="the writer calls publish_event per event instead of publish_events per transaction")
    parser.add_argument("--pairs", type=int, default=3,
                        help="raw/outbox pairs, run alternately; the medians are reported")
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    raws: list[float] = []
    outs: list[float] = []
    for _ in range(args.pairs):
        raws.append(await raw_run(args.messages, args.window))
        outs.append(await outbox_run(args.messages, args.per_tx, args.aggregates, args.one_by_one))
    ratios = [o / r for o, r in zip(outs, raws, strict=True)]
    print(
        json.dumps(
            {
                "outbox_msgs_per_s": round(statistics.median(outs), 1),
                "raw_msgs_per_s": round(statistics.median(raws), 1),
                "ratio": round(statistics.median(ratios), 3),
                "ratios": [round(x, 3) for x in ratios],
                "pairs": args.pairs,
                "writer": "publish_event" if args.one_by_one else "publish_events",
                "messages": args.messages,
                "per_tx": args.per_tx,
                "aggregates": args.aggregates,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
