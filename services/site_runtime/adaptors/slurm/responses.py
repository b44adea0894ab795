"""Tolerant parsing of slurmrestd answers (docs/slurm-lab.md).

Responses are parsed for slurmrestd v0.0.38 and later shapes: ``job_state`` as a
string or a list of flags, numbers as plain values or ``{set, infinite, number}``
objects, ``errors``/``warnings`` absent, and exit codes as raw wait statuses
(v0.0.38 slurmctld) or ``{status, return_code, signal}`` objects (slurmdbd and
later versions).
"""

from __future__ import annotations

from typing import Any

from site_runtime.domain.slurm_jobs import NativeJob
from site_runtime.domain.slurm_stages import ACTIVE_STATES, TERMINAL_STATES


class ResponseShapeError(ValueError):
    """A slurmrestd answer has a shape this parser does not know (never quotes the body)."""


def number(value: Any) -> int | None:
    """A Slurm number: plain int, or ``{set, infinite, number}`` (None when unset/infinite)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return None
        return number(value.get("number"))
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        # slurmdbd's comment object: {"job": ..., "administrator": ..., "system": ...}
        return _text(value.get("job"))
    return str(value)


def job_state(value: Any) -> tuple[str, tuple[str, ...]]:
    """``(base state, other flags)`` from a string, a list of flags, or ``{current: ...}``."""
    if isinstance(value, dict):
        value = value.get("current")
    if isinstance(value, str):
        flags = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        flags = list(value)
    else:
        raise ResponseShapeError("job state has an unknown shape")
    flags = [f.strip().upper() for f in flags if f and f.strip()]
    if not flags:
        raise ResponseShapeError("job state is empty")
    base = next((f for f in flags if f in TERMINAL_STATES or f in ACTIVE_STATES), flags[0])
    return base, tuple(f for f in flags if f != base)


def exit_status(value: Any) -> tuple[int | None, int | None]:
    """``(exit code, signal)`` from a raw wait status or an exit-code object."""
    if isinstance(value, dict):
        signal_obj = value.get("signal")
        signal = None
        if isinstance(signal_obj, dict):
            signal = number(signal_obj.get("signal_id", signal_obj.get("id")))
        status = value.get("status")
        statuses = status if isinstance(status, list) else [status]
        code = number(value.get("return_code"))
        if "SIGNALED" in statuses and signal is not None:
            return code, signal
        return code, signal if signal else None
    raw = number(value)
    if raw is None:
        return None, None
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def step_signal(
    code: int | None, signal: int | None, derived: tuple[int | None, int | None]
) -> tuple[int | None, int | None]:
    """``(exit code, signal)`` of a job whose batch script ended non-zero because one of
    its job steps died by a signal (``derived``, the job's derived exit code, says
    which): that signal, no exit code — the compute script (version 4 on) runs each
    command as a step and can only pass the death on as ``128+N``. Otherwise ``(code,
    signal)`` unchanged, so a command's own ``exit 137`` stays exit code 137."""
    if signal is None and code not in (None, 0) and derived[1]:
        return None, derived[1]
    return code, signal


def _reason(job: dict[str, Any]) -> str | None:
    reason = job.get("state_reason")
    if reason is None and isinstance(job.get("state"), dict):
        reason = job["state"].get("reason")
    return reason if isinstance(reason, str) else None


#: slurmctld's "no value" of a 32-bit field (``NO_VAL``): an unset array task id.
NO_VAL = 0xFFFFFFFE


def array_fields(job: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    """``(array job id, task index, pending task range)`` of a job record: slurmctld's
    ``array_job_id`` / ``array_task_id`` / ``array_task_string``, or slurmdbd's
    ``array: {job_id, task_id, task}``. ``(None, None, None)`` for a plain job
    (array job id 0 or absent)."""
    nested = job.get("array") if isinstance(job.get("array"), dict) else {}
    array_id = number(job.get("array_job_id", nested.get("job_id")))
    if not array_id:
        return None, None, None
    task = number(job.get("array_task_id", nested.get("task_id")))
    if task is not None and not 0 <= task < NO_VAL - 1:
        task = None
    pending = job.get("array_task_string", nested.get("task"))
    pending = pending if isinstance(pending, str) and pending.strip() else None
    return str(array_id), task, None if task is not None else pending


def parse_job(job: Any, source: str) -> NativeJob:
    """One job object of ``/slurm/*/jobs`` or ``/slurmdb/*/jobs`` as :class:`NativeJob`."""
    if not isinstance(job, dict):
        raise ResponseShapeError("a job entry is not an object")
    job_id = number(job.get("job_id"))
    if job_id is None:
        raise ResponseShapeError("a job entry has no job id")
    state_field = job.get("job_state", job.get("state"))
    state, _flags = job_state(state_field)
    code, signal = exit_status(job.get("exit_code"))
    code, signal = step_signal(code, signal, exit_status(job.get("derived_exit_code")))
    user = job.get("user_name", job.get("user"))
    association = job.get("association")
    account = job.get("account")
    if not account and isinstance(association, dict):
        account = association.get("account")
    dependency = job.get("dependency")
    array_job_id, array_task, array_pending = array_fields(job)
    return NativeJob(
        job_id=str(job_id),
        name=_text(job.get("name")),
        comment=_text(job.get("comment")),
        account=_text(account),
        user=_text(user),
        state=state,
        reason=_reason(job),
        exit_code=code,
        signal=signal,
        partition=_text(job.get("partition")) or None,
        dependency=_text(dependency) or None,
        source=source,
        requeue=job["requeue"] if isinstance(job.get("requeue"), bool) else None,
        restarts=_restarts(job.get("restart_cnt")),
        array_job_id=array_job_id,
        array_task=array_task,
        array_pending=array_pending,
    )


def _restarts(value: Any) -> int | None:
    """``restart_cnt`` as a count (None when absent or not a small count)."""
    n = number(value)
    return n if n is not None and 0 <= n < NO_VAL - 1 else None


def parse_jobs(body: Any, source: str) -> list[NativeJob]:
    """All jobs of a jobs response (``jobs`` may be absent when empty)."""
    if not isinstance(body, dict):
        raise ResponseShapeError("the answer is not a JSON object")
    jobs = body.get("jobs", [])
    if not isinstance(jobs, list):
        raise ResponseShapeError("jobs is not a list")
    return [parse_job(j, source) for j in jobs]


def error_numbers(body: Any) -> list[int]:
    """The ``error_number``/``error_code`` values of an answer's ``errors`` (may be absent)."""
    if not isinstance(body, dict):
        return []
    errors = body.get("errors") or []
    if not isinstance(errors, list):
        return []
    found = []
    for e in errors:
        if isinstance(e, dict):
            n = number(e.get("error_number", e.get("error_code")))
            if n is not None and n != 0:
                found.append(n)
    return found


def submitted_job_id(body: Any) -> str | None:
    """The job id of a submit answer (``job_id`` or ``result.job_id``), None when absent."""
    if not isinstance(body, dict):
        return None
    value = body.get("job_id")
    if value is None and isinstance(body.get("result"), dict):
        value = body["result"].get("job_id")
    n = number(value)
    return str(n) if n is not None and n > 0 else None
