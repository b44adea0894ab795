"""Advancing one Kubernetes Attempt through its stages (docs/site-runtime.md, Kubernetes).

``stage-in`` (preparation helper Pod) → ``compute`` (the Job) → ``stage-out`` (helper
Pod) → ``succeeded``; any stage that fails ends the Attempt ``failed`` with its code.
What the API says comes from one :class:`Snapshot` per observe cycle — one list of
Jobs and one of Pods by the Site's label selector for every active Attempt — and
only an object the snapshot lacks is read by name (it may be newer than the list).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from site_runtime.adaptors.kubernetes.api import KubeApi, KubeError
from site_runtime.adaptors.kubernetes.journal import AttemptRow, KubernetesJournal
from site_runtime.adaptors.kubernetes.objects import (
    NativeObjects,
    NativeRefused,
    identity_of,
    uncertain,
)
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import RepositoryGrants, release_stage_grant
from site_runtime.domain.kubernetes_batch import KubernetesJob, KubernetesSite, parse_kubernetes_job
from site_runtime.domain.kubernetes_manifests import compute_job, grant_secret, helper_pod
from site_runtime.domain.kubernetes_names import (
    ANNOTATION_ATTEMPT,
    LABEL_STAGE,
    Identity,
    object_name,
    site_selector,
)
from site_runtime.domain.kubernetes_observation import helper_failure, output_commit
from site_runtime.domain.kubernetes_status import StageState, job_facts, pod_facts

log = logging.getLogger("site_runtime.kubernetes")
HELPERS = ("stage-in", "stage-out")
SNAPSHOT_SECONDS = 1.0  # observes and starts within this long of a list share it


@dataclass
class Snapshot:
    """Jobs and Pods of the Site at one moment, indexed by (attempt id, stage)."""

    jobs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    pods: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    taken_at: float = 0.0

    @classmethod
    def of(cls, jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> Snapshot:
        """Index the lists by the exact attempt-id annotation and the stage label."""
        snap = cls(taken_at=time.monotonic())
        for obj in jobs:
            snap.jobs[_key(obj)] = obj
        for obj in sorted(
            pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or ""
        ):
            snap.pods.setdefault(_key(obj), []).append(obj)
        return snap


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (
        (meta.get("annotations") or {}).get(ANNOTATION_ATTEMPT, ""),
        (meta.get("labels") or {}).get(LABEL_STAGE, ""),
    )


async def take_snapshot(api: KubeApi, site_id: str) -> Snapshot:
    """One list of Jobs and one of Pods for the whole Site (raises KubeError)."""
    selector = site_selector(site_id)
    return Snapshot.of(await api.list("Job", selector), await api.list("Pod", selector))


class Snapshots:
    """The Site's snapshot of each observe cycle (one list of Jobs, one of Pods).

    An ended stage in a snapshot has truly ended, and one the snapshot lacks is read
    by name, so a snapshot up to :data:`SNAPSHOT_SECONDS` old serves every observe and
    start of its cycle: sharing only delays a create, never makes a wrong one."""

    def __init__(self, api: KubeApi, site_id: str) -> None:
        self.api = api
        self.site_id = site_id
        self._snapshot: Snapshot | None = None
        self._listing: asyncio.Future[Snapshot] | None = None

    def expire(self) -> None:
        """The next :meth:`cycle` lists again (a new cycle)."""
        self._snapshot = None

    async def fresh(self) -> Snapshot | None:
        """A new snapshot (a supervision pass); None when the API cannot list now."""
        try:
            self._snapshot = await take_snapshot(self.api, self.site_id)
        except KubeError as error:
            log.info("listing the Site's Jobs and Pods failed (%s)", error)
            return None
        return self._snapshot

    async def shared(self) -> Snapshot | None:
        """:meth:`cycle`, or None when the API cannot list now (stages are then read
        by name)."""
        try:
            return await self.cycle()
        except KubeError as error:
            log.info("listing the Site's Jobs and Pods failed (%s)", error)
            return None

    async def cycle(self) -> Snapshot:
        """The snapshot of this cycle: taken again once older than SNAPSHOT_SECONDS;
        commands asking while a list is in flight share its answer (one list per
        cycle, however many observes and starts arrive). Raises KubeError."""
        snap = self._snapshot
        if snap is not None and time.monotonic() - snap.taken_at <= SNAPSHOT_SECONDS:
            return snap
        if self._listing is None or self._listing.done():
            self._listing = asyncio.ensure_future(take_snapshot(self.api, self.site_id))
        self._snapshot = await asyncio.shield(self._listing)
        return self._snapshot


class StageDriver:
    """Creates the next stage's objects and reads the current one's state."""

    def __init__(
        self,
        site: KubernetesSite,
        journal: KubernetesJournal,
        api: KubeApi,
        objects: NativeObjects,
        grants: RepositoryGrants,
        on_end: Callable[[AttemptRow, str, str | None, str | None], Awaitable[None]],
    ) -> None:
        self.site = site
        self.journal = journal
        self.api = api
        self.objects = objects
        self.grants = grants
        self._on_end = on_end

    def job(self, row: AttemptRow) -> KubernetesJob:
        """The Attempt's checked material (it was checked at prepare)."""
        return parse_kubernetes_job(row.material, self.site)

    # ------------------------------------------------------------ creates
    async def begin_helper(self, row: AttemptRow, stage: str) -> None:
        """Create ``stage``'s Secret (with a fresh grant) and helper Pod, each once.
        Raises NativeRefused, Deferred, or EdgeRefused when the grant is refused."""
        kjob = self.job(row)
        identity = identity_of(row, self.site.site_id)
        pod = self.journal.object(row.attempt_id, stage)
        if pod is not None and pod.state != "intent":
            return
        member = kjob.member
        needs_grant = kjob.job.repository_url.startswith("https://")
        if needs_grant:
            await self._grant_secret(row, stage, kjob, identity)
        await self.objects.ensure(
            row,
            stage,
            helper_pod(self.site, kjob, identity, stage, with_grant=needs_grant),
            identity,
            user=member.user,
            groups=member.groups,
        )

    async def _grant_secret(
        self, row: AttemptRow, stage: str, kjob: KubernetesJob, identity: Identity
    ) -> None:
        role = f"{stage}-secret"
        secret = self.journal.object(row.attempt_id, role)
        if secret is not None and secret.state != "intent":
            return
        if secret is not None:
            # A Secret whose create answer was lost holds a grant this retry replaces:
            # it goes first (and its grant is revoked), so no Pod reads a stale token.
            await self.objects.delete(row, role, identity)
            self.journal.reopen(row.attempt_id, role)
            if secret.grant_id and not secret.grant_released:
                await self.release(row.attempt_id, role, secret.grant_id)
        name = object_name(row.attempt_id, stage)
        self.journal.intent(row.attempt_id, role, "Secret", name)
        await self.journal.durable()  # the intent is durable before a grant is issued
        try:
            grant = await self.grants.issue(row.attempt_id, stage)
        except EdgeUnavailable as error:
            raise Deferred("repository-unavailable", "no repository grant now") from error
        self.journal.set_grant(row.attempt_id, role, grant.grant_id)
        manifest = grant_secret(identity, kjob.member.namespace, stage, grant.username, grant.token)
        await self.objects.ensure(
            row, role, manifest, identity, user=kjob.member.user, groups=kjob.member.groups
        )

    async def finish_helper(self, row: AttemptRow, stage: str) -> None:
        """The helper Pod ended: its grant is revoked and its Secret deleted now (what
        the API cannot do now is left to the cleanup pass, never lost)."""
        role = f"{stage}-secret"
        secret = self.journal.object(row.attempt_id, role)
        if secret is None:
            return
        if secret.grant_id and not secret.grant_released:
            await self.release(row.attempt_id, role, secret.grant_id)
        try:
            await self.objects.delete(row, role, identity_of(row, self.site.site_id))
        except Deferred as error:
            log.info(
                "attempt %s: %s Secret left for cleanup (%s)", row.attempt_id, stage, error.code
            )

    async def begin_compute(self, row: AttemptRow) -> None:
        """Create the Job once (raises NativeRefused or Deferred)."""
        kjob = self.job(row)
        identity = identity_of(row, self.site.site_id)
        await self.objects.ensure(
            row,
            "compute",
            compute_job(self.site, kjob, identity),
            identity,
            user=kjob.member.user,
            groups=kjob.member.groups,
        )

    async def release(self, attempt_id: str, role: str, grant_id: str) -> bool:
        """Revoke one stage grant at the edge; False (kept for later) when it cannot now."""
        await self.journal.durable()  # what led here is durable before the edge is asked
        return await release_stage_grant(self.grants, self.journal, attempt_id, role, grant_id, log)

    # ------------------------------------------------------------ reads
    async def state(
        self, row: AttemptRow, stage: str, snapshot: Snapshot | None
    ) -> StageState | None:
        """The stage's native state; None when its object is gone (never created, or lost)."""
        obj = self.journal.object(row.attempt_id, stage)
        if obj is None or obj.state in ("deleting", "deleted"):
            return None
        if obj.state == "intent":
            # Created before its answer was lost (a restart): adopt it by name and identity.
            if await self.objects.find(row, stage, identity_of(row, self.site.site_id)) is None:
                return None
            obj = self.journal.object(row.attempt_id, stage) or obj
        if snapshot is not None:
            if stage == "compute" and (row.attempt_id, stage) in snapshot.jobs:
                return job_facts(
                    snapshot.jobs[(row.attempt_id, stage)],
                    snapshot.pods.get((row.attempt_id, stage), []),
                )
            pods = snapshot.pods.get((row.attempt_id, stage))
            if stage != "compute" and pods:
                return pod_facts(pods[-1])
        try:
            found = await self.api.get(obj.kind, row.namespace, obj.name)
            if found is None or (obj.uid and found["metadata"].get("uid") != obj.uid):
                return None
            if stage == "compute":
                pods = await self.api.list("Pod", f"{LABEL_STAGE}=compute,job-name={obj.name}")
                return job_facts(
                    found, [p for p in pods if p["metadata"].get("namespace") == row.namespace]
                )
            return pod_facts(found)
        except KubeError as error:
            raise uncertain(error, f"get {obj.kind}") from None

    async def stage_out_commit(self, row: AttemptRow) -> str | None:
        """The output commit from the stage-out helper's last log line (None: none)."""
        obj = self.journal.object(row.attempt_id, "stage-out")
        if obj is None:
            return None
        try:
            data = await self.api.log(row.namespace, obj.name, "stage-out", 1024 * 1024)
        except KubeError:
            return None
        return output_commit(data[-8192:].decode(errors="replace"))

    # ------------------------------------------------------------ advance
    async def settle_preparation(self, row: AttemptRow, snapshot: Snapshot | None) -> None:
        """Before ``start``: once the preparation Pod ended, its grant is revoked and its
        Secret deleted (the end itself is judged when the Attempt starts)."""
        secret = self.journal.object(row.attempt_id, "stage-in-secret")
        if secret is None or (secret.state == "deleted" and secret.grant_released):
            return
        current = await self.state(row, "stage-in", snapshot)
        if current is not None and current.ended:
            await self.finish_helper(row, "stage-in")

    async def advance(self, row: AttemptRow, snapshot: Snapshot | None) -> None:
        """Move the Attempt forward by at most one stage (see the module doc): record
        the current stage's end and create the next stage's object. Raises Deferred
        when a create or read cannot be completed now."""
        if row.state not in ("stage-in", "compute", "stage-out"):
            return
        stage = row.state
        current = await self.state(row, stage, snapshot)
        if current is None and row.cancel_result is not None:
            await self._on_end(row, "cancelled", "cancelled", None)  # deleted by the cancel
            return
        if current is None:
            obj = self.journal.object(row.attempt_id, stage)
            if obj is None or obj.state == "intent":  # never created: create it now
                await self._create(row, stage)
                return
            await self._fail(row, stage, None, None, "kubernetes-object-lost")
            return
        if not current.ended:
            return
        code = current.code
        if stage in HELPERS and current.state == "failed":
            code = code or helper_failure(current.exit_code) or f"{stage}-failed"
        elif stage == "compute" and current.state == "failed":
            code = code or "compute-failed"
        self.journal.ended(row.attempt_id, stage, current.exit_code, current.signal, code)
        if stage in HELPERS:
            await self.finish_helper(row, stage)
        if current.state == "failed":
            await self._fail(row, stage, current.exit_code, current.signal, code)
            return
        if stage == "stage-out":
            await self._on_end(row, "succeeded", None, await self.stage_out_commit(row))
            return
        if row.cancel_result is not None:
            return
        following = "compute" if stage == "stage-in" else "stage-out"
        if following == "compute":
            deadline = self.job(row).job.deadline
            if deadline is not None and deadline <= datetime.now(UTC):
                self.journal.tombstone(row.attempt_id, "compute", "Job", "-")
                await self._on_end(row, "failed", "attempt-deadline-passed", None)
                return
        self.journal.set_state(row.attempt_id, following)
        row = self.journal.attempt(row.attempt_id) or row
        # An object created just now has not ended: the next cycle reads it.
        await self._create(row, following)

    async def _create(self, row: AttemptRow, stage: str) -> None:
        try:
            if stage == "compute":
                await self.begin_compute(row)
            else:
                await self.begin_helper(row, stage)
        except NativeRefused as refused:
            await self._fail(row, stage, None, None, refused.code)
        except EdgeRefused:
            await self._fail(row, stage, None, None, "authorisation-refused")

    async def _fail(
        self,
        row: AttemptRow,
        stage: str,
        exit_code: int | None,
        signal: int | None,
        code: str | None,
    ) -> None:
        if self.journal.object(row.attempt_id, stage) is None:
            self.journal.tombstone(row.attempt_id, stage, "Pod" if stage in HELPERS else "Job", "-")
        self.journal.ended(row.attempt_id, stage, exit_code, signal, code)
        await self._on_end(row, "failed", code, None)
