"""Stopping a local Attempt's running stage (docs/site-runtime.md, Local executor):
TERM the runner (it stops its step's process group: TERM, grace, KILL), wait for
its status, KILL whatever is left after the grace period, record ``cancelled``."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from site_runtime.adaptors.local.jobs import AttemptRow, LocalJobsJournal
from site_runtime.adaptors.local.processes import StageProcesses
from site_runtime.adaptors.local.supervision import (
    NEXT_STAGE,
    StageSupervision,
    control_directory,
)


class StageCancellation:
    """Stop the active stage of an Attempt (see the module doc)."""

    def __init__(
        self,
        *,
        journal: LocalJobsJournal,
        processes: StageProcesses,
        supervision: StageSupervision,
        grace_seconds: float,
        set_state: Callable[[str, str], None],
    ) -> None:
        self.journal = journal
        self.processes = processes
        self.supervision = supervision
        self.grace_seconds = grace_seconds
        self.set_state = set_state

    async def stop_stage(self, row: AttemptRow) -> None:
        """TERM the active stage's runner (it stops its step's process group: TERM, grace,
        KILL), wait for its status, and KILL everything left after the grace period."""
        stage_row = (
            self.journal.stage(row.attempt_id, row.state) if row.state in NEXT_STAGE else None
        )
        if stage_row is None or stage_row.state not in ("launching", "running"):
            return
        control = control_directory(row, stage_row.stage)
        (control / "cancel").touch()  # a runner that has not started yet stops at once
        claim = self.processes.claim(control)
        pid, ticks = claim if claim else (stage_row.pid, stage_row.start_ticks)
        self.processes.terminate(pid, ticks)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.grace_seconds + 5.0
        while (
            loop.time() < deadline
            and self.processes.alive(pid, ticks)
            and self.processes.status(control) is None
        ):
            await asyncio.sleep(0.1)
        if self.processes.alive(pid, ticks):
            self.processes.kill(control, pid)
        status = self.processes.status(control)
        if status is not None:
            # A stage that finished on its own during cancellation keeps its outcome.
            self.supervision.finish_from_status(row, stage_row.stage, status)
        self.journal.finish_stage(
            row.attempt_id,
            stage_row.stage,
            "cancelled",
            exit_code=None,
            signal=int(signal.SIGTERM),
            code="cancelled",
            output_commit=None,
        )
        stage_row = self.journal.stage(row.attempt_id, stage_row.stage)
        if stage_row is not None and stage_row.state == "failed":
            self.set_state(row.attempt_id, "failed")
