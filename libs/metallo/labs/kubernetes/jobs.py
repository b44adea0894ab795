"""The Job controller (batch/v1), as Kubernetes 1.31 behaves for NonIndexed Jobs.

- Pods from ``spec.template`` named ``<job>-<5 chars>``, labelled
  ``batch.kubernetes.io/controller-uid``, ``batch.kubernetes.io/job-name``,
  ``controller-uid``, ``job-name``, owned by the Job (``controller: true``,
  ``blockOwnerDeletion: true``) and carrying the ``batch.kubernetes.io/job-tracking``
  finalizer until the controller counted them; created as the Job's creator, so
  admission (quota, user) applies to them as to the member.
- Up to ``parallelism`` active Pods until ``completions`` succeeded; a failed Pod is
  replaced after a back-off (1 s doubling, lab speed; Kubernetes waits 10 s) until
  ``failed > backoffLimit``.
- ``status.active/ready/terminating/succeeded/failed/startTime/completionTime``;
  conditions: ``SuccessCriteriaMet`` then ``Complete`` (reason ``CompletionsReached``);
  ``FailureTarget`` then ``Failed`` with reason ``BackoffLimitExceeded`` or
  ``DeadlineExceeded`` (``activeDeadlineSeconds`` from ``startTime``). The final
  condition is added only once no Pod of the Job is active or terminating.
- ``ttlSecondsAfterFinished`` deletes a finished Job (Background propagation).
Not emulated: Indexed completion, ``podFailurePolicy``, ``successPolicy``, ``suspend``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time

from metallo.labs.kubernetes.clock import parse_rfc3339, rfc3339
from metallo.labs.kubernetes.errors import ApiError
from metallo.labs.kubernetes.events import record_event
from metallo.labs.kubernetes.resources import JOBS, PODS
from metallo.labs.kubernetes.store import Store, UserInfo
from metallo.labs.kubernetes.watches import WatchEvent

log = logging.getLogger("metallo.labs.kubernetes.jobs")

TRACKING = "batch.kubernetes.io/job-tracking"
UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"
BACKOFF_BASE = 1.0
BACKOFF_MAX = 60.0


def job_defaults(job: dict) -> None:
    """Defaults the API server sets on create (selector and template labels included)."""
    spec = job.setdefault("spec", {})
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    labels = {UID_LABEL: uid, NAME_LABEL: name, "controller-uid": uid, "job-name": name}
    spec.setdefault("selector", {"matchLabels": {UID_LABEL: uid}})
    template = spec.setdefault("template", {})
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}


def _condition(kind: str, reason: str, message: str) -> dict:
    now = rfc3339()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def _has(status: dict, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in status.get("conditions") or [])


class JobController:
    """Reconciles every Job on each change of the Job or its Pods, and once a second."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._dirty: set[tuple[str, str]] = set()
        self._wake = asyncio.Event()
        self._last_failure: dict[str, float] = {}  # Job uid -> when a Pod last failed
        self._create_failures: dict[str, tuple[int, float]] = {}  # Job uid -> (refusals, last)
        store.listeners.append(self._on_event)

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.obj["metadata"]
        if ev.rtype is JOBS:
            self._dirty.add((meta["namespace"], meta["name"]))
            self._wake.set()
        elif ev.rtype is PODS:
            for ref in meta.get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    self._dirty.add((meta["namespace"], ref["name"]))
                    self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            except TimeoutError:
                self._dirty.update((j["metadata"]["namespace"], j["metadata"]["name"])
                                   for j in self.store.iter(JOBS))
            self._wake.clear()
            keys, self._dirty = self._dirty, set()
            for ns, name in sorted(keys):
                try:
                    self.sync(ns, name)
                except Exception:  # noqa: BLE001 - one Job's failure must not stop the others
                    log.exception("job %s/%s failed to sync", ns, name)
            self.release_orphans()

    def release_orphans(self) -> None:
        """Drop the tracking finalizer of finished or deleted Pods whose Job is gone, being
        deleted or no longer owns them (orphaned), so they can be removed."""
        for pod in list(self.store.iter(PODS)):
            meta = pod["metadata"]
            if TRACKING not in (meta.get("finalizers") or []):
                continue
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed") and not meta.get("deletionTimestamp"):
                continue
            owner = next((r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job" and r.get("controller")),
                         None)
            job = self.store.peek(JOBS, meta["namespace"], owner["name"]) if owner else None
            if job is not None and job["metadata"]["uid"] == owner["uid"] and not job["metadata"].get("deletionTimestamp"):
                continue
            self.store.mutate(PODS, meta["namespace"], meta["name"], lambda o: o["metadata"].__setitem__(
                "finalizers", [f for f in o["metadata"].get("finalizers", []) if f != TRACKING]))

    def _pods(self, job: dict) -> list[dict]:
        uid = job["metadata"]["uid"]
        return [p for p in self.store.iter(PODS, job["metadata"]["namespace"])
                if any(r.get("uid") == uid and r.get("controller") for r in p["metadata"].get("ownerReferences") or [])]

    def sync(self, ns: str, name: str) -> None:
        job = self.store.peek(JOBS, ns, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        status = copy.deepcopy(job.get("status") or {})
        if _has(status, "Complete") or _has(status, "Failed"):
            self._expire(job, status)
            return
        status.setdefault("startTime", rfc3339())
        pods = self._pods(job)
        for pod in pods:
            self._count(pod, status)
        live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]
        finishing = _has(status, "SuccessCriteriaMet") or _has(status, "FailureTarget")
        if not finishing:
            target = self._target(job, status)
            if target is not None:
                status.setdefault("conditions", []).append(target)
                finishing = True
        if finishing:
            for pod in active:
                self.store.delete(PODS, ns, pod["metadata"]["name"], grace_seconds=None)
            if not live:
                self._finish(status)
        else:
            self._create_missing(job, status, len(active))
        status["active"] = len(active) if not finishing else 0
        status["ready"] = sum(1 for p in active if _ready(p))
        status["terminating"] = len(terminating) + (len(active) if finishing else 0)
        status.setdefault("succeeded", 0)
        status.setdefault("failed", 0)
        status["uncountedTerminatedPods"] = {}
        for k in [k for k in ("succeeded", "failed", "active") if status.get(k) == 0]:
            status.pop(k)  # Kubernetes omits zero counters
        self.store.mutate(JOBS, ns, name, lambda o: o.__setitem__("status", status), status=True)

    def _count(self, pod: dict, status: dict) -> None:
        meta = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase")
        if TRACKING not in (meta.get("finalizers") or []) or phase not in ("Succeeded", "Failed"):
            return
        key = "succeeded" if phase == "Succeeded" else "failed"
        status[key] = int(status.get(key, 0)) + 1
        if key == "failed":
            self._last_failure[pod["metadata"]["ownerReferences"][0]["uid"]] = time.time()
        self.store.mutate(PODS, meta["namespace"], meta["name"], lambda o: o["metadata"].__setitem__(
            "finalizers", [f for f in o["metadata"].get("finalizers", []) if f != TRACKING]))

    def _target(self, job: dict, status: dict) -> dict | None:
        spec = job["spec"]
        if int(status.get("succeeded", 0)) >= int(spec.get("completions") or 1):
            return _condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
        if int(status.get("failed", 0)) > int(spec.get("backoffLimit", 6)):
            return _condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and time.time() - parse_rfc3339(status["startTime"]) >= int(deadline):
            return _condition("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline")
        return None

    def _finish(self, status: dict) -> None:
        for c in list(status.get("conditions") or []):
            if c["type"] == "SuccessCriteriaMet" and not _has(status, "Complete"):
                status["conditions"].append(_condition("Complete", c["reason"], c["message"]))
                status["completionTime"] = rfc3339()
            if c["type"] == "FailureTarget" and not _has(status, "Failed"):
                status["conditions"].append(_condition("Failed", c["reason"], c["message"]))

    def _create_missing(self, job: dict, status: dict, active: int) -> None:
        spec, meta = job["spec"], job["metadata"]
        want = min(int(spec.get("parallelism", 1)),
                   int(spec.get("completions") or 1) - int(status.get("succeeded", 0))) - active
        failed = int(status.get("failed", 0))
        if want <= 0:
            return
        tries, at = self._create_failures.get(meta["uid"], (0, 0.0))
        if tries and time.time() - at < min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (tries - 1)):
            return
        if failed and time.time() - self._last_failure.get(meta["uid"], 0.0) < \
                min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (failed - 1)):
            return
        creator = UserInfo(self.store.creators.get(meta["uid"], "system:serviceaccount:kube-system:job-controller"),
                           ("system:authenticated",))
        template = spec.get("template") or {}
        for _ in range(want):
            pod = {
                "metadata": {
                    "generateName": f"{meta['name']}-",
                    "labels": copy.deepcopy((template.get("metadata") or {}).get("labels") or {}),
                    "annotations": copy.deepcopy((template.get("metadata") or {}).get("annotations") or {}),
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                         "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
                    "finalizers": [TRACKING],
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
            try:
                self.store.create(PODS, meta["namespace"], pod, creator)
            except ApiError as e:
                record_event(self.store, job, "Warning", "FailedCreate", f"Error creating: {e.message}")
                tries = self._create_failures.get(meta["uid"], (0, 0.0))[0] + 1
                self._create_failures[meta["uid"]] = (tries, time.time())
                return
            self._create_failures.pop(meta["uid"], None)
            record_event(self.store, job, "Normal", "SuccessfulCreate", "Created pod")

    def _expire(self, job: dict, status: dict) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        done = status.get("completionTime") or next(
            (c["lastTransitionTime"] for c in status.get("conditions") or [] if c["type"] == "Failed"), None)
        if ttl is not None and done and time.time() - parse_rfc3339(done) >= int(ttl):
            meta = job["metadata"]
            self.store.delete(JOBS, meta["namespace"], meta["name"], propagation="Background")


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])
