"""Merging an Attempt's observations (seed 002 §9.2: native observation and exit
facts are evidence, kept apart from the lifecycle's own words).

Pure: over :class:`~execution_core.domain.lifecycle_facts.CommandFact` values (duck-typed:
``kind``, ``seq``, ``outcome``, ``native_jobs``, ``observation``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from execution_core.domain import states as s


@dataclass
class Observed:
    """The Attempt's observations merged: the phase and native facts to report."""

    phase: str = ""
    native_state: str = ""
    jobs: list[dict[str, Any]] = field(default_factory=list)
    terminal: dict[str, Any] | None = None  # observation with terminal phase (observe only)
    output_commit: str = ""
    endpoint: str = ""
    native_wait: str = ""
    native_stage: str = ""


def merge(commands: Iterable[Any], stop: Any | None) -> Observed:
    """Merge an Attempt's recorded results (CommandFacts, any order) without ever
    moving backwards; terminal evidence only from an observe, and after ``stop``
    only from an observe sent after it."""
    out = Observed()
    rank = -1
    for c in sorted(commands, key=lambda c: c.seq):
        if c.outcome is None:
            continue
        if c.native_jobs:
            jobs = {j.get("stage", ""): j for j in out.jobs}
            for j in c.native_jobs:
                jobs[j.get("stage", "")] = dict(j)
            out.jobs = list(jobs.values())
        obs = c.observation or {}
        phase = obs.get("phase") or ""
        if not phase:
            continue
        if obs.get("output_commit"):
            out.output_commit = str(obs["output_commit"])
        if obs.get("endpoint"):
            out.endpoint = str(obs["endpoint"])
        if phase in s.OBS_TERMINAL:
            # Terminal evidence: only an observe, and after a stop only a later observe.
            if c.kind != "observe" or (stop is not None and c.seq < stop.seq):
                continue
            if out.terminal is None:
                out.terminal = obs
        r = s.OBS_RANK.get(phase, 0)
        if phase == s.OBS_UNKNOWN:
            continue  # evidence of nothing; confidence shows it
        if r >= rank:
            rank = r
            out.phase = phase
            out.native_state = str(obs.get("native_state") or "")
            out.native_wait = str(obs.get("native_wait") or "")[:64]
            out.native_stage = str(obs.get("native_stage") or "")[:64]
    if out.terminal is not None:
        out.phase = out.terminal["phase"]
        out.native_state = str(out.terminal.get("native_state") or out.native_state)
        out.native_wait = ""
        out.native_stage = str(out.terminal.get("native_stage") or out.native_stage)[:64]
    return out


def exit_facts(obs: dict[str, Any] | None) -> dict[str, Any]:
    """The exit facts of a terminal observation (exit code, signal, failure stage/code)."""
    if not obs:
        return {}
    failure = obs.get("failure") or {}
    facts = {
        "exit_code": obs.get("exit_code", failure.get("exit_code")),
        "signal": obs.get("signal", failure.get("signal")),
        "failure_stage": failure.get("stage") or "",
        "failure_code": failure.get("code") or "",
        "scheduler_state": failure.get("scheduler_state") or "",
    }
    return {k: v for k, v in facts.items() if v not in (None, "")}
