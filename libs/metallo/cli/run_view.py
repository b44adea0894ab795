"""How the CLI shows and waits for one Run (``metallo run show|wait``, ``action run
--wait``): exit codes by outcome, the Run table and its Attempts, progress polling."""

from __future__ import annotations

from metallo.cli.exits import Exit
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


def print_run(run: ec.Run) -> None:
    """A Run as a table, then its Attempts."""
    attempt = run.attempts[-1] if len(run.attempts) else None
    elapsed = seconds_between(run.accepted_at, run.ended_at)
    out.print(key_value_table(f"Run {run.run_id}", [
        ("project", run.project), ("action", run.action), ("action type", run.action_type),
        ("workload", f"{run.workload_id} r{run.revision}"), ("site", run.site_id),
        ("phase", run.phase), ("desired", run.desired_state),
        ("native state", f"{run.native_stage} {run.native_state}".strip()
         if run.native_state else ""),
        ("waiting", waiting_text(run.waiting_reason, run.native_wait, run.native_state)
         if run.phase != "terminal" else ""),
        ("observation", _observation_text(run.observation_phase, run.observation_confidence)),
        ("outcome", run.outcome), ("reason", run.reason_code), ("why", run.reason_message),
        ("native jobs", native_jobs_text(attempt.native_jobs) if attempt else ""),
        ("input", ", ".join(f"{r.role} {r.url}@{r.commit[:12]}" for r in run.repositories)),
        ("output commit", run.output_commit), ("endpoint", run.endpoint),
        ("initiated by", run.initiating_member), ("accepted", timestamp(run.accepted_at)),
        ("ended", timestamp(run.ended_at)),
        ("elapsed", f"{elapsed:.1f} s" if elapsed is not None else ""),
        ("labels", ", ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))),
        ("cancel reason", run.cancel_reason), ("rerun of", run.rerun_of),
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
    if run.outcome == "failed" and len(run.attempts):
        stage = run.attempts[-1].exit.failure_stage or "compute"
        err.print(f"next: `metallo run logs {run.run_id} --stage {stage}` shows what it wrote",
                  markup=False)
    elif run.outcome == "lost":
        err.print("next: the Site no longer knew its Attempt, so nothing says whether the work "
                  "ran; check at the Site before launching it again", markup=False)
