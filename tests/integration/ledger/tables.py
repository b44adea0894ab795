"""A tiny ledger service used to exercise the messaging layer against real PostgreSQL."""

from sqlalchemy import BigInteger, Column, Integer, MetaData, Table, Text

from metallo.messaging.schema import add_messaging_tables

metadata = MetaData()
add_messaging_tables(metadata)

accounts = Table(
    "accounts",
    metadata,
    Column("account", Text, primary_key=True),
    Column("balance", BigInteger, nullable=False),
)

effects = Table(
    "effects",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("consumer", Text, nullable=False),
    Column("account", Text, nullable=False),
    Column("sequence", BigInteger, nullable=False),
)
