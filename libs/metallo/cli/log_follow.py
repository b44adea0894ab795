"""Reading a stage log through the Site: one read, and following a growing log
(``metallo run logs RUN [--follow]``; docs/runs.md, Reading logs and Following a log).

A read is Execution Core's ReadRunLog command (it appends a ``read-log`` Site command;
the Site Runtime answers under a viewer read permit, seed 001, Private Run log
commands) and then GetRunLogRead, polled until the Site answered (at most 10 s plus
the request timeout). Following reads from each answer's ``next_offset`` until the
Run has ended and its last Attempt's log is read to the end, so no byte is shown
twice or skipped: the Runtime cuts every answer on a whole UTF-8 character.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from metallo.cli.exits import CliError, Exit
from metallo.cli.settings import Actor
from metallo.cli.transport import Platform, command_metadata, query_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec

LOG_READ_SECONDS = 10.0  # seed 001, Private Run log commands: the operation is capped at 10 s
POLL_MIN_SECONDS = 1.0  # between reads while the log grows
POLL_MAX_SECONDS = 8.0  # between reads of a quiet log (each read is a Site command)
ATTEMPT_ENDED = frozenset({"succeeded", "failed", "cancelled", "refused", "lost"})
NOT_AT_SITE_YET = frozenset({"pending", "preparing"})
#: A read the Site may answer later: try again rather than stop following.
RETRY_CODES = frozenset({"log-read-expired", "log-read-timeout", "authority-unavailable"})


async def read_once(platform: Platform, who: Actor, run_id: str, *, attempt: int, stage: str,
                    max_bytes: int, offset: int | None = None,
                    command_id: str | None = None) -> ec.RunLogRead:
    """One log read: ReadRunLog (``offset`` None: the tail of ``max_bytes``; else at most
    ``max_bytes`` from that byte on), then GetRunLogRead until it is not ``pending``.
    Returns the read; its state is still ``pending`` when the Site did not answer within
    10 s plus the request timeout. Raises CliError for a rejected ReadRunLog (e.g.
    ``not-found``, ``attempt-not-at-site``)."""
    fields = {"offset": offset} if offset is not None else {}
    started = await platform.request(ec.ReadRunLog(
        metadata=command_metadata(who, command_id), run_id=run_id, attempt_number=attempt,
        stage=stage, max_bytes=max_bytes, **fields))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOG_READ_SECONDS + platform.conn.timeout_seconds
    while True:
        read = await platform.request(ec.GetRunLogRead(metadata=query_metadata(who),
                                                       read_id=started.read_id))
        if read.state != "pending" or loop.time() > deadline:
            return read
        await asyncio.sleep(0.3)


def cut_remark(read: ec.RunLogRead) -> str:
    """What a tail read left out, in bytes: "only the last N of the log's M bytes are
    shown" (the text may be shorter than --max-bytes: a read's text is also kept inside
    the 4 MiB message budget)."""
    if read.HasField("offset") and read.HasField("next_offset") and read.HasField("size"):
        shown = read.next_offset - read.offset
        return f"only the last {shown} of the log's {read.size} bytes are shown"
    return f"only the last {len(read.text.encode())} bytes of the text are shown"


DEV_EXECUTORS = ("local", "slurm")


def not_prepared_hint(run_id: str) -> str:
    """What to do when the Site Runtime answering does not have the Attempt: its logs
    stay with the Runtime that ran it. When this checkout's dev stack runs, that is most
    often the same Site run by the other executor, and the hint names the exact commands
    to switch (``metallo dev up --executor OTHER``)."""
    from metallo.devstack.control import running_supervisor
    from metallo.devstack.layout import Layout

    live = running_supervisor(Layout.default())
    executor = (live or {}).get("executor")
    if executor in DEV_EXECUTORS:
        other = next(e for e in DEV_EXECUTORS if e != executor)
        return (f"this dev stack's Site Runtime runs the {executor} executor and never ran "
                "this Attempt; its logs stay with the Runtime that ran it. If the "
                f"{other} executor ran it: `metallo dev down && metallo dev up --executor "
                f"{other}`, then `metallo run logs {run_id or 'RUN'}` again")
    return ("the Site Runtime answering for this Site does not have the Attempt: its logs "
            "stay with the Runtime that ran it (with `metallo dev up`, start the stack with "
            "the executor that ran it: `metallo dev up --executor local` or `--executor "
            "slurm`)")


def refusal(read: ec.RunLogRead, stage: str) -> CliError:
    """The CliError for a read that did not become ``ready``, with what to do next."""
    if read.state == "pending":
        return CliError(f"the Site did not return the {stage} log in time",
                        "run the same command again later", Exit.UNCERTAIN,
                        code="log-read-timeout")
    hints = {"attempt-not-prepared": not_prepared_hint(read.run_id)}
    code = read.reason_code or "log-read-refused"
    # The Site does not have the Attempt: nothing to read there (not a usage error).
    exit_code = Exit.NOT_FOUND if code == "attempt-not-prepared" else Exit.USAGE
    return CliError(f"the log read was refused: {read.reason_code or read.state}",
                    hints.get(code, "check that the Run's Attempt ran at a Site and that you "
                              "may read it (runs.read)"), exit_code, code=code)


async def follow_log(platform: Platform, who: Actor, run_id: str, *, stage: str, attempt: int,
                     max_bytes: int, emit: Callable[[ec.RunLogRead], None],
                     note: Callable[[str], None],
                     sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> ec.Run:
    """Print ``stage``'s log of the Run's Attempt as it grows, until the Run has ended
    and the log is read to its end; return the final Run.

    Starts with the log's last ``max_bytes`` (bytes), then reads from each answer's
    ``next_offset``: at once while an answer says more follows, else after 1 s, doubling
    to 8 s while nothing new arrives. ``attempt`` 0 follows the latest Attempt and moves
    on to a retry's new Attempt (from its first byte) once the one followed has ended and
    its log is read; a given ``attempt`` is followed until it has ended (the Run may go
    on with another). ``emit`` gets each ready read with text; ``note`` gets progress
    remarks (for stderr). Raises CliError for a refused read, for a Runtime that cannot
    follow (``follow-unsupported``) and for a Run that does not exist (exit 3).
    """
    from metallo.cli.run_view import get_run

    followed = attempt or None
    offset: int | None = None
    interval = POLL_MIN_SECONDS
    said: set[str] = set()

    def once(text: str) -> None:
        if text not in said:
            said.add(text)
            note(text)

    while True:
        run = await get_run(platform, who, run_id)
        numbers = {a.number: a for a in run.attempts}
        latest = max(numbers, default=0)
        if followed is None and latest:
            followed = latest
        current = numbers.get(followed or 0)
        if current is None and attempt and (
            run.phase == "terminal" or 0 < run.max_attempts < attempt
        ):
            raise CliError(f"Run {run_id} has no Attempt {attempt}"
                           + (f" (at most {run.max_attempts})" if run.max_attempts else ""),
                           f"`metallo run show {run_id}` lists its Attempts; omit --attempt "
                           "for the latest", Exit.NOT_FOUND, code="not-found")
        if current is None:
            if followed is not None and run.phase != "terminal":
                once(f"(Run {run_id} has no Attempt {followed} yet; waiting)")
            elif run.phase == "terminal":
                return run
            else:
                once(f"(Run {run_id} is {run.phase}: no Attempt yet; waiting)")
            await sleep(interval)
            continue
        ended_before_read = current.state in ATTEMPT_ENDED
        if current.state in NOT_AT_SITE_YET:
            once(f"(Attempt {followed} is {current.state}; waiting for its Site)")
            await sleep(interval)
            continue
        try:
            read = await read_once(platform, who, run_id, attempt=followed, stage=stage,
                                   max_bytes=max_bytes, offset=offset)
        except CliError as rejected:
            if rejected.code != "attempt-not-at-site":
                raise
            await sleep(interval)
            continue
        if read.state != "ready":
            if read.state == "pending" or read.reason_code in RETRY_CODES:
                once("(the Site did not answer a read in time; trying again)")
                await sleep(interval)
                continue
            # An Attempt with native jobs, or that succeeded, ran at its Site: a Runtime
            # without it is not the one that ran it (another executor), not "no log".
            ran = bool(current.native_jobs) or current.state == "succeeded"
            if read.reason_code != "attempt-not-prepared" or not ended_before_read or ran:
                raise refusal(read, stage)
            # It ended before its Site ran it (refused, or cancelled first): no log.
            note(f"(Attempt {followed} ended before its Site ran it; it has no log)")
            later = [n for n in numbers if n > followed]
            if later and not attempt:
                followed, offset = min(later), 0
                continue
            if run.phase == "terminal" or attempt:
                return run
            await sleep(interval)
            continue
        if not read.HasField("next_offset"):
            raise CliError("this Site's Runtime cannot follow a log (it predates log offsets)",
                           f"read the log once the Run has ended: `metallo run wait {run_id}`, "
                           f"then `metallo run logs {run_id}`", Exit.USAGE,
                           code="follow-unsupported")
        if offset is not None and read.HasField("size") and read.size < offset:
            # The log is shorter than what was read of it: the stage wrote it anew
            # (e.g. a Slurm stage job submitted again truncates its output file).
            note(f"(the {stage} log started over; reading it from its first byte)")
            offset = 0
            continue
        if read.text:
            emit(read)
        grew = read.next_offset != offset
        offset = read.next_offset
        more = read.truncated and read.HasField("requested_offset")  # more follows already
        if more:
            continue
        if ended_before_read:
            if read.size > read.next_offset:
                # The ended log's last bytes are not a whole UTF-8 character.
                once(f"(the {stage} log of Attempt {followed} ends with "
                     f"{read.size - read.next_offset} bytes that are not UTF-8 text)")
            later = [n for n in numbers if n > followed]
            if later and not attempt:
                followed, offset = min(later), 0
                note(f"(Attempt {followed} started; following its {stage} log)")
                continue
            if run.phase == "terminal" or attempt:
                return run  # with --attempt: that Attempt has ended, the Run may go on
        interval = POLL_MIN_SECONDS if grew else min(interval * 2, POLL_MAX_SECONDS)
        await sleep(interval)

