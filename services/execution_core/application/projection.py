"""Rows → the ``metallo.execution_core.v1`` read model (GetRun, ListRuns, events)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from metallo.execution_core.v1 import execution_core_pb2 as pb


def _ts(value: datetime | None) -> Timestamp | None:
    if value is None:
        return None
    t = Timestamp()
    t.FromDatetime(value)
    return t


def exit_facts(exit_: dict[str, Any] | None) -> pb.ExitFacts:
    """The ExitFacts message of an ``exit`` JSON column."""
    e = exit_ or {}
    msg = pb.ExitFacts(
        failure_stage=str(e.get("failure_stage", "")),
        failure_code=str(e.get("failure_code", "")),
        scheduler_state=str(e.get("scheduler_state", "")),
    )
    if isinstance(e.get("exit_code"), int):
        msg.exit_code = e["exit_code"]
    if isinstance(e.get("signal"), int):
        msg.signal = e["signal"]
    return msg


def attempt_message(a: dict[str, Any]) -> pb.Attempt:
    """One Attempt row as a message."""
    msg = pb.Attempt(
        attempt_id=a["attempt_id"],
        number=a["number"],
        state=a["state"],
        material_digest=a["material_digest"],
        native_jobs=[
            pb.NativeJob(stage=str(j.get("stage", "")), job_id=str(j.get("job_id", "")))
            for j in a["native_jobs"]
        ],
        native_state=a["native_state"],
        observation_phase=a["observation_phase"],
        exit=exit_facts(a["exit"]),
        reason_code=a["reason_code"],
    )
    for name in ("created_at", "started_at", "ended_at", "dispatch_deadline"):
        ts = _ts(a.get(name))
        if ts is not None:
            getattr(msg, name).CopyFrom(ts)
    return msg


def transition_message(t: dict[str, Any]) -> pb.Transition:
    """One ``run_transitions`` row as a message."""
    msg = pb.Transition(
        version=t["version"],
        phase=t["phase"],
        desired_state=t["desired_state"],
        observation_phase=t["observation_phase"],
        outcome=t["outcome"],
        reason_code=t["reason_code"],
        attempt_number=t["attempt_number"],
    )
    at = _ts(t.get("at"))
    if at is not None:
        msg.at.CopyFrom(at)
    return msg


def _waiting_reason(r: dict[str, Any]) -> str:
    """The Run's waiting code: planning's while it is ``accepted``, else the Site's."""
    if r["phase"] == "accepted" and r.get("planning_wait_code"):
        return str(r["planning_wait_code"])
    return str(r.get("waiting_reason") or "")


def run_message(
    r: dict[str, Any],
    attempts: list[dict[str, Any]] | None = None,
    history: list[dict[str, Any]] | None = None,
) -> pb.Run:
    """One Run row (and optionally its Attempts and transition history) as a message."""
    msg = pb.Run(
        run_id=r["run_id"],
        project=r["project"],
        workload_id=r["workload_id"],
        revision=r["revision"],
        action=r["action"],
        action_type=r["action_type"],
        environment=r["environment"],
        family=r["family"],
        service_kind=r["service_kind"],
        site_id=r["site_id"],
        desired_state=r["desired_state"],
        phase=r["phase"],
        native_state=r["native_state"],
        observation_phase=r["observation_phase"],
        observation_confidence=r["observation_confidence"],
        exit=exit_facts(r["exit"]),
        outcome=r["outcome"],
        reason_code=r["reason_code"],
        initiating_member=r["initiating_member"],
        launch_command_id=r["launch_command_id"],
        launch_key=r["launch_key"] or "",
        labels=r["labels"] or {},
        repositories=[
            pb.PinnedRepository(
                role=p.get("role", ""),
                url=p.get("url", ""),
                commit=p.get("commit", ""),
                branch=p.get("branch", ""),
            )
            for p in r["repositories"] or []
        ],
        output_commit=r["output_commit"],
        endpoint=r["endpoint"],
        spec_digest=r["spec_digest"],
        cancel_reason=r["cancel_reason"],
        cancelled_by=r["cancelled_by"],
        rerun_of=r.get("rerun_of") or "",
        parameters=r.get("parameters") or {},
        array_start=r.get("array_start") or "",
        version=r["version"],
        max_attempts=r["max_attempts"],
        waiting_reason=_waiting_reason(r),
        native_wait=r.get("native_wait") or "",
        native_stage=r.get("native_stage") or "",
        attempts=[attempt_message(a) for a in attempts or []],
        history=[transition_message(t) for t in history or []],
    )
    for name in ("accepted_at", "planned_at", "started_at", "ended_at", "updated_at"):
        ts = _ts(r.get(name))
        if ts is not None:
            getattr(msg, name).CopyFrom(ts)
    return msg


def run_completed(r: dict[str, Any]) -> pb.RunCompleted:
    """The RunCompleted event of a Run row that has just become terminal."""
    return pb.RunCompleted(
        run_id=r["run_id"],
        project=r["project"],
        outcome=r["outcome"],
        reason_code=r["reason_code"],
        output_commit=r["output_commit"],
        launch_command_id=r["launch_command_id"],
        launch_key=r["launch_key"] or "",
        labels=r["labels"] or {},
        workload_id=r["workload_id"],
        revision=r["revision"],
        attempts=r["attempt_count"],
        array_start=r.get("array_start") or "",
    )
