"""What a Job and its Pods say about an Attempt stage (Kubernetes API reference: JobStatus,
PodStatus, ContainerState; seed 001, native-wait codes; seed 004 §5B).

:func:`pod_facts` and :func:`job_facts` turn the JSON the API returns into a
:class:`StageState`: ``pending`` | ``running`` | ``succeeded`` | ``failed``, the exact
exit code and signal of the container that decided it, a failure code, and — while a
Pod waits — a native-wait code of the catalogue (``native_waits.kubernetes_wait``;
never provider text). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from site_runtime.domain.native_waits import kubernetes_wait

#: Job condition reasons that map to a failure code of docs/site-commands.md.
_JOB_FAILURES = {"DeadlineExceeded": "wall-time-exceeded"}


@dataclass(frozen=True)
class StageState:
    """One stage's native state. ``native_state`` is the Kubernetes word for it (Pod
    phase or Job condition); ``container`` names the container whose end decided."""

    state: str  # pending | running | succeeded | failed
    native_state: str
    exit_code: int | None = None
    signal: int | None = None
    code: str | None = None
    wait_code: str | None = None
    container: str | None = None

    @property
    def ended(self) -> bool:
        """True for ``succeeded`` and ``failed``."""
        return self.state in ("succeeded", "failed")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def wait_code(pod: dict[str, Any]) -> str | None:
    """The native-wait code of a Pod that cannot run yet, or None: unschedulable first
    (``PodScheduled`` False with reason ``Unschedulable``), then the first waiting
    (init) container whose reason is catalogued."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return kubernetes_wait("Unschedulable")
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            code = kubernetes_wait(str(waiting.get("reason") or ""))
            if code is not None:
                return code
    return None


def terminated(pod: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(container name, ``state.terminated``) of the container that decided the Pod's
    end: the first init container that failed, else the last main container that ended
    non-zero, else the first main container that ended."""
    status = pod.get("status") or {}
    for container in status.get("initContainerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated")
        if ended and ended.get("exitCode") not in (0, None):
            return container.get("name", ""), ended
    ends = [
        (c.get("name", ""), (c.get("state") or {}).get("terminated"))
        for c in status.get("containerStatuses") or []
    ]
    ends = [(name, t) for name, t in ends if t]
    failed = [(name, t) for name, t in ends if t.get("exitCode") not in (0, None)]
    if failed:
        return failed[-1]
    return ends[0] if ends else None


def _exit(ended: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """(exit code, signal) exactly as the container state says: ``signal`` only from
    the API's ``signal`` field (an exit code above 128 stays an exit code)."""
    if not ended:
        return None, None
    code = ended.get("exitCode")
    sig = ended.get("signal")
    return (code if isinstance(code, int) else None), (
        sig if isinstance(sig, int) and sig else None
    )


def pod_facts(pod: dict[str, Any]) -> StageState:
    """A helper Pod's stage state from its phase and container states."""
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    found = terminated(pod)
    name, ended = found if found else (None, None)
    exit_code, sig = _exit(ended)
    if phase == "Succeeded":
        return StageState(
            "succeeded", phase, exit_code if exit_code is not None else 0, sig, container=name
        )
    if phase == "Failed":
        code = "wall-time-exceeded" if status.get("reason") == "DeadlineExceeded" else None
        return StageState("failed", phase, exit_code, sig, code=code, container=name)
    if phase == "Running":
        return StageState("running", phase, wait_code=wait_code(pod))
    return StageState("pending", phase, wait_code=wait_code(pod))


def job_facts(job: dict[str, Any], pods: list[dict[str, Any]]) -> StageState:
    """The compute Job's stage state from its conditions (``Complete``/``SuccessCriteriaMet``
    → succeeded; ``Failed``/``FailureTarget`` → failed, ``DeadlineExceeded`` →
    ``wall-time-exceeded``) and its Pods (exit code and signal; a wait code while
    pending). ``pods`` are the Job's Pods, newest last."""
    pod = pods[-1] if pods else None
    found = terminated(pod) if pod else None
    name, ended = found if found else (None, None)
    exit_code, sig = _exit(ended)
    done = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    if done is not None:
        return StageState(
            "succeeded",
            str(done.get("type")),
            exit_code if exit_code is not None else 0,
            sig,
            container=name,
        )
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if failed is not None:
        code = _JOB_FAILURES.get(str(failed.get("reason") or ""))
        return StageState(
            "failed", str(failed.get("type")), exit_code, sig, code=code, container=name
        )
    status = job.get("status") or {}
    if pod is not None:
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        if phase == "Failed":  # the Job controller has not written its condition yet
            return StageState("running", "Active", wait_code=None)
        if phase == "Running":
            return StageState("running", "Running", wait_code=wait_code(pod))
        return StageState("pending", "Pending", wait_code=wait_code(pod))
    if status.get("active"):
        return StageState("running", "Active")
    return StageState("pending", "Pending")
