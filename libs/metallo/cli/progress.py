"""Live progress while waiting for a Run or a Pipeline: step, phase, native state,
elapsed seconds. On a terminal a Rich live line is redrawn; otherwise (pipes, CI
logs) one line is printed each time something changes. Always on stderr."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rich.live import Live
from rich.text import Text

from metallo.cli.exits import NO_ANSWER_CODES, CliError, Exit, no_answer_hint
from metallo.cli.render import err, native_jobs_text
from metallo.waiting import waiting_text

POLL_SECONDS = 0.5


@dataclass(frozen=True)
class Snapshot:
    """What the progress line shows; ``done`` ends the wait."""

    line: str
    done: bool


def run_line(run, step: str = "") -> str:
    """One progress line for a Run message (metallo.execution_core.v1.Run)."""
    attempt = run.attempts[-1] if len(run.attempts) else None
    parts = [step] if step else []
    parts.append(f"run {run.run_id}")
    if run.action:
        parts.append(f"action {run.action}")
    parts.append(f"phase {run.phase or '?'}")
    if attempt is not None:
        parts.append(f"attempt {attempt.number} {attempt.state}")
    native = run.native_state or (attempt.native_state if attempt is not None else "")
    if native:
        # The stage the native state belongs to, when the Site says (``native stage-out PENDING``).
        stage = f"{run.native_stage} " if run.native_stage else ""
        doubt = run.observation_confidence
        parts.append(f"native {stage}{native}" + (f" ({doubt})" if doubt in ("stale", "uncertain") else ""))
    if run.phase != "terminal":
        waits = waiting_text(run.waiting_reason, run.native_wait, native)
        if waits:
            parts.append(waits)
    jobs = native_jobs_text(attempt.native_jobs) if attempt is not None else ""
    if jobs:
        parts.append(f"jobs {jobs}")
    if run.site_id:
        parts.append(f"site {run.site_id}")
    if run.outcome:
        reason = ": ".join(t for t in (run.reason_code, run.reason_message) if t)
        parts.append(f"outcome {run.outcome}" + (f" ({reason})" if reason else ""))
    return " · ".join(parts)


async def follow(poll: Callable[[], Awaitable[Snapshot]], *, timeout: float | None,
                 quiet: bool = False, what: str = "the Run", resume: str = "") -> None:
    """Call ``poll`` every POLL_SECONDS until its snapshot is done, showing progress.

    ``resume`` is the command that waits again (``metallo run wait ID``); the hints
    of both exit-4 errors name it. Raises CliError(exit 4) when ``timeout`` seconds
    pass first (the work goes on and its outcome is not known yet), and re-raises a
    poll's no-answer error (codes in NO_ANSWER_CODES: the stack may have stopped)
    with a hint to check the stack and then ``resume`` — never "run this again",
    which for ``pipeline run --wait`` would start another Pipeline.
    """
    again = f"`{resume}`" if resume else "`metallo run wait ID` / `metallo pipeline show ID --wait`"
    started = time.monotonic()
    live = err.is_terminal and not quiet
    last = None

    def label(snap: Snapshot) -> str:
        return f"{snap.line} · {time.monotonic() - started:.0f}s"

    async def loop(update: Callable[[str], None]) -> None:
        nonlocal last
        while True:
            try:
                snap = await poll()
            except CliError as error:
                if error.code not in NO_ANSWER_CODES:
                    raise
                raise CliError(error.message, no_answer_hint(
                    f"wait again with {again} ({what} itself was not cancelled)"),
                    error.exit_code, code=error.code) from None
            if live:
                update(label(snap))
            elif snap.line != last and not quiet:
                err.print(label(snap), markup=False, highlight=False)
            last = snap.line
            if snap.done:
                return
            if timeout is not None and time.monotonic() - started > timeout:
                raise CliError(f"{what} did not end within {timeout:g} s; it goes on",
                               f"wait again later with {again}", Exit.UNCERTAIN,
                               code="wait-timeout")
            await asyncio.sleep(POLL_SECONDS)

    if live:
        with Live(Text(""), console=err, refresh_per_second=4, transient=False) as view:
            await loop(lambda s: view.update(Text(s)))
    else:
        await loop(lambda s: None)
