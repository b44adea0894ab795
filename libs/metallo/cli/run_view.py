"""How the CLI shows and waits for one Run (``metallo run show|wait``, ``action run
--wait``): exit codes by outcome, the Run table and its Attempts, progress polling."""

from __future__ import annotations

from metallo.cli.exits import CliError, Exit
from metallo.cli.progress import Snapshot, follow, run_line
from metallo.cli.render import (
    as_dict,
    err,
    key_value_table,
    native_jobs_text,
    out,
    print_list_table,
    seconds_between,
    timestamp,
)
from metallo.cli.settings import Actor
from metallo.cli.transport import Platform, query_metadata
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.waiting import waiting_text

OUTCOME_EXIT = {"succeeded": Exit.OK, "failed": Exit.FAILED, "cancelled": Exit.FAILED,
                "lost": Exit.FAILED, "timed-out": Exit.FAILED}
OUTCOMES = tuple(OUTCOME_EXIT)
MAX_LOG_BYTES = 5 * 1024 * 1024  # seed 001, Private Run log commands: 5 MiB upload cap


def outcome_exit(outcome: str) -> Exit:
    """0 for succeeded, 1 for failed, cancelled, lost or timed-out (exits.py)."""
    return OUTCOME_EXIT.get(outcome, Exit.UNCERTAIN)


async def get_run(platform: Platform, who: Actor, run_id: str) -> ec.Run:
    """GetRun; CliError exit 3 when the Run does not exist in the Project."""
    return await platform.request(ec.GetRun(metadata=query_metadata(who), run_id=run_id))


async def wait_run(platform: Platform, who: Actor, run_id: str, *, timeout: float | None,
                   quiet: bool, step: str = "") -> ec.Run:
    """Poll the Run until it is terminal, showing progress; the final Run."""
    final: list[ec.Run] = []

    async def poll() -> Snapshot:
        run = await get_run(platform, who, run_id)
        final[:] = [run]
        return Snapshot(run_line(run, step), run.phase == "terminal")

    await follow(poll, timeout=timeout, quiet=quiet, what=f"Run {run_id}",
                 resume=f"metallo run wait {run_id}")
    return final[0]


def run_summary(run: ec.Run) -> dict:
    """The JSON shape of a Run for scripts: every field of the contract message."""
    return as_dict(run)


def _observation_text(phase: str, confidence: str) -> str:
    """The observed phase, with how far to trust it when that is not plain
    (docs/runs.md: ``stale`` — the Site has not reported for a while; ``uncertain``)."""
    if confidence in ("stale", "uncertain"):
        hint = "the Site has not reported lately" if confidence == "stale" else "the Site could not tell"
        return f"{phase} ({confidence}: {hint})" if phase else f"({confidence}: {hint})"
    return phase


def action_text(run: ec.Run) -> str:
    """The Run's action, or ``(planning)`` while an accepted Run has none yet (planning
    reads it from the Workload revision)."""
    return run.action or ("(planning)" if run.phase == "accepted" else "")


def native_text(run: ec.Run) -> str:
    """The native state; when the Site can no longer vouch for it (a ``lost`` Run, a
    ``stale``/``uncertain`` observation) marked as the last known one, with since when
    the Run's history shows that phase."""
    if not run.native_state:
        return ""
    text = f"{run.native_stage} {run.native_state}".strip()
    if run.outcome != "lost" and run.observation_confidence not in ("stale", "uncertain"):
        # An ended Run's native state is its native work's as a whole (every executor's
        # COMPLETED, FAILED, …); the stage is said while it runs (``compute RUNNING``).
        return run.native_state if run.phase == "terminal" else text
    since = ""
    for t in reversed(run.history):
        if t.observation_phase != run.observation_phase:
            break
        since = timestamp(t.at)
    return f"{text} (last known" + (f", observed {run.observation_phase} since {since})"
                                    if since and run.observation_phase else ")")


def _attempt_observation(run: ec.Run) -> str:
    """The observation row: nothing observed for an Attempt the Site refused (a
    ``prepared`` left from its prepare is no observation of native work)."""
    attempt = run.attempts[-1] if len(run.attempts) else None
    if attempt is not None and attempt.state == "refused":
        return "none (the Site refused the Attempt)"
    return _observation_text(run.observation_phase, run.observation_confidence)


def print_end(run: ec.Run, quiet: bool = False) -> None:
    """A waited-for Run: its table, or with ``quiet`` one line (id, outcome, reason)."""
    if not quiet:
        print_run(run)
        return
    reason = f" ({run.reason_code})" if run.reason_code else ""
    out.print(f"{run.run_id} {run.outcome or run.phase}{reason}", markup=False, highlight=False)


