"""Observations and failure records shared by every executor (docs/site-commands.md,
A result as the Runtime records it).

An observation always has the same ten fields (``confidence`` is added only when
the observation is not current); a failed Attempt's ``failure`` is
a bounded record — stage, scheduler state, job id, exit code, signal and a
catalogued code (docs/site-runtime.md, Failure codes) — and never carries
scheduler text, process output or secrets.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now_iso(now: float) -> str:
    """``now`` (seconds since the epoch) as UTC ISO 8601, e.g. ``2026-11-29T11:02:03Z``."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def failure_record(
    stage: str,
    scheduler_state: str | None,
    job_id: str | None,
    exit_code: int | None,
    signal: int | None,
    code: str | None,
) -> dict[str, Any]:
    """The bounded failure record of one failed stage (the six facts, nothing else)."""
    return {
        "stage": stage,
        "scheduler_state": scheduler_state,
        "job_id": job_id,
        "exit_code": exit_code,
        "signal": signal,
        "code": code,
    }


def observation(
    phase: str,
    observed_at: str,
    *,
    native_state: str | None = None,
    exit_code: int | None = None,
    signal: int | None = None,
    failure: dict[str, Any] | None = None,
    output_commit: str | None = None,
    endpoint: str | None = None,
    native_stage: str | None = None,
    native_wait: str | None = None,
    confidence: str | None = None,
) -> dict[str, Any]:
    """One ``observation`` object: ``phase`` (docs/site-commands.md's phases) and the
    facts known with it; ``observed_at`` is UTC ISO 8601 (:func:`now_iso`);
    ``native_stage`` the stage ``native_state`` belongs to, ``native_wait`` a
    native-wait code (``domain/native_waits.py``), ``confidence`` ``stale`` or
    ``uncertain`` when the Site could not observe the work now (None: current)."""
    if confidence not in (None, "stale", "uncertain"):
        raise ValueError("confidence is stale, uncertain or None")
    found = {
        "phase": phase,
        "native_state": native_state,
        "exit_code": exit_code,
        "signal": signal,
        "failure": failure,
        "output_commit": output_commit,
        "endpoint": endpoint,
        "native_stage": native_stage,
        "native_wait": native_wait,
        "observed_at": observed_at,
    }
    if confidence is not None:
        found["confidence"] = confidence
    return found
