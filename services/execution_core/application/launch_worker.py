"""The launch worker: plans accepted launches under fenced leases (seed 004 §3C, §3D).

One pass: claim accepted Runs that are due (``FOR UPDATE SKIP LOCKED``, lease on
PostgreSQL's clock, committed), then for each, outside any transaction, read the
exact Workload revision and the Project's Sites, and in one fenced transaction
record the verdict:

- a :class:`~execution_core.domain.planning.Plan` → the Run's immutable
  execution specification, target, pinned commits and Attempt 1 with its
  material digest; the supervisor is woken;
- a :class:`~execution_core.domain.planning.Rejection` → the Run ends failed with
  its reason code, and ``RunCompleted`` is written in the same transaction;
- a temporary condition → a durable retry time (doubling, at most 300 s) until
  the planning timeout, after which the Run is rejected ``planning-timed-out``.

A stale worker's write is refused by the lease and the Run's version.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from execution_core.application.faults import FaultHook, no_fault
from execution_core.application.ports import (
    AuthorityUnavailable,
    MessageOutbox,
    ProjectAuthority,
    RevisionNotFound,
    RevisionUnavailable,
    RunStore,
    SiteDrainStore,
    WorkloadRevisions,
)
from execution_core.application.projection import run_completed
from execution_core.application.settings import Settings
from execution_core.application.transitions import record_transition
from execution_core.domain import reasons
from execution_core.domain import states as s
from execution_core.domain.planning import Plan, PlanningInput, Rejection, RevisionFacts, Wait, plan
from metallo.persistence.leases import Claim, LeaseLost
from metallo.persistence.polling import PollingWorker

if TYPE_CHECKING:
    from execution_core.application.array_groups import ArrayGroups

log = logging.getLogger(__name__)
MAX_PLANNING_RETRY_SECONDS = 300.0


class LaunchWorker(PollingWorker):
    """Plans accepted launches (see module doc). ``owner`` names the worker in leases."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        store: RunStore,
        authority: ProjectAuthority,
        revisions: WorkloadRevisions,
        outbox: MessageOutbox,
        settings: Settings,
        *,
        owner: str = "launch-worker",
        fault: FaultHook = no_fault,
        drains: SiteDrainStore | None = None,
        groups: ArrayGroups | None = None,
    ):
        self.sessions = sessions
        self.store = store
        self.authority = authority
        self.revisions = revisions
        self.outbox = outbox
        self.settings = settings
        self.owner = f"{owner}:{uuid.uuid4().hex[:8]}"
        self.fault = fault
        self.drains = drains  # None: no Site is ever draining (planning tests)
        self.groups = groups  # None: no Run is planned in an array group

    @property
    def poll_seconds(self) -> float:
        """Seconds to sleep between polls when no launch was due."""
        return self.settings.launch_poll_seconds

    @property
    def claim_limit(self) -> int:
        """Runs claimed per pass (``Settings.batch``): a shorter claim waits for a wake-up."""
        return self.settings.batch

    async def run_once(self) -> int:
        """Claim due launches and plan each; return how many were claimed."""
        async with self.sessions() as session, session.begin():
            claims = await self.store.claim_for_planning(
                session, self.owner, self.settings.launch_lease_seconds, self.settings.batch
            )
        if claims:
            await self.fault("launch:claimed")
        for claim in claims:
            try:
                await self._plan_one(claim)
            except LeaseLost:
                log.info("launch %s: lease lost; another worker has it", claim.key)
        return len(claims)

    async def _plan_one(self, claim: Claim) -> None:
        async with self.sessions() as session, session.begin():
            run = await self.store.find_run(session, claim.key)
        if run is None or run["lease_token"] != claim.token:
            return
        if run["phase"] != s.PHASE_ACCEPTED:
            return
        verdict: Plan | Rejection | Wait
        try:
            revision: RevisionFacts = await self.revisions.get(
                run["project"], run["initiating_member"], run["workload_id"], run["revision"]
            )
        except RevisionNotFound as exc:
            verdict = Rejection(
                reasons.WORKLOAD_REVISION_NOT_FOUND, str(exc) or "no such Workload revision"
            )
            revision = None  # type: ignore[assignment]
        except RevisionUnavailable as exc:
            verdict = Wait(reasons.WAIT_WORKLOAD_PORTFOLIO_UNAVAILABLE, str(exc))
            revision = None  # type: ignore[assignment]
        await self.fault("launch:revision-read")
        async with self.sessions() as session, session.begin():
            await self.store.lock_admission(session, run["project"])
            now = await self.store.now(session)
            # An array group's row is locked before the Run's (the deciders' one order).
            group = await self.groups.planning_group(session, run) if self.groups else None
            if revision is not None:
                verdict = (self.groups and self.groups.refusal(group)) or await self._decide(
                    session, run, revision, site_id=self.groups.planning_site(group) if self.groups else ""
                )
            await self._record(session, claim, run, verdict, now, group)
            await self.fault("launch:before-commit")

    async def _decide(
        self, session: AsyncSession, run: dict, revision: RevisionFacts, *, site_id: str = ""
    ) -> Plan | Rejection | Wait:
        try:
            if not self.authority.project_exists(run["project"]):
                return Rejection(reasons.PROJECT_NOT_FOUND, f"Project {run['project']} is unknown")
            sites = tuple(self.authority.sites_for(run["project"]))
            bindings = {}
            for site in sites:
                b = self.authority.binding(run["initiating_member"], site.site_id)
                if b is not None:
                    bindings[site.site_id] = b
            limit = self.authority.project_run_limit(run["project"])
        except AuthorityUnavailable as exc:
            return Wait(reasons.WAIT_GOVERNANCE_UNAVAILABLE, str(exc))
        in_project, per_site = await self.store.count_active(session, run["project"])
        draining = await self.drains.draining_ids(session) if self.drains else frozenset()
        return plan(
            PlanningInput(
                project=run["project"],
                member_id=run["initiating_member"],
                revision=revision,
                sites=sites,
                bindings=bindings,
                project_run_limit=limit,
                active_in_project=in_project,
                active_per_site=per_site,
                repository_commit=run["repository_commit"],
                draining=draining,
                parameters=dict(run.get("parameters") or {}),
                site_id=site_id,
            )
        )

    async def _record(
        self, session: AsyncSession, claim: Claim, run: dict, verdict, now: datetime,
        group: dict | None = None,
    ) -> None:
        version = run["version"]
        attempt_id = str(uuid.uuid4())
        if isinstance(verdict, Wait) and self.groups is not None:
            verdict = await self.groups.on_planning_wait(session, run, group, verdict)
            if isinstance(verdict, Rejection):
                group = None  # the group is settled failed: nothing more to record on it
        if isinstance(verdict, Wait):
            waited = (now - run["accepted_at"]).total_seconds()
            if waited < self.settings.planning_timeout_seconds:
                delay = min(
                    self.settings.planning_retry_seconds * (2 ** min(run["planning_tries"], 16)),
                    MAX_PLANNING_RETRY_SECONDS,
                )
                values = {
                    "planning_tries": run["planning_tries"] + 1,
                    "planning_wait_code": verdict.code,
                    "planning_error": verdict.message[:500],
                    "next_wake_at": now + timedelta(seconds=delay),
                }
                if not await self.store.update_run(
                    session, run["run_id"], version, values, claim=claim, release=True
                ):
                    raise LeaseLost(f"run {run['run_id']} moved on")
                return
            verdict = Rejection(reasons.PLANNING_TIMED_OUT, f"still waiting: {verdict.code}")
        if self.groups is not None and group is not None:
            verdict = await self.groups.on_planned(session, run, group, verdict, attempt_id)
        if isinstance(verdict, Rejection):
            values = {
                "phase": s.PHASE_TERMINAL,
                "outcome": s.OUTCOME_FAILED,
                "reason_code": verdict.code,
                "planning_error": verdict.message[:500],
                "ended_at": now,
            }
            if verdict.code == reasons.ARRAY_UNAVAILABLE:
                values["array_start"] = f"refused: {verdict.message}"[:500]
            if not await self.store.update_run(
                session, run["run_id"], version, values, claim=claim, release=True
            ):
                raise LeaseLost(f"run {run['run_id']} moved on")
            await record_transition(session, self.store, run, values, version + 1)
            await self.outbox.publish_event(
                session, run_completed({**run, **values}), aggregate_id=f"run:{run['run_id']}"
            )
            return
        assert isinstance(verdict, Plan)
        material = {
            "project": run["project"],
            "workload_id": run["workload_id"],
            "revision": run["revision"],
            "action": verdict.action,
            "action_type": verdict.action_type,
            "family": verdict.family,
            "service_kind": verdict.service_kind or None,
            "spec": verdict.spec,
            "material_digest": verdict.material_digest,
            "repository": verdict.repository,
            "member": verdict.member,
        }
        values = {
            "action": verdict.action,
            "action_type": verdict.action_type,
            "environment": verdict.environment,
            "family": verdict.family,
            "service_kind": verdict.service_kind,
            "site_id": verdict.site_id,
            "spec": verdict.spec,
            "spec_digest": verdict.spec_digest,
            "repositories": list(verdict.repositories),
            "material": material,
            "material_digest": verdict.material_digest,
            "max_attempts": verdict.retry.max_attempts,
            "backoff_seconds": verdict.retry.backoff_seconds,
            "retry_on_lost": verdict.retry.on_lost,
            "phase": s.PHASE_PREPARING,
            "planned_at": now,
            "planning_wait_code": "",
            "planning_error": "",
            "current_attempt_id": attempt_id,
            "attempt_count": 1,
            "next_wake_at": now,
        }
        if not await self.store.update_run(
            session, run["run_id"], version, values, claim=claim, release=True
        ):
            raise LeaseLost(f"run {run['run_id']} moved on")
        await record_transition(session, self.store, run, values, version + 1)
        await self.store.insert_attempt(
            session,
            {
                "attempt_id": attempt_id,
                "run_id": run["run_id"],
                "number": 1,
                "state": s.ATTEMPT_PENDING,
                "material_digest": verdict.material_digest,
                # An array group's children share one deadline (their one array has one):
                # counted from the group's creation, not each child's planning.
                "dispatch_deadline": (group["created_at"] if group is not None else now)
                + timedelta(seconds=self.settings.dispatch_timeout_seconds),
            },
        )