def print_run(run: ec.Run) -> None:
    """A Run as a table, then its Attempts."""
    attempt = run.attempts[-1] if len(run.attempts) else None
    elapsed = seconds_between(run.accepted_at, run.ended_at)
    out.print(key_value_table(f"Run {run.run_id}", [
        ("project", run.project), ("action", action_text(run)), ("action type", run.action_type),
        ("workload", f"{run.workload_id} r{run.revision}"), ("site", run.site_id),
        ("phase", run.phase), ("desired", run.desired_state),
        ("native state", native_text(run)),
        ("waiting", waiting_text(run.waiting_reason, run.native_wait, run.native_state)
         if run.phase != "terminal" else ""),
        ("observation", _attempt_observation(run)),
        ("outcome", run.outcome), ("reason", run.reason_code), ("why", run.reason_message),
        ("native jobs", native_jobs_text(attempt.native_jobs) if attempt else ""),
        ("input", ", ".join(f"{r.role} {r.url}@{r.commit[:12]}" for r in run.repositories)),
        ("output commit", run.output_commit), ("endpoint", run.endpoint),
        ("initiated by", run.initiating_member), ("accepted", timestamp(run.accepted_at)),
        ("ended", timestamp(run.ended_at)),
        ("elapsed", f"{elapsed:.1f} s" if elapsed is not None else ""),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))),
        ("cancel reason", run.cancel_reason), ("rerun of", run.rerun_of),
        ("array start", run.array_start),
    ]))
    if len(run.attempts):
        from rich.table import Table

        table = Table(title="Attempts", title_justify="left")
        for column in ("#", "state", "native", "jobs", "exit", "reason"):
            table.add_column(column)
        for a in run.attempts:
            exit_text = ""
            if a.exit.HasField("exit_code"):
                exit_text = f"code {a.exit.exit_code}"
            if a.exit.HasField("signal"):
                exit_text += f" signal {a.exit.signal}"
            if a.exit.failure_stage:
                exit_text += f" at {a.exit.failure_stage}"
            table.add_row(str(a.number), a.state, a.native_state, native_jobs_text(a.native_jobs),
                          exit_text.strip(), a.reason_code)
        print_list_table(table)
    then = next_hint(run)
    if then:
        err.print(f"next: {then}", markup=False, highlight=False)


def next_hint(run: ec.Run) -> str:
    """The next step after an ended Run that did not succeed, "" when there is nothing
    particular to say: why it failed (:func:`failure_hint`), what a ``lost`` Run or a Site's
    cancellation leaves at the Site, or how a collection child that never got an Attempt
    runs again."""
    if run.outcome == "failed" and len(run.attempts):
        return failure_hint(run)
    if run.outcome == "failed" and collection_child(run):
        reason = ": ".join(t for t in (run.reason_code, run.reason_message) if t) or "no reason given"
        return f"it ended before any Attempt ({reason}), so it has no logs; {rerun_advice(run)}"
    if run.outcome == "lost":
        return lost_hint(run)
    if run.outcome == "cancelled" and run.reason_code == "cancelled-at-site":
        return site_cancel_hint(run)
    return ""


def run_error(run: ec.Run) -> CliError | None:
    """The failure a wait for ``run`` reports when it ended without succeeding (exit 1),
    else None: ``code`` is its ``reason_code`` (its outcome when it has none), the message
    its outcome and reason, the hint :func:`next_hint`'s (``--output json``: ``error``)."""
    if outcome_exit(run.outcome) is not Exit.FAILED:
        return None
    reason = ": ".join(t for t in (run.reason_code, run.reason_message) if t)
    return CliError(f"Run {run.run_id} {run.outcome}" + (f": {reason}" if reason else ""),
                    next_hint(run) or f"`metallo run show {run.run_id}` shows its Attempts and why it ended",
                    Exit.FAILED, code=run.reason_code or run.outcome)


def collection_child(run: ec.Run) -> bool:
    """True for a child Run of a Pipeline step's collection (its labels name the collection)."""
    return bool(run.labels.get("collection_id"))


def rerun_advice(run: ec.Run) -> str:
    """How to run a failed Run again: ``then `metallo run rerun RUN```; for a collection child
    the Pipeline's ``rerun --failed`` (its children that did not succeed run again together,
    in their array, and the collection can succeed), saying what ``run rerun`` would do."""
    alone = f"`metallo run rerun {run.run_id}`"
    if not collection_child(run):
        return f"then {alone}"
    pipeline = run.labels.get("pipeline_id", "")
    what = (f"{alone} would rerun this child alone, outside its array, and leave collection "
            f"{run.labels['collection_id']} failed")
    if not pipeline:
        return f"then rerun its Pipeline with `metallo pipeline rerun PIPELINE --failed` ({what})"
    return (f"then `metallo pipeline rerun {pipeline} --failed` runs again every child of its collection "
            f"that did not succeed ({what})")


