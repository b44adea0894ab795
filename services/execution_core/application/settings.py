"""Execution Core settings, read from the environment (documented in docs/runs.md).

Every duration is in seconds. Variables are ``METALLO_EXECUTION_CORE_<NAME>``
with ``<NAME>`` the upper-cased field name, e.g.
``METALLO_EXECUTION_CORE_OBSERVE_INTERVAL_SECONDS=30``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from execution_core.domain.lifecycle import Timing

#: Settings for which 0 means "off" (0 s: every GetWorkloadRevision asks anew).
_ZERO_ALLOWED = frozenset({"workload_cache_seconds"})


@dataclass(frozen=True)
class Settings:
    """Timing and batching of the launch worker and the Run Supervisor."""

    observe_interval_seconds: float = 30.0  # between two observe commands of an active Attempt
    first_observe_seconds: float = 1.0  # start result → first observe (doubles to the interval)
    result_recheck_seconds: float = 30.0  # supervisor look-again period while a result is awaited
    stale_after_seconds: float = 120.0  # an observation older than this is reported "stale"
    dispatch_timeout_seconds: float = 3600.0  # Attempt creation → dispatch deadline of its start
    lost_after_seconds: float = 900.0  # the Site does not know a started Attempt this long → lost
    lost_observe_max_seconds: float = 120.0  # longest wait between two asks meanwhile
    supervisor_lease_seconds: float = 30.0  # fenced lease of a supervised Run (PostgreSQL clock)
    supervisor_poll_seconds: float = 1.0  # idle wait between two supervisor passes
    launch_lease_seconds: float = 30.0  # fenced lease of a launch being planned
    launch_poll_seconds: float = 1.0  # idle wait between two launch worker passes
    planning_retry_seconds: float = (
        5.0  # first wait after a temporary planning failure (doubles, ≤ 300)
    )
    planning_timeout_seconds: float = 3600.0  # after this, a launch still waiting is rejected
    workload_query_timeout_seconds: float = 10.0  # GetWorkloadRevision reply timeout
    workload_cache_seconds: float = 60.0  # a GetWorkloadRevision reply is reused this long
    batch: int = 20  # Runs claimed per pass
    log_read_seconds: float = 10.0  # a log read without the Site's answer after this is expired
    log_read_retention_seconds: float = 3600.0  # answered log reads are deleted after this
    # An array group's one deadline, from its first child's acceptance: a group not
    # fully prepared by then starts its children on their own (prefer) or fails them (require).
    array_group_deadline_seconds: float = 600.0

    def timing(self) -> Timing:
        """The lifecycle timing these settings give."""
        return Timing(
            observe_interval=self.observe_interval_seconds,
            first_observe=self.first_observe_seconds,
            result_recheck=self.result_recheck_seconds,
            stale_after=self.stale_after_seconds,
            dispatch_timeout=self.dispatch_timeout_seconds,
            lost_after=self.lost_after_seconds,
            lost_observe_max=self.lost_observe_max_seconds,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read ``METALLO_EXECUTION_CORE_*`` overrides; raise ValueError for a bad number."""
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            raw = env.get(f"METALLO_EXECUTION_CORE_{f.name.upper()}")
            if raw is None:
                continue
            value = int(raw) if f.type in ("int", int) else float(raw)
            if value < 0 or (value == 0 and f.name not in _ZERO_ALLOWED):
                raise ValueError(f"METALLO_EXECUTION_CORE_{f.name.upper()} must be positive")
            values[f.name] = value
        return cls(**values)
