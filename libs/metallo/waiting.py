"""Member-facing texts of the codes that say why a Run waits (docs/runs.md, Waiting
codes): the Site's deferral codes (``Run.waiting_reason``, seed 001), Execution
Core's own waiting codes, and native-wait codes (``Run.native_wait``).

Codes are stable; texts are fixed and never carry scheduler or Site text. The
catalogues they mirror live with their owners (``contracts/deferrals.json``,
``services/site_runtime/domain/native_waits.py``); ``tests/unit/test_waiting_texts.py``
fails when a catalogued code has no text here.
"""

from __future__ import annotations

from types import MappingProxyType

#: Deferral codes of a Site Runtime (the command stays pending and is retried).
DEFERRAL_TEXTS = MappingProxyType(
    {
        "slurm-submission-limited": "Slurm accepts no more jobs right now, retrying",
        "slurm-unavailable": "slurmrestd unreachable, retrying",
        "slurm-observation-unavailable": "Slurm cannot be asked about the jobs right now, retrying",
        "kubernetes-unavailable": "Kubernetes API unreachable, retrying",
        "site-edge-unreachable": "the Runtime cannot reach the Site edge, retrying",
        "repository-unavailable": "repository access cannot be granted right now, retrying",
        "identity-provider-unavailable": "a member token cannot be issued right now, retrying",
        "authority-unavailable": "Project authority cannot be confirmed right now, retrying",
        "workspace-unavailable": "the Attempt's workspace is not ready yet, retrying",
        "runtime-busy": "the Runtime is at its concurrency limit, waiting for a slot",
    }
)

#: Execution Core's own waiting codes: the Site does not know the Attempt; a collection
#: child waits for its array group (docs/runs.md, Array groups).
CORE_WAIT_TEXTS = MappingProxyType(
    {
        "attempt-unknown-at-site": "does not know this Attempt, asking again "
        "(it ends lost after the reconciliation period)",
        "array-group-forming": "prepared; its collection's other children are not all prepared "
        "yet (one Slurm array starts them together)",
        "array-max-active": "started on its own after its array fell back; waiting for one of "
        "the collection's maxActive slots",
    }
)

#: Planning's waits (a Run still ``accepted``; Execution Core's planning_wait_code).
PLANNING_WAIT_TEXTS = MappingProxyType(
    {
        "site-not-ready": "no eligible Site is ready, retrying",
        "site-draining": "every eligible Site is draining, waiting for an operator to resume one",
        "concurrent-run-limit": "the concurrent-Run limit is reached, waiting for a slot",
        "workload-portfolio-unavailable": "Workload Portfolio does not answer, retrying",
        "governance-unavailable": "the Project authority does not answer, retrying",
    }
)

#: Native-wait codes: the texts of the Site Runtime's catalogue (``native_waits.py``).
NATIVE_WAIT_TEXTS = MappingProxyType(
    {
        "slurm-resources": "waiting for resources",
        "slurm-priority": "waiting: other jobs have priority",
        "slurm-dependency": "waiting for the stage before it",
        "slurm-dependency-never-satisfied": "cannot start: the stage before it did not succeed",
        "slurm-begin-time": "waiting for its start time",
        "slurm-held-user": "held by its owner",
        "slurm-held-admin": "held by a Site administrator",
        "slurm-nodes-unavailable": "waiting: the nodes it needs are not available",
        "slurm-partition-unavailable": "waiting: the partition is down or inactive",
        "slurm-partition-limit": "waiting: the request exceeds a limit of the partition",
        "slurm-qos-limit": "waiting: a quality-of-service limit is reached",
        "slurm-association-limit": "waiting: a limit of the Project's account is reached",
        "slurm-reservation": "waiting for a reservation",
        "slurm-licenses": "waiting for licences",
        "slurm-other": "waiting in the Site's scheduler",
        "slurm-job-requeued": "requeued by the Site's scheduler: compute starts again",
        "kubernetes-unschedulable": "waiting: no node can take it yet",
        "kubernetes-image-pull": "waiting: the container image cannot be pulled",
        "kubernetes-container-config": "waiting: the container's configuration is incomplete",
        "kubernetes-crash-loop": "restarting: the container keeps exiting",
    }
)


def site_wait_text(code: str) -> str:
    """``Site: <text>`` for a waiting reason (a deferral or Execution Core's own code),
    ``planning: <text>`` for a planning wait; an uncatalogued code is named, never
    explained with guessed words; "" for none."""
    if not code:
        return ""
    if code in PLANNING_WAIT_TEXTS:
        return f"planning: {PLANNING_WAIT_TEXTS[code]}"
    known = DEFERRAL_TEXTS.get(code) or CORE_WAIT_TEXTS.get(code)
    return f"Site: {known}" if known else f"Site: waiting ({code})"


def native_wait_text(code: str, native_state: str = "") -> str:
    """``<state>: <text>`` for a native-wait code, e.g. ``pending: waiting for
    resources`` (the native state in lower case; ``pending`` when none); "" for none."""
    if not code:
        return ""
    state = (native_state or "pending").lower()
    return f"{state}: {NATIVE_WAIT_TEXTS.get(code) or f'waiting ({code})'}"


def waiting_text(waiting_reason: str, native_wait: str, native_state: str = "") -> str:
    """The one line that says why a Run waits now: the Site's reason first (the Site
    itself is held), then the native wait; "" when it does not wait."""
    return " · ".join(
        t for t in (site_wait_text(waiting_reason), native_wait_text(native_wait, native_state)) if t
    )