def site_cancel_hint(run: ec.Run) -> str:
    """The next step after the Site cancelled a Run's native work without Metallo asking
    (an administrator's or the job owner's ``scancel``): nothing of it is retried."""
    return (f"the Site cancelled its native work{_jobs_where(run)}, not a member: ask the Site "
            f"admin why if you did not cancel it there, {rerun_advice(run)}")


#: Refusals of what the action's ``resources`` ask: the same revision is refused again.
RESOURCE_REFUSALS = frozenset({"slurm-request-never-fits", "slurm-wall-time-above-limit",
                               "unsupported-slurm-accelerator-class"})

#: The command a refused Attempt's last phase before the end was waiting for.
_REFUSED_COMMAND = {"preparing": "prepare", "starting": "start"}


def _refused_command(run: ec.Run) -> str:
    """``prepare`` or ``start``: the Site command the Run waited for when it ended
    (its history's last phase before ``terminal``); "" when the history does not say."""
    phases = [t.phase for t in run.history if t.phase and t.phase != "terminal"]
    return _REFUSED_COMMAND.get(phases[-1], "") if phases else ""


def _logged_stage(attempt: ec.Attempt) -> str:
    """The stage whose log says why ``attempt`` failed: its failure stage, else compute
    when it has native work, else "" (nothing ran at the Site, so there is no log)."""
    if attempt.exit.failure_stage:
        return attempt.exit.failure_stage
    stages = [j.stage for j in attempt.native_jobs if j.stage]
    if not stages and not len(attempt.native_jobs):
        return ""
    return "compute" if "compute" in stages or not stages else stages[-1]


def _jobs_where(run: ec.Run) -> str:
    attempt = run.attempts[-1] if len(run.attempts) else None
    jobs = native_jobs_text(attempt.native_jobs) if attempt is not None else ""
    return (f" (its jobs at {run.site_id or 'the Site'}: {jobs}; on Slurm `scancel` them)"
            if jobs else "")


def lost_hint(run: ec.Run) -> str:
    """The next step after a Run ended ``lost``: Metallo no longer follows its Attempt
    and no stop reaches it, so its native work may still run at the Site."""
    return ("the Site no longer knew its Attempt, so nothing says whether the work ran, and "
            "Metallo did not stop it (a cancellation does not reach an Attempt no Runtime of "
            f"the Site knows): stop it at the Site{_jobs_where(run)} and check there before "
            "launching it again")


def unknown_cancel_warning(run: ec.Run) -> str:
    """What a cancellation of a Run whose Attempt the Site does not know does ("" when
    the Site knows it): it waits for a Runtime that knows the Attempt; if none answers
    within the reconciliation period the Attempt ends ``lost`` and its native work is not
    stopped."""
    if run.phase == "terminal" or run.waiting_reason != "attempt-unknown-at-site":
        return ""
    return ("the Site's Runtime does not know this Run's Attempt now: the cancellation waits "
            "for a Runtime that knows it (bring back the one that ran it, e.g. the executor it "
            "ran on). If none answers within the reconciliation period, the Attempt ends lost "
            f"and its native work is NOT stopped: stop it at the Site{_jobs_where(run)}")


def failure_hint(run: ec.Run) -> str:
    """The next step after a failed Run, fitting how its last Attempt ended: a refusal
    says what the Site refused and why (code and member-facing message) and that there
    is no log; native work that failed points at the log of the stage that failed."""
    attempt = run.attempts[-1]
    code = attempt.reason_code or run.reason_code
    reason = ": ".join(t for t in (code, run.reason_message) if t) or "no reason given"
    if attempt.state == "refused":
        command = _refused_command(run)
        refused = f"the Site refused Attempt {attempt.number}" + (
            f" at {command}" if command else "")
        if code in RESOURCE_REFUSALS:
            return (f"{refused} ({reason}), so nothing ran there and it has no logs; a rerun "
                    "asks for the same resources: change the action's `resources` in its "
                    "actions.yaml as the message says, publish it, and launch it again "
                    "(docs/actions.md, Resources)")
        return (f"{refused} ({reason}), so nothing ran there and it has no logs; fix what the "
                f"message names (docs/runs.md explains the code), {rerun_advice(run)}")
    stage = _logged_stage(attempt)
    if code == "slurm-job-requeued":
        return (f"Slurm requeued the {attempt.exit.failure_stage or 'stage'} job of Attempt "
                f"{attempt.number} ({reason}) and ran it again; Metallo cancelled the re-run: only "
                f"Metallo starts work again, as a new Attempt. A retry, if the action allows one, is a new Attempt; else "
                f"{rerun_advice(run).removeprefix('then ')}, and ask the Site admin why it requeued")
    if not stage:
        return (f"Attempt {attempt.number} failed before any native work started ({reason}), "
                f"so it has no logs; fix what the message names, {rerun_advice(run)}")
    return f"`metallo run logs {run.run_id} --stage {stage}` shows what it wrote ({reason})"
