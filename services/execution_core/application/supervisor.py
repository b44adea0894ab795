"""The Run Supervisor (seed 004 §4D, §4E, §7C).

One pass claims due Runs under fenced leases on PostgreSQL's clock (committed),
then, for each, in ONE transaction: reads the Run, its current Attempt and that
Attempt's Site commands with their recorded results, asks the pure lifecycle
(:func:`~execution_core.domain.lifecycle.decide`) for the next step, and
persists it — new Site commands (rows plus ``AppendSiteCommand`` in the outbox:
persisted before they are dispatched), the Attempt's and the Run's new state,
``RunStarted`` / ``RunCompleted`` events — with a write that holds only while
the lease and the Run's version still hold. A stale supervisor's transaction is
rolled back whole, so two supervisors never both act, and a command is never
appended twice (a unique (attempt, kind, ordinal) key backs this up).

Command ids are derived from (attempt, kind, ordinal), so even a replayed step
names the same Site command and Site Coordination's idempotency absorbs it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from execution_core.application.faults import FaultHook, no_fault
from execution_core.application.ports import MessageOutbox, RunStore, SiteDrainStore
from execution_core.application.projection import run_completed
from execution_core.application.settings import Settings
from execution_core.application.transitions import record_transition
from execution_core.domain import arrays, lifecycle
from execution_core.domain import states as s
from execution_core.domain.canonical import canonical_json
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.persistence.leases import Claim, LeaseLost
from metallo.persistence.polling import PollingWorker
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

if TYPE_CHECKING:
    from execution_core.application.array_groups import ArrayGroups

log = logging.getLogger(__name__)

COMMAND_NAMESPACE = uuid.UUID("6f1c7d0e-3d1a-4f57-9a53-5f0d8f4a8c11")


def site_command_id(attempt_id: str, kind: str, ordinal: int) -> str:
    """The stable id of an Attempt's ``ordinal``-th command of ``kind`` (uuid5)."""
    return str(uuid.uuid5(COMMAND_NAMESPACE, f"{attempt_id}:{kind}:{ordinal}"))


class VersionMoved(Exception):
    """The Run changed since it was read (a result arrived or a cancel was saved)."""


def command_fact(row: dict[str, Any]) -> lifecycle.CommandFact:
    """A ``site_commands`` row as the lifecycle's CommandFact."""
    result = row.get("result") or {}
    return lifecycle.CommandFact(
        command_id=row["command_id"],
        kind=row["kind"],
        ordinal=row["ordinal"],
        seq=row["seq"],
        created_at=row["created_at"],
        outcome=row["outcome"],
        code=row["code"],
        native_jobs=tuple(result.get("native_jobs") or ()),
        observation=result.get("observation"),
        result_at=row["result_at"],
    )


