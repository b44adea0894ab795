"""Workloads and their immutable numbered revisions (seed 004, "2D Reliable Workload creation").

A Project owns one Workload per (repository, action name). Each revision holds a
normalised specification, its digest and the commit it was read from, and is
never changed. Preparing an action creates the Workload (revision 1), reuses the
revision whose digest matches, or revises (next number).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Decision = Literal["create", "reuse", "revise"]


@dataclass(frozen=True)
class WorkloadKey:
    """The identity of a Workload inside its Project."""

    project: str
    repository_url: str
    action: str


@dataclass(frozen=True)
class Revision:
    """One saved, immutable revision."""

    workload_id: str
    project: str
    repository_url: str
    action: str
    revision: int
    action_type: str
    family: str
    environment: str
    service_kind: str | None
    commit: str
    branch: str
    spec_json: str
    spec_digest: str
    created_by: str
    created_at: datetime


@dataclass(frozen=True)
class WorkloadSummary:
    """A Workload with its latest revision, for listings."""

    workload_id: str
    project: str
    repository_url: str
    action: str
    action_type: str
    family: str
    environment: str
    service_kind: str | None
    latest_revision: int
    latest_commit: str
    latest_spec_digest: str
    created_at: datetime
    updated_at: datetime


def decide(latest_revision: int | None, matching_revision: int | None) -> tuple[Decision, int]:
    """Which revision a preparation yields.

    latest_revision: the Workload's highest revision number (None: no Workload yet);
    matching_revision: the revision with the same spec digest, if any.
    Returns (decision, revision number): create → 1, reuse → the matching one,
    revise → latest + 1.
    """
    if latest_revision is None:
        return "create", 1
    if matching_revision is not None:
        return "reuse", matching_revision
    return "revise", latest_revision + 1
