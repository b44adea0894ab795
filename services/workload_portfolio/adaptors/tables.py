"""PostgreSQL tables of the Workload Portfolio (database ``metallo_workload_portfolio``).

- ``workloads``: one row per Project-owned Workload, unique per
  (project, repository_url, action) (seed 004, 2D); ``seq`` orders listings.
- ``workload_revisions``: immutable numbered revisions; unique per
  (workload_id, revision) and per (workload_id, spec_digest), so concurrent
  preparations of one action can never save two revisions of the same content.
- plus the messaging tables (outbox, inbox, command receipts).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    func,
)

from metallo.messaging.schema import add_messaging_tables

metadata = MetaData()
add_messaging_tables(metadata)

workloads = Table(
    "workloads",
    metadata,
    Column("id", Text, primary_key=True),
    Column("seq", BigInteger, Identity(always=True), nullable=False, unique=True),
    Column("project", Text, nullable=False),
    Column("repository_url", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("action_type", Text, nullable=False),
    Column("family", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("service_kind", Text),
    Column("latest_revision", Integer, nullable=False, server_default="0"),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("project", "repository_url", "action", name="workloads_one_per_action"),
)

workload_revisions = Table(
    "workload_revisions",
    metadata,
    Column("workload_id", Text, ForeignKey("workloads.id"), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("action_type", Text, nullable=False),
    Column("family", Text, nullable=False),
    Column("environment", Text, nullable=False),
    Column("service_kind", Text),
    Column("commit", Text, nullable=False),
    Column("branch", Text, nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("spec_digest", Text, nullable=False),
    Column("created_by", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("workload_id", "revision"),
    UniqueConstraint("workload_id", "spec_digest", name="workload_revisions_one_per_digest"),
    CheckConstraint("revision >= 1", name="workload_revisions_positive"),
)
