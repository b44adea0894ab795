"""How ``metallo pipeline run|show|rerun --wait`` reads a Pipeline: its exit code, the
error of a Pipeline that did not succeed (``--output json``: ``{"error": …}``), the
next step to take, and the progress line shown while waiting."""

from __future__ import annotations

from metallo.cli.exits import CliError, Exit, rejection_exit, rejection_hint
from metallo.cli.pipeline_graph import counts_text

TERMINAL = {"succeeded", "failed", "stopped"}
STEP_ENDED = {"succeeded", "failed", "cancelled", "skipped"}

# A collection step's children in its progress line, in this order (zero counts left out).
CHILD_COUNTS = ("active", "succeeded", "failed", "cancelled", "uncertain", "waiting")


def pipeline_exit(pipeline) -> Exit:
    """0 succeeded, 1 failed or stopped, 4 not ended yet; a Pipeline that failed before any
    step launched because its branch was refused (``actions-invalid``, ``branch-not-found``,
    …) ends like the refused request it stands for: 2, or 3 for a not-found code — the
    same as ``metallo action run`` on that branch (docs/quickstart.md, exit codes)."""
    state = pipeline.state
    if failed_before_any_step(pipeline) and pipeline.reason_code:
        return rejection_exit(pipeline.reason_code)
    return {"succeeded": Exit.OK, "failed": Exit.FAILED, "stopped": Exit.FAILED}.get(state, Exit.UNCERTAIN)


def failed_before_any_step(pipeline) -> bool:
    """True when the Pipeline ended ``failed`` with no step launched (its branch or its first
    launch was refused): no step has a Run nor a collection (whose children are Runs)."""
    return pipeline.state == "failed" and not any(step_launched(s) for s in pipeline.steps)


def step_launched(step) -> bool:
    """True when the step launched work: a Run, or a collection of child Runs."""
    return bool(step.run_id or step.collection_id)


def refusal_error(pipeline) -> CliError | None:
    """The failure to report when the Pipeline failed before any step launched, else None:
    ``code`` is its ``reason_code``, the exit code :func:`pipeline_exit`'s (2, 3 for a
    not-found code, 1 without a code) and the hint the one ``metallo action run`` gives
    for that code."""
    if not failed_before_any_step(pipeline):
        return None
    why = ": ".join(t for t in (pipeline.reason_code, pipeline.message) if t) or "no reason given"
    return CliError(f"Pipeline {pipeline.pipeline_id} failed before any step launched: {why}",
                    rejection_hint(pipeline.reason_code, pipeline.repository_url),
                    pipeline_exit(pipeline),
                    code=pipeline.reason_code)


def pipeline_error(pipeline) -> CliError | None:
    """The failure to report for an ended Pipeline that did not succeed, else None (also
    None while it has not ended): :func:`refusal_error` when no step launched; otherwise
    exit 1 with ``code`` its ``reason_code``, a message naming the failed step and the
    Pipeline's own message, and :func:`next_hint` as the hint."""
    if pipeline.state not in TERMINAL or pipeline.state == "succeeded":
        return None
    refused = refusal_error(pipeline)
    if refused is not None:
        return refused
    step = failed_step(pipeline)
    where = f" at step {step.index} ({step.action})" if step is not None else ""
    why = ": ".join(t for t in (pipeline.reason_code, pipeline.message) if t) or "no reason given"
    return CliError(f"Pipeline {pipeline.pipeline_id} {pipeline.state}{where}: {why}",
                    next_hint(pipeline) or f"`metallo pipeline show {pipeline.pipeline_id}` shows "
                                           "each step's state and reason",
                    pipeline_exit(pipeline), code=pipeline.reason_code)


def failed_step(pipeline):
    """The step named by ``failed_step``, else None."""
    return next((s for s in pipeline.steps if s.index == pipeline.failed_step), None)


def children_outcome(step) -> str:
    """What became of a collection step's children that did not succeed: ``failed``,
    ``were cancelled`` or ``failed or were cancelled`` (by its counts; without counts, by
    its reason: ``collection-cancelled`` means cancelled)."""
    c = step.collection_counts
    failed, cancelled = bool(c.failed or c.uncertain), bool(c.cancelled)
    if failed and cancelled:
        return "failed or were cancelled"
    if cancelled or (not failed and step.reason_code == "collection-cancelled"):
        return "were cancelled"
    return "failed"


def next_hint(p) -> str:
    """The next step after a Pipeline failed or was stopped ("" otherwise, or when no
    step launched — the refusal's own hint says it): read the failed step's Run, or its
    collection's children (those that failed or were cancelled), then rerun what did not
    succeed."""
    if p.state not in ("failed", "stopped") or failed_before_any_step(p):
        return ""
    rerun = f"`metallo pipeline rerun {p.pipeline_id} --failed` runs again only what did not succeed"
    step = failed_step(p)
    if step is not None and step.run_id:
        return (f"`metallo run show {step.run_id}` says why step {step.index} ({step.action}) "
                f"failed and which of its logs to read; then {rerun}")
    if step is not None and step.collection_id:
        return (f"`metallo collection show {step.collection_id}` lists which children of step "
                f"{step.index} ({step.action}) {children_outcome(step)} and their Runs; then {rerun}")
    if p.state == "stopped":
        by = f" by {p.stopped_by}" if p.stopped_by else ""
        return f"the Pipeline was stopped{by}; {rerun}"
    return ""


def current_step(pipeline):
    """The first step in progress (not ended), else the first that failed or was
    cancelled (its dependents are only ``skipped``), else the last step, else None."""
    for step in pipeline.steps:
        if step.state not in STEP_ENDED:
            return step
    for step in pipeline.steps:
        if step.state in ("failed", "cancelled"):
            return step
    return pipeline.steps[-1] if len(pipeline.steps) else None


def children_text(counts) -> str:
    """``3 active, 5 succeeded, 1 failed, 11 waiting`` (zero counts left out)."""
    return ", ".join(f"{getattr(counts, k)} {k}" for k in CHILD_COUNTS if getattr(counts, k)) or "no child yet"


def collection_line(step) -> str:
    """A collection step's part of the progress line: ``step 1 sweep: 3 active, 5 succeeded``."""
    return f"step {step.index} {step.action}: {children_text(step.collection_counts)}"


def progress_label(pipeline, step) -> str:
    """The progress line of a Pipeline whose current step is ``step``: its state and step
    counts, then the step (a collection step with its children's counts, so the line
    changes — and is printed again — whenever they do), then any other collection step
    still running beside it."""
    head = f"pipeline {pipeline.state} · {counts_text(pipeline)}"
    parts = [collection_line(step) if step.collection_id else f"step {step.index} {step.action} {step.state}"]
    parts += [collection_line(s) for s in pipeline.steps
              if s.collection_id and s.index != step.index and s.state not in STEP_ENDED]
    return " · ".join([head, *parts])
