"""The one-node "kubelet": schedules each Pod on ``lab-node`` and runs its containers as
local processes (DESIGN.md, "The Kubernetes lab").

Per Pod, one worker task: wait until the Pod fits the node (``PodScheduled`` False,
``Unschedulable`` meanwhile), bind it, prepare its volumes, run init containers one
after another, then the containers together, and report every change as the Pod's
status. ``restartPolicy`` decides restarts (back-off 1 s doubling to 30 s, shown as
``CrashLoopBackOff``). An image outside the lab's list waits as ``ErrImagePull`` then
``ImagePullBackOff``; a missing Secret/ConfigMap as ``CreateContainerConfigError``.
A signal death is exit code 128+N with reason ``Error`` and ``signal`` N. Deleting
the Pod (or ``activeDeadlineSeconds`` passing) sends SIGTERM to each process group,
SIGKILL after the grace period; a deleted Pod is removed once its processes ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import os
import shutil
import signal
import time
from pathlib import Path

from metallo.labs.kubernetes.clock import parse_rfc3339, rfc3339
from metallo.labs.kubernetes.containers import (
    ConfigError,
    container_argv,
    container_env,
    forget,
    home_of,
    kill_leftovers,
    start_message,
    start_process,
)
from metallo.labs.kubernetes.pod_logs import log_file
from metallo.labs.kubernetes.pod_status import ContainerRecord, PodRecord, qos_class
from metallo.labs.kubernetes.resources import NODES, PODS, PVCS
from metallo.labs.kubernetes.scheduler import NODE_NAME, unfit_reason
from metallo.labs.kubernetes.store import Store
from metallo.labs.kubernetes.volumes import VolumeError, prepare_volumes
from metallo.labs.kubernetes.watches import WatchEvent

log = logging.getLogger("metallo.labs.kubernetes.kubelet")
RETRY_SECONDS = 1.0
MAX_BACKOFF = 30.0
_RETRY_ON = frozenset({"secrets", "configmaps", "persistentvolumeclaims", "nodes"})


class PodGone(Exception):
    """The Pod was deleted (or replaced by another with the same name)."""


class Kubelet:
    """Runs Pods from ``store``; files under ``root`` (``pods/<uid>``, ``volumes/``)."""

    def __init__(self, store: Store, root: Path, images: list[str], api_port: int) -> None:
        self.store = store
        self.root = root
        self.images = images
        self.api_port = api_port
        self.workers: dict[str, asyncio.Task] = {}
        self.wakeups: dict[str, asyncio.Event] = {}
        self.processes: dict[tuple[str, str], asyncio.subprocess.Process] = {}
        self.pending: set[str] = set()  # not yet scheduled
        self.unconfigured: set[str] = set()  # waiting for a Secret, ConfigMap or PVC
        self.registry = root / "run" / "containers"
        store.listeners.append(self._on_event)

    def reset(self) -> None:
        """Before serving: kill what a killed predecessor left running and remove its Pod
        and volume directories (no object names them any more: the store starts empty)."""
        killed = kill_leftovers(self.registry)
        if killed:
            log.warning("killed %d container process group(s) a previous lab left running", killed)
        for leftover in (self.root / "pods", self.root / "volumes"):
            shutil.rmtree(leftover, ignore_errors=True)

    def pod_dir(self, uid: str) -> Path:
        return self.root / "pods" / uid

    def running(self, uid: str, container: str) -> bool:
        return (uid, container) in self.processes

    def image_known(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.images)

    def _on_event(self, ev: WatchEvent) -> None:
        if ev.rtype is PODS:
            uid = ev.obj["metadata"]["uid"]
            if ev.type == "ADDED" and uid not in self.workers:
                self.wakeups[uid] = asyncio.Event()
                self.workers[uid] = asyncio.ensure_future(self._worker(
                    ev.obj["metadata"]["namespace"], ev.obj["metadata"]["name"], uid))
            elif uid in self.wakeups:
                self.wakeups[uid].set()
            for waiting in self.pending:  # a Pod ending or going frees room on the node
                self.wakeups[waiting].set()
        elif ev.rtype.plural in _RETRY_ON:
            for waiting in self.pending | self.unconfigured:
                self.wakeups[waiting].set()

    async def stop(self) -> None:
        """Kill every container (SIGKILL) and end the workers."""
        for proc in list(self.processes.values()):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for task in list(self.workers.values()):
            task.cancel()
        await asyncio.gather(*self.workers.values(), return_exceptions=True)

    # ------------------------------------------------------------------ the worker
    def _pod(self, ns: str, name: str, uid: str) -> dict:
        pod = self.store.peek(PODS, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid:
            raise PodGone()
        return pod

    async def _sleep(self, uid: str, seconds: float) -> None:
        wake = self.wakeups[uid]
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=seconds)

    def _publish(self, ns: str, name: str, uid: str, rec: PodRecord) -> None:
        status = rec.status()
        self.store.mutate(PODS, ns, name, lambda o: o.__setitem__("status", status), status=True)

    async def _worker(self, ns: str, name: str, uid: str) -> None:
        pod = self.store.peek(PODS, ns, name)
        if pod is None:
            return
        spec = pod["spec"]
        rec = PodRecord(
            restart_policy=spec.get("restartPolicy", "Always"),
            init=[ContainerRecord(c["name"], c.get("image", ""), True) for c in spec.get("initContainers") or []],
            main=[ContainerRecord(c["name"], c.get("image", ""), False) for c in spec.get("containers") or []],
            qos=qos_class(spec))
        try:
            await self._schedule(ns, name, uid, rec)
            await self._run_pod(ns, name, uid, rec)
        except PodGone:
            pass
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - one Pod's failure must not stop the node
            log.exception("pod %s/%s failed in the lab kubelet", ns, name)
        finally:
            await self._kill_all(uid, 0)
            self.workers.pop(uid, None)
            self.pending.discard(uid)
            self.unconfigured.discard(uid)
            self._finish_deletion(ns, name, uid, rec)
            self.wakeups.pop(uid, None)
            if self.store.peek(PODS, ns, name) is None or self.store.peek(PODS, ns, name)["metadata"]["uid"] != uid:
                shutil.rmtree(self.pod_dir(uid), ignore_errors=True)

    def _finish_deletion(self, ns: str, name: str, uid: str, rec: PodRecord) -> None:
        """A deleted Pod whose processes ended gets a terminal phase (as kubelets since
        Kubernetes 1.27 report), then is removed unless a finalizer still holds it."""
        pod = self.store.peek(PODS, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid or not pod["metadata"].get("deletionTimestamp"):
            return
        if rec.phase() not in ("Succeeded", "Failed"):
            clean = rec.main and all(c.state.get("terminated", {}).get("exitCode") == 0 for c in rec.main)
            rec.phase_override = "Succeeded" if clean else "Failed"
            for c in rec.init + rec.main:
                if "terminated" not in c.state:
                    c.state = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                              "message": "The container could not be located when the pod was deleted."}}
            self._publish(ns, name, uid, rec)
        self.store.remove_now(PODS, ns, name)

    async def _schedule(self, ns: str, name: str, uid: str, rec: PodRecord) -> None:
        self.pending.add(uid)
        while True:
            pod = self._pod(ns, name, uid)
            if pod["metadata"].get("deletionTimestamp"):
                raise PodGone()  # deleted before it was bound: it never runs
            if (pod.get("spec") or {}).get("nodeName"):
                break
            reason = self._claims_missing(pod)
            if reason is None:
                node = self.store.peek(NODES, None, NODE_NAME)
                bound = [p for p in self.store.iter(PODS) if (p.get("spec") or {}).get("nodeName") == NODE_NAME
                         and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
                reason = unfit_reason(pod, node, bound) if node else "0/0 nodes are available"
            if reason is None:
                self.store.mutate(PODS, ns, name, lambda o: o["spec"].__setitem__("nodeName", NODE_NAME))
                break
            if rec.unschedulable != reason:
                rec.unschedulable = reason
                self._publish(ns, name, uid, rec)
            await self._sleep(uid, 2.0)
        self.pending.discard(uid)
        rec.scheduled, rec.unschedulable, rec.start_time = True, None, rfc3339()
        for c in rec.main if rec.init else []:
            c.state = {"waiting": {"reason": "PodInitializing"}}
        self._publish(ns, name, uid, rec)

    def _claims_missing(self, pod: dict) -> str | None:
        for v in (pod.get("spec") or {}).get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                pvc = self.store.peek(PVCS, pod["metadata"]["namespace"], claim)
                if pvc is None:
                    return (f'0/1 nodes are available: persistentvolumeclaim "{claim}" not found. '
                            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
                if pvc["metadata"].get("deletionTimestamp"):
                    return (f'0/1 nodes are available: persistentvolumeclaim "{claim}" is being deleted. '
                            "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
        return None

    def _stopping(self, pod: dict, rec: PodRecord) -> str | None:
        """'delete' or 'deadline' when the Pod must stop now, else None."""
        if pod["metadata"].get("deletionTimestamp"):
            return "delete"
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if deadline is not None and rec.start_time and time.time() - parse_rfc3339(rec.start_time) > int(deadline):
            return "deadline"
        return None

    async def _run_pod(self, ns: str, name: str, uid: str, rec: PodRecord) -> None:
        """Run the containers, then keep the Pod's files (logs) until it is deleted."""
        await self._run_containers(ns, name, uid, rec)
        pod = self.store.peek(PODS, ns, name)
        if pod is not None and pod["metadata"]["uid"] == uid and self._stopping(pod, rec):
            await self._stop_pod(ns, name, uid, rec, pod)
        while (pod := self.store.peek(PODS, ns, name)) is not None and pod["metadata"]["uid"] == uid \
                and not pod["metadata"].get("deletionTimestamp"):
            await self._sleep(uid, 60.0)

    async def _run_containers(self, ns: str, name: str, uid: str, rec: PodRecord) -> None:
        pod_dir = self.pod_dir(uid)
        while True:
            pod = self._pod(ns, name, uid)
            if self._stopping(pod, rec):
                return
            try:
                mounts = prepare_volumes(self.store, pod, pod_dir, self.root / "volumes")
                break
            except (VolumeError, ConfigError) as e:
                self.unconfigured.add(uid)
                for c in rec.init + rec.main:
                    c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
                self._publish(ns, name, uid, rec)
                await self._sleep(uid, RETRY_SECONDS * 2)
        rec.sandbox_ready = True
        self._publish(ns, name, uid, rec)
        for c_spec, c in zip(pod["spec"].get("initContainers") or [], rec.init, strict=True):
            ok = await self._run_container(ns, name, uid, rec, c_spec, c, mounts)
            if not ok:
                return
        if rec.main and rec.init:
            for c in rec.main:
                c.state = {"waiting": {"reason": "ContainerCreating"}}
            self._publish(ns, name, uid, rec)
        await asyncio.gather(*(self._run_container(ns, name, uid, rec, c_spec, c, mounts)
                               for c_spec, c in zip(pod["spec"]["containers"], rec.main, strict=True)))

    async def _wait_or_stop(self, ns: str, name: str, uid: str, rec: PodRecord,
                            proc: asyncio.subprocess.Process) -> int:
        """The process's return code; meanwhile, a deletion or a passed deadline stops the Pod."""
        waiting = asyncio.ensure_future(proc.wait())
        while not waiting.done():
            wake = asyncio.ensure_future(self.wakeups[uid].wait())
            await asyncio.wait({waiting, wake}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            self.wakeups[uid].clear()
            pod = self.store.peek(PODS, ns, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                if not rec.stopping:
                    rec.stopping = True
                    asyncio.ensure_future(self._kill_all(uid, 0))
            elif self._stopping(pod, rec) and not rec.stopping:
                asyncio.ensure_future(self._stop_pod(ns, name, uid, rec, pod))
        return waiting.result()

    async def _stop_pod(self, ns: str, name: str, uid: str, rec: PodRecord, pod: dict) -> None:
        if rec.stopping:
            return
        rec.stopping = True
        why = self._stopping(pod, rec)
        grace = int(pod["metadata"].get("deletionGracePeriodSeconds")
                    or (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        if why == "deadline":
            rec.phase_override, rec.reason = "Failed", "DeadlineExceeded"
            rec.message = "Pod was active on the node longer than the specified deadline"
            self._publish(ns, name, uid, rec)
        await self._kill_all(uid, grace)

    async def _kill_all(self, uid: str, grace: int) -> None:
        procs = [p for (u, _), p in self.processes.items() if u == uid]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM if grace else signal.SIGKILL)
        if grace and procs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), timeout=grace)
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)

    async def _run_container(self, ns: str, name: str, uid: str, rec: PodRecord, c_spec: dict,
                             c: ContainerRecord, mounts: dict) -> bool:
        """Run one container (with restarts); True when it ended cleanly (init containers:
        exit 0), False when the Pod must not go on."""
        backoff = RETRY_SECONDS
        pulls = 0
        while True:
            pod = self._pod(ns, name, uid)
            if self._stopping(pod, rec):
                await self._stop_pod(ns, name, uid, rec, pod)
                return False
            if not self.image_known(c.image):
                pulls += 1
                reason = "ErrImagePull" if pulls % 2 else "ImagePullBackOff"
                message = (f'failed to pull and unpack image "{c.image}": the lab has no such image'
                           if pulls % 2 else f'Back-off pulling image "{c.image}"')
                c.state = {"waiting": {"reason": reason, "message": message}}
                self._publish(ns, name, uid, rec)
                await self._sleep(uid, min(MAX_BACKOFF, RETRY_SECONDS * pulls))
                continue
            exit_code = await self._run_once(ns, name, uid, rec, pod, c_spec, c, mounts)
            if exit_code is None:
                await self._sleep(uid, RETRY_SECONDS * 2)
                continue
            policy = rec.restart_policy
            restart = (policy == "Always" and not c.init) or (policy in ("Always", "OnFailure") and exit_code != 0)
            if c.init and policy == "Always" and exit_code == 0:
                restart = False
            pod = self.store.peek(PODS, ns, name)
            if not restart or pod is None or pod["metadata"]["uid"] != uid or self._stopping(pod, rec):
                return exit_code == 0
            c.last_state, c.restart_count = {"terminated": c.state["terminated"]}, c.restart_count + 1
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message":
                                   f"back-off {int(backoff)}s restarting failed container={c.name} pod={name}_{ns}({uid})"}}
            self._publish(ns, name, uid, rec)
            await self._sleep(uid, backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)

    async def _run_once(self, ns: str, name: str, uid: str, rec: PodRecord, pod: dict, c_spec: dict,
                        c: ContainerRecord, mounts: dict) -> int | None:
        """One process run; the exit code, or None while the container cannot be configured."""
        sc = {**((pod["spec"].get("securityContext")) or {}), **(c_spec.get("securityContext") or {})}
        run_as = sc.get("runAsUser")
        try:
            if run_as is None or int(run_as) == 0:
                raise ConfigError("container has runAsNonRoot and image will run as root "
                                  "(the lab runs containers only as a member user)")
            home, gid = home_of(int(run_as))
            env = container_env(self.store, pod, c_spec, home, self.api_port)
            argv = container_argv(c_spec, env)
        except ConfigError as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            self._publish(ns, name, uid, rec)
            self.unconfigured.add(uid)
            return None
        self.unconfigured.discard(uid)
        groups = [int(g) for g in sc.get("supplementalGroups") or []]
        fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        if fs_group is not None:
            groups.append(int(fs_group))
        spec = {"argv": argv, "env": env, "cwd": c_spec.get("workingDir") or "/", "uid": int(run_as),
                "gid": int(sc.get("runAsGroup", gid)), "groups": groups, "tmp": str(mounts["tmp"]),
                "mounts": [m for m in mounts["by_container"].get(c.name, [])]}
        path = log_file(self.pod_dir(uid), c.name, c.restart_count)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as out:  # noqa: ASYNC230 - a local append-only file
            started_at = rfc3339()
            started = await start_process(spec, out, self.registry)
            proc = started.process
            self.processes[(uid, c.name)] = proc
            c.container_id = f"metallo-lab://{uid}/{c.name}/{c.restart_count}"
            if started.start_error is None:
                c.state = {"running": {"startedAt": started_at}}
                self._publish(ns, name, uid, rec)
            try:
                code = await self._wait_or_stop(ns, name, uid, rec, proc)
                await asyncio.gather(*started.copiers)
            finally:
                self.processes.pop((uid, c.name), None)
                forget(self.registry, proc.pid)
        terminated: dict = {"startedAt": started_at, "finishedAt": rfc3339(), "containerID": c.container_id}
        if started.start_error is not None:
            terminated.update(exitCode=128, reason="StartError", message=start_message(started.start_error, argv))
            code = 128
        elif code < 0:
            terminated.update(exitCode=128 - code, signal=-code, reason="Error")
            code = 128 - code
        else:
            terminated.update(exitCode=code, reason="Completed" if code == 0 else "Error")
        c.state = {"terminated": terminated}
        self._publish(ns, name, uid, rec)
        return code

