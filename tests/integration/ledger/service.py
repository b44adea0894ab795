"""Ledger handlers wired to the real messaging layer (tests and benchmarks only)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert

from metallo.messaging import CommandServer, EventConsumer, Outbox, Rejected, Topology
from metallo.testkit.v1 import testkit_pb2 as tk
from tests.integration.ledger.tables import accounts, effects

MIGRATIONS = Path(__file__).parent / "migrations"

# Built once; each call passes its values as parameters (building the statement
# per event costs more than executing it).
_RECORD_EFFECT = insert(effects)


def ledger_server(engine, amqp_url: str, topology: Topology, intake=None) -> CommandServer:
    """A CommandServer for the ``testkit`` context: Deposit and GetBalance (``intake``:
    who may ask, default from the environment)."""
    server = CommandServer("testkit", engine, amqp_url, topology, intake=intake)
    outbox = Outbox(topology)

    @server.command(tk.Deposit)
    async def deposit(session, cmd: tk.Deposit) -> tk.DepositReply:
        if cmd.amount <= 0:
            raise Rejected("invalid-argument", "amount must be positive", {"field": "amount"})
        if cmd.account == "busy":
            raise Rejected("dependency-unavailable", "try again", transient=True)
        if cmd.account == "explode":
            raise RuntimeError("handler failure after writing")
        stmt = (
            pg_insert(accounts)
            .values(account=cmd.account, balance=cmd.amount)
            .on_conflict_do_update(index_elements=["account"], set_={"balance": accounts.c.balance + cmd.amount})
            .returning(accounts.c.balance)
        )
        balance = (await session.execute(stmt)).scalar_one()
        await outbox.publish_event(
            session, tk.Deposited(account=cmd.account, amount=cmd.amount, sequence=balance), aggregate_id=cmd.account
        )
        return tk.DepositReply(account=cmd.account, balance=balance)

    @server.query(tk.GetBalance)
    async def get_balance(session, q: tk.GetBalance) -> tk.Balance:
        balance = (await session.execute(select(accounts.c.balance).where(accounts.c.account == q.account))).scalar()
        if balance is None:
            raise Rejected("not-found", f"no account {q.account}")
        return tk.Balance(account=q.account, balance=balance)

    return server


def effect_recorder(name: str, engine, amqp_url: str, topology: Topology, **kw) -> EventConsumer:
    """An EventConsumer that records one ``effects`` row per Deposited event it applies
    (a projection: each run of events is written with one executemany, in order)."""
    consumer = EventConsumer(name, engine, amqp_url, topology, **kw)

    @consumer.on_batch(tk.Deposited)
    async def on_deposited(session, events: list[tk.Deposited]) -> None:
        await session.execute(
            _RECORD_EFFECT,
            [{"consumer": name, "account": e.account, "sequence": e.sequence} for e in events],
        )

    return consumer


async def effect_rows(engine, name: str) -> list[tuple[str, int]]:
    """(account, sequence) of every effect the consumer ``name`` applied, in order."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(effects.c.account, effects.c.sequence).where(effects.c.consumer == name).order_by(effects.c.id)
        )
        return [tuple(r) for r in rows]


async def count_effects(engine) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(select(func.count()).select_from(effects))).scalar_one()
