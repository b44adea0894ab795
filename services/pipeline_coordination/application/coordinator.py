"""The Pipeline coordinator: claims Pipelines with fenced leases and drives their steps (seed 004 §8B, §8C).

One pass: claim due Pipelines (``FOR UPDATE SKIP LOCKED``, lease on
PostgreSQL's clock), then for each, repeatedly

1. in a transaction: hold the lease (row lock), reload, :func:`settle`, save;
   publish ``PipelineCompleted`` in the same transaction when it just ended;
2. ask :func:`plan` for the outside call due now;
3. for a launch, first save the launch intent (``launching``) — refused once a
   stop is recorded, which is the stop's fence;
4. make the call outside any transaction, with the request's stable
   command_id (a restart re-sends the very same request);
5. in a transaction: hold, reload, apply the answer, save;

then release the lease with the next wake time. A stale holder's writes are
refused (LeaseLost) and the pass moves on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from metallo.messaging import Outbox
from metallo.persistence.leases import Claim, LeaseLost
from pipeline_coordination.application import collection_calls
from pipeline_coordination.application.faults import CoordinatorCrash, FaultHook, no_fault
from pipeline_coordination.application.ports import (
    LaunchRequest,
    PipelineStore,
    Portfolio,
    Refused,
    Runs,
    Unavailable,
)
from pipeline_coordination.application.settings import Settings
from pipeline_coordination.domain import answers, collection_schedule, identities, schedule
from pipeline_coordination.domain import pipeline as d

log = logging.getLogger(__name__)

CompletedEvent = Callable[[d.Pipeline], Any]
CollectionEvent = Callable[[d.Pipeline, d.Step], Any]
MAX_ROUNDS = 20  # outside calls per claim before the Pipeline goes back to the queue


class Coordinator:
    """The coordinator worker (see module doc). ``completed_event(p)`` builds the PipelineCompleted
    message, ``collection_event(p, step)`` the CollectionCompleted of a collection step that ended."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        store: PipelineStore,
        portfolio: Portfolio,
        runs: Runs,
        outbox: Outbox,
        completed_event: CompletedEvent,
        settings: Settings,
        *,
        owner: str | None = None,
        fault: FaultHook = no_fault,
        collection_event: CollectionEvent | None = None,
    ):
        self.sessions = sessions
        self.store = store
        self.portfolio = portfolio
        self.runs = runs
        self.outbox = outbox
        self.completed_event = completed_event
        self.settings = settings
        self.timing = settings.timing()
        self.owner = owner or f"coordinator-{uuid.uuid4().hex[:8]}"
        self.fault = fault
        self.collection_event = collection_event
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        """Start :meth:`run_forever` as a background task named after the owner."""
        self._task = asyncio.create_task(self.run_forever(), name=self.owner)

    async def stop(self) -> None:
        """Cancel the background task and wait for it; an unexpected error is logged, not raised."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, CoordinatorCrash):
                pass  # the expected ends of a stopped (or test-killed) coordinator
            except Exception:
                log.exception("%s: ended with an error", self.owner)
            self._task = None

    @property
    def task(self) -> asyncio.Task | None:
        """The background task while started, else None."""
        return self._task

    async def run_forever(self) -> None:
        """Pass after pass; idle ``poll_seconds`` when nothing was due."""
        while True:
            try:
                worked = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: pass failed", self.owner)
                worked = 0
            if not worked:
                await asyncio.sleep(self.settings.poll_seconds)

    async def run_once(self) -> int:
        """Claim due Pipelines and work each; return how many were claimed."""
        async with self.sessions() as session, session.begin():
            claims = await self.store.claim(session, self.owner, self.settings.lease_seconds, self.settings.batch)
        for claim in claims:
            await self.fault("claimed")
            try:
                await self._work(claim)
            except LeaseLost:
                log.info("%s: lease on pipeline %s lost; another coordinator carries on", self.owner, claim.key)
            except Exception:
                # One Pipeline's surprise must not hold up the others; its lease
                # expires and the next pass tries again.
                log.exception("%s: pipeline %s failed this pass", self.owner, claim.key)
        return len(claims)

    # ------------------------------------------------------------ one Pipeline

    async def _apply(self, claim: Claim, change: Callable[[d.Pipeline, Any], d.Pipeline]) -> tuple[d.Pipeline, int, Any]:
        """Hold the lease, reload, apply ``change(p, now)``, settle, save; return (pipeline, wake_seq, now)."""
        async with self.sessions() as session, session.begin():
            await self.store.hold(session, claim, self.settings.lease_seconds)
            found = await self.store.load(session, claim.key)
            assert found is not None
            p, meta = found
            now = await self.store.now(session)
            new = change(p, now)
            settled = schedule.settle(new, now)
            new = settled.pipeline
            await self.store.save(session, p, new)
            for s in collection_schedule.just_ended(p, new) if self.collection_event else ():
                await self.outbox.publish_event(
                    session, self.collection_event(new, s), aggregate_id=f"pipeline:{new.pipeline_id}"
                )
            if settled.completed:
                await self.outbox.publish_event(
                    session, self.completed_event(new), aggregate_id=f"pipeline:{new.pipeline_id}"
                )
            return new, meta.wake_seq, now

    async def _work(self, claim: Claim) -> None:
        p, wake_seq, now = await self._apply(claim, lambda p, now: p)
        await self.fault("settled")
        wake_in: float | None = None
        for _ in range(MAX_ROUNDS):
            step_plan = schedule.plan(p, now, self.timing)
            effect = step_plan.effect
            if effect is None:
                wake_in = step_plan.wake_in
                break
            try:
                async with self._heartbeat(claim):
                    change = await self._perform(claim, p, effect)
            except Unavailable as e:
                log.info("pipeline %s: %s not answered (%s); retrying later", p.pipeline_id, effect.kind, e)
                p, wake_seq, now = await self._apply(
                    claim, lambda p, now, m=str(e), r=e.saved: answers.on_temporary_failure(p, m, renew_identity=r)
                )
                wake_in = schedule.retry_delay(p, self.timing)
                break
            p, wake_seq, now = await self._apply(claim, change)
        else:
            wake_in = 0.0
        async with self.sessions() as session, session.begin():
            await self.store.release(
                session, claim, seen_wake_seq=wake_seq, active=p.needs_work, wake_in=wake_in
            )

    @contextlib.asynccontextmanager
    async def _heartbeat(self, claim: Claim):
        """Renew the lease every third of ``lease_seconds`` while an outside call is under way.

        A dead process renews nothing, so its lease still expires on time; a
        live one never loses a Pipeline just because an owner answers slowly.
        """

        async def beat() -> None:
            while True:
                await asyncio.sleep(self.settings.lease_seconds / 3)
                async with self.sessions() as session, session.begin():
                    await self.store.hold(session, claim, self.settings.lease_seconds)

        task = asyncio.create_task(beat())
        try:
            yield
        finally:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, LeaseLost):
                pass

    async def _perform(self, claim: Claim, p: d.Pipeline, effect: d.Effect) -> Callable[[d.Pipeline, Any], d.Pipeline]:
        """Make the effect's outside call; return the pure change that applies its answer."""
        pid = p.pipeline_id
        if effect.kind == "prepare-branch":
            cid = identities.command_id(pid, "prepare-branch", round_=p.request_round)
            try:
                prepared, commit = await self.portfolio.prepare_branch(cid, p.project, p.initiating_member, p.repository_url, p.branch)
            except Refused as e:
                await self.fault("branch-prepared")
                return lambda p, now, c=e.code, m=e.message: answers.on_branch_refused(p, c, m, now)
            await self.fault("branch-prepared")
            return lambda p, now: answers.on_branch_prepared(p, prepared, commit, now)

        if effect.item:
            async def apply(change):
                return (await self._apply(claim, change))[0]

            return await collection_calls.perform(self.runs, self.fault, apply, p, effect)
        step = p.step(effect.step)
        if effect.kind == "pin":
            cid = identities.command_id(pid, "pin", step.index, step.launch_attempt, p.request_round)
            try:
                prepared_action = await self.portfolio.prepare_action(
                    cid, p.project, p.initiating_member, p.repository_url, p.branch, step.action
                )
            except Refused as e:
                await self.fault("pinned")
                return lambda p, now, c=e.code, m=e.message: answers.on_step_refused(p, step.index, c, m, now)
            await self.fault("pinned")
            return lambda p, now: answers.on_pinned(p, step.index, prepared_action, now)

        if effect.kind == "launch":
            if step.state == d.PINNED:
                p, _seq, _now = await self._apply(claim, lambda p, now: answers.launch_intent(p, step.index))
                step = p.step(step.index)
                if step.state != d.LAUNCHING:
                    return lambda p, now: p  # a stop came first: the launch is fenced
                await self.fault("launch-intent")
            request = LaunchRequest(
                command_id=identities.command_id(pid, "launch", step.index, step.launch_attempt, p.request_round),
                project=p.project,
                member=p.initiating_member,
                workload_id=step.workload_id,
                revision=step.revision,
                launch_key=step.launch_key(pid),
                labels=identities.labels(pid, step.index, step.action),
                repository_commit=step.pinned_commit,
            )
            try:
                run_id = await self.runs.launch(request)
            except Refused as e:
                await self.fault("launched")
                return lambda p, now, c=e.code, m=e.message: answers.on_step_refused(p, step.index, c, m, now)
            await self.fault("launched")
            return lambda p, now, c=request.command_id: answers.on_launched(p, step.index, run_id, now, c)

        if effect.kind == "observe":
            try:
                view = await self.runs.get(p.project, p.initiating_member, step.run_id)
            except Refused as e:
                log.warning("pipeline %s step %d: GetRun refused (%s)", pid, step.index, e)
                return lambda p, now: answers.on_observed(p, step.index, d.RunView(run_id=step.run_id), now)
            return lambda p, now: answers.on_observed(p, step.index, view, now)

        if effect.kind == "service-timeout":
            return lambda p, now: answers.on_service_timeout(p, step.index, self.timing, now)

        if effect.kind == "cancel":
            member = p.stopped_by or p.initiating_member
            reason = (
                f"Pipeline {pid} stopped: {p.stop_reason}" if p.desired_state == d.DESIRED_STOP else f"Pipeline {pid} failed"
            )[: d.MAX_REASON]
            cid = identities.command_id(pid, "cancel", step.index, step.launch_attempt, p.request_round)
            try:
                ended, code = await self.runs.cancel(cid, p.project, member, step.run_id, reason)
            except Refused as e:
                await self.fault("cancelled")
                return lambda p, now, c=e.code, m=e.message: answers.on_cancel_refused(p, step.index, c, m)
            await self.fault("cancelled")
            return lambda p, now: answers.on_cancel_recorded(p, step.index, ended, code)

        raise ValueError(f"unknown effect {effect.kind!r}")