class RunSupervisor(PollingWorker):
    """Drives planned Runs to their end (see module doc). ``owner`` names it in leases."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        store: RunStore,
        outbox: MessageOutbox,
        settings: Settings,
        *,
        owner: str = "run-supervisor",
        fault: FaultHook = no_fault,
        drains: SiteDrainStore | None = None,
        groups: ArrayGroups | None = None,
    ):
        self.sessions = sessions
        self.store = store
        self.outbox = outbox
        self.settings = settings
        self.timing = settings.timing()
        self.owner = f"{owner}:{uuid.uuid4().hex[:8]}"
        self.fault = fault
        self.drains = drains  # None: no Site is ever draining
        self.groups = groups  # None: no Run is started in an array group

    @property
    def poll_seconds(self) -> float:
        """Seconds to sleep between polls when no Run was due."""
        return self.settings.supervisor_poll_seconds

    @property
    def claim_limit(self) -> int:
        """Runs claimed per pass (``Settings.batch``): a shorter claim waits for a wake-up."""
        return self.settings.batch

    async def run_once(self) -> int:
        """Claim due Runs and take one step for each; return how many were claimed."""
        async with self.sessions() as session, session.begin():
            claims = await self.store.claim_for_supervision(
                session, self.owner, self.settings.supervisor_lease_seconds, self.settings.batch
            )
        if claims:
            await self.fault("supervisor:claimed")
        for claim in claims:
            try:
                await self.step(claim)
            except LeaseLost:
                log.info("run %s: lease lost; another supervisor has it", claim.key)
            except VersionMoved:
                await self._release_for_retry(claim)
        return len(claims)

    async def _release_for_retry(self, claim: Claim) -> None:
        """The Run moved while deciding: free the lease and look again at once."""
        try:
            async with self.sessions() as session, session.begin():
                now = await self.store.now(session)
                await self.store.release_claim(session, claim, {"next_wake_at": now})
        except LeaseLost:
            pass

    async def _site_draining(self, session: AsyncSession, run: dict, current: dict | None
                             ) -> bool:
        """Whether the Run's Site is draining, asked only when a new Attempt may come
        (no Attempt yet, or the current one ended): the hot observe path never pays."""
        if self.drains is None or (current is not None
                                   and current["state"] not in s.ATTEMPT_TERMINAL):
            return False
        return await self.drains.is_draining(session, run["site_id"])

    async def step(self, claim: Claim) -> None:
        """Decide and persist one step of the claimed Run, atomically and fenced."""
        async with self.sessions() as session, session.begin():
            run, now = await self.store.find_run_at(session, claim.key)
            if run is None or now is None or run["lease_token"] != claim.token:
                raise LeaseLost(f"run {claim.key}")
            current = (
                await self.store.find_attempt(session, run["current_attempt_id"])
                if run["current_attempt_id"]
                else None
            )
            commands = (
                await self.store.commands_of(session, current["attempt_id"]) if current else []
            )
            view = lifecycle.RunView(
                run_id=run["run_id"],
                family=run["family"],
                desired_state=run["desired_state"],
                phase=run["phase"],
                max_attempts=run["max_attempts"],
                backoff_seconds=run["backoff_seconds"],
                material=run["material"] or {},
                cancel_origin=run["cancel_origin"],
                retry_at=run["retry_at"],
                started=run["started"],
                retry_on_lost=run["retry_on_lost"],
                site_draining=await self._site_draining(session, run, current),
            )
            facts = (await self.groups.facts_for_step(session, run, current, now)
                     if self.groups is not None else None)
            attempt_view = None
            if current is not None:
                attempt_view = lifecycle.AttemptView(
                    attempt_id=current["attempt_id"],
                    number=current["number"],
                    state=current["state"],
                    created_at=current["created_at"],
                    dispatch_deadline=current["dispatch_deadline"],
                    # A group's start-array row stands for its children through their
                    # own (pending or relayed) start, never as a command of its own.
                    commands=tuple(command_fact(c) for c in commands
                                   if c["kind"] != arrays.START_ARRAY),
                    native_end_noticed_after_seq=current.get("native_end_noticed_after_seq"),
                    lost_marked=current.get("lost_marked_at") is not None,
                    deferred_command_id=run["waiting_command_id"],
                    array=facts,
                )
            decision = lifecycle.decide(view, attempt_view, now, self.timing)
            await self.fault("supervisor:decided")
            if self.groups is not None:
                await self.groups.after_decision(session, run, facts, decision, now)
            note = arrays.start_note(facts)
            await self._persist(session, claim, run, current, commands, decision, now,
                                array_start=note or run.get("array_start", ""))
            await self.fault("supervisor:before-commit")
        await self.fault("supervisor:committed")

    async def _persist(
        self,
        session: AsyncSession,
        claim: Claim,
        run: dict[str, Any],
        current: dict[str, Any] | None,
        existing: list[dict[str, Any]],
        d: lifecycle.Decision,
        now: datetime,
        array_start: str = "",
    ) -> None:
        run_values: dict[str, Any] = {
            "phase": d.phase,
            "desired_state": d.desired_state,
            "cancel_origin": d.cancel_origin,
            "retry_at": d.retry_at,
            "next_wake_at": d.wake_at or now + timedelta(seconds=self.timing.result_recheck),
        }
        if d.attempt is not None or d.new_attempt_number is not None:
            # The Run mirrors its current Attempt's observation (seed 002 §9.2 dimensions).
            run_values.update(
                native_state=d.native_state,
                observation_phase=d.observation_phase,
                observation_confidence=d.confidence,
                native_wait=d.native_wait,
                native_stage=d.native_stage,
            )
            if d.exit:
                run_values["exit"] = d.exit
            if d.output_commit:
                run_values["output_commit"] = d.output_commit
            if d.endpoint:
                run_values["endpoint"] = d.endpoint
        if array_start != run.get("array_start", ""):
            run_values["array_start"] = array_start
        if d.desired_state == s.DESIRED_CANCEL and run["desired_state"] != s.DESIRED_CANCEL:
            run_values["cancel_requested_at"] = now  # the dispatch deadline stopped it

        attempt = current
        if d.new_attempt_number is not None:
            attempt = {
                "attempt_id": str(uuid.uuid4()),
                "run_id": run["run_id"],
                "number": d.new_attempt_number,
                "state": s.ATTEMPT_PREPARING,
                "material_digest": run["material_digest"],
                "dispatch_deadline": d.new_attempt_deadline,
            }
            await self.store.insert_attempt(session, attempt)
            existing = []
            run_values.update(
                current_attempt_id=attempt["attempt_id"],
                attempt_count=d.new_attempt_number,
                exit={},  # the Run mirrors its current Attempt's facts
            )
        elif d.attempt is not None and current is not None:
            a = d.attempt
            values: dict[str, Any] = {
                "state": a.state,
                "native_jobs": a.native_jobs,
                "observation_phase": a.observation_phase,
                "native_state": a.native_state,
                "reason_code": a.reason_code,
            }
            if a.exit:
                values["exit"] = a.exit
            if a.started and current["started_at"] is None:
                values["started_at"] = now
            if a.ended and current["ended_at"] is None:
                values["ended_at"] = now
            await self.store.update_attempt(session, current["attempt_id"], values)

        run_values.update(_waiting_values(run, d))
        if d.emit_started:
            run_values.update(started=True, started_at=now)
        if d.end is not None:
            outcome, code = d.end
            run_values.update(
                phase=s.PHASE_TERMINAL, outcome=outcome, reason_code=code, ended_at=now
            )

        if not await self.store.update_run(
            session, run["run_id"], run["version"], run_values, claim=claim, release=True
        ):
            # Either the lease moved on (a stale supervisor) or a result/cancel bumped
            # the version; in both cases this transaction rolls back whole.
            fresh = await self.store.find_run(session, run["run_id"])
            if fresh is None or fresh["lease_token"] != claim.token:
                raise LeaseLost(f"run {run['run_id']}")
            raise VersionMoved(run["run_id"])
        await record_transition(session, self.store, run, run_values, run["version"] + 1)

        if d.commands:
            assert attempt is not None
            await self._append_commands(session, run, attempt, existing, d.commands)
        if d.emit_started and attempt is not None:
            await self.outbox.publish_event(
                session,
                pb.RunStarted(
                    run_id=run["run_id"],
                    project=run["project"],
                    attempt_id=attempt["attempt_id"],
                    attempt_number=attempt["number"],
                    site_id=run["site_id"],
                    launch_command_id=run["launch_command_id"],
                    launch_key=run["launch_key"] or "",
                    labels=run["labels"] or {},
                ),
                aggregate_id=f"run:{run['run_id']}",
            )
        if d.end is not None:
            ended = {**run, **run_values}
            await self.outbox.publish_event(
                session, run_completed(ended), aggregate_id=f"run:{run['run_id']}"
            )

    async def _append_commands(
        self,
        session: AsyncSession,
        run: dict[str, Any],
        attempt: dict[str, Any],
        existing: list[dict[str, Any]],
        commands: list[tuple[str, dict[str, Any]]],
    ) -> None:
        counts: dict[str, int] = {}
        for c in existing:
            counts[c["kind"]] = max(counts.get(c["kind"], 0), c["ordinal"])
        # Each command names the Attempt's one before it: Site Coordination appends it
        # only after that one, whichever replica or redelivery handles it first (log
        # reads and starts relayed from a group's start-array stand apart).
        previous = arrays.predecessor(existing)
        for kind, payload in commands:
            ordinal = counts.get(kind, 0) + 1
            counts[kind] = ordinal
            command_id = site_command_id(attempt["attempt_id"], kind, ordinal)
            await self.store.insert_command(
                session,
                {
                    "command_id": command_id,
                    "run_id": run["run_id"],
                    "attempt_id": attempt["attempt_id"],
                    "kind": kind,
                    "ordinal": ordinal,
                    "site_id": run["site_id"],
                    "environment": run["environment"],
                    "payload": payload,
                },
            )
            await self.outbox.send_command(
                session,
                sc.AppendSiteCommand(
                    metadata=common_pb2.CommandMetadata(
                        command_id=command_id,
                        acting_member=run["initiating_member"],
                        project=run["project"],
                    ),
                    site_id=run["site_id"],
                    environment=run["environment"],
                    kind=kind,
                    run_id=run["run_id"],
                    attempt_id=attempt["attempt_id"],
                    attempt_number=attempt["number"],
                    payload_json=canonical_json(payload),
                    after_command_id=previous,
                ),
                aggregate_id=f"run:{run['run_id']}",
            )
            previous = command_id


def _waiting_values(run: dict[str, Any], d: lifecycle.Decision) -> dict[str, Any]:
    """The Run's waiting columns after decision ``d``: an ending clears them all (and the
    native wait); Execution Core's own code is set or cleared as ``d`` says, and never
    overwrites a Site's deferral code of a pending command."""
    if d.end is not None or d.new_attempt_number is not None:
        return {"waiting_reason": "", "waiting_command_id": None, "native_wait": ""}
    if d.waiting_reason is None:
        return {}
    own = run["waiting_command_id"] is None
    if d.waiting_reason and (own or not run["waiting_reason"]):
        return {"waiting_reason": d.waiting_reason, "waiting_command_id": None}
    if not d.waiting_reason and own and run["waiting_reason"]:
        return {"waiting_reason": ""}
    return {}
