"""Admission and placement of an accepted launch (seed 004 §3C, Pinned Run inputs).

Pure rules: given the exact Workload revision, the Project's provisioned Sites
and limits, the member's account bindings and the current counts of active
Runs, :func:`plan` returns a :class:`Plan` (the Run's immutable execution
specification and target), a :class:`Rejection` (a definite refusal with a
stable reason code) or a :class:`Wait` (a temporary condition; planning is
retried at a durable time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from execution_core.domain import reasons
from execution_core.domain.canonical import canonical_json, material_digest, sha256_hex
from execution_core.domain.states import FAMILIES, QUEUED_BATCH

COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_ATTEMPTS_LIMIT = 10
MAX_BACKOFF_SECONDS = 86_400.0
DEFAULT_WALL_SECONDS = 3600  # contracts/actions.schema.json, resources.wallTimeSeconds


class SpecError(ValueError):
    """The Workload's saved specification cannot be read (reason ``workload-spec-invalid``)."""


@dataclass(frozen=True)
class RevisionFacts:
    """The exact Workload revision as Workload Portfolio returns it (seed 004 §2D)."""

    workload_id: str
    project: str
    revision: int
    repository_url: str
    action: str
    action_type: str
    family: str
    environment: str
    service_kind: str
    commit: str
    branch: str
    spec: dict[str, Any]
    spec_digest: str
    active: bool = True


@dataclass(frozen=True)
class SiteFacts:
    """A provisioned Site of the Project (seed 004 §3A): readiness and applied limits.

    ``max_wall_seconds`` and ``concurrent_run_limit`` are None when unlimited;
    ``gpu_classes`` maps a GPU class name to the Site's native resource (GRES).
    """

    site_id: str
    environment: str
    ready: bool
    max_wall_seconds: int | None = None
    gpu_classes: dict[str, str] = field(default_factory=dict)
    concurrent_run_limit: int | None = None


@dataclass(frozen=True)
class Binding:
    """A member's account binding at one Site (seed 004 §1B)."""

    site_username: str
    account: str


@dataclass(frozen=True)
class PlanningInput:
    """Everything planning decides from; gathered by the launch worker before deciding."""

    project: str
    member_id: str
    revision: RevisionFacts
    sites: tuple[SiteFacts, ...]
    bindings: dict[str, Binding]  # site_id -> binding of member_id
    project_run_limit: int | None
    active_in_project: int
    active_per_site: dict[str, int]
    repository_commit: str = ""  # hand-off override (LaunchRun.repository_commit)
    draining: frozenset[str] = frozenset()  # Site ids an operator is draining
    parameters: dict[str, str] = field(default_factory=dict)  # a collection child's values
    site_id: str = ""  # the Site its array group was placed on: only it may be chosen


@dataclass(frozen=True)
class RetryPolicy:
    """The Workload's retry policy: ``spec.retry = {maxAttempts, backoffSeconds, onLost}``.

    ``max_attempts`` counts every Attempt (1 = no retry), at most 10;
    ``backoff_seconds`` is the wait before the next Attempt, at most one day;
    ``on_lost``: a lost Attempt (the Site no longer knew it) may be retried too — off
    by default, since its native work may still run (seed 002 §9.3).
    """

    max_attempts: int = 1
    backoff_seconds: float = 0.0
    on_lost: bool = False


@dataclass(frozen=True)
class Plan:
    """The Run's immutable execution specification and target (seed 004 §3C)."""

    site_id: str
    environment: str
    family: str
    service_kind: str
    action: str
    action_type: str
    spec: dict[str, Any]
    spec_digest: str
    repository: dict[str, str]  # url, commit, branch — pinned
    member: dict[str, str]  # id, site_username, account
    material_digest: str
    retry: RetryPolicy
    wall_seconds: int | None
    repositories: tuple[dict[str, str], ...] = ()  # every pinned repository, action first


@dataclass(frozen=True)
class Rejection:
    """A definite planning refusal; the Run ends failed with ``code``."""

    code: str
    message: str


@dataclass(frozen=True)
class Wait:
    """A temporary condition; planning is tried again later (durable retry time).

    ``limit`` is the concurrent-Run limit that holds the Run (the Project's, or the
    largest of the eligible Sites'), None for every other wait.
    """

    code: str
    message: str
    limit: int | None = None


def retry_policy(spec: dict[str, Any]) -> RetryPolicy:
    """Read ``spec["retry"]`` (docs/actions.md); raise SpecError when it is malformed."""
    raw = spec.get("retry") or {}
    if not isinstance(raw, dict):
        raise SpecError("retry must be a mapping")
    max_attempts = raw.get("maxAttempts", 1)
    backoff = raw.get("backoffSeconds", 0)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise SpecError("retry.maxAttempts must be an integer")
    if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise SpecError(f"retry.maxAttempts must be 1..{MAX_ATTEMPTS_LIMIT}")
    if isinstance(backoff, bool) or not isinstance(backoff, (int, float)):
        raise SpecError("retry.backoffSeconds must be a number")
    if not 0 <= backoff <= MAX_BACKOFF_SECONDS:
        raise SpecError("retry.backoffSeconds must be 0..86400")
    on_lost = raw.get("onLost", False)
    if not isinstance(on_lost, bool):
        raise SpecError("retry.onLost must be true or false")
    return RetryPolicy(max_attempts=max_attempts, backoff_seconds=float(backoff), on_lost=on_lost)


_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


def _seconds(value: Any) -> int | None:
    """Seconds from an integer or a Slurm-style ``[D-]HH:MM:SS`` / ``MM:SS`` string."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SpecError("a duration must be a number of seconds or [D-]HH:MM:SS")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        m = _DURATION.match(value)
        if m:
            days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
            return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    raise SpecError(f"unreadable duration {value!r}")


def wall_seconds(spec: dict[str, Any]) -> int | None:
    """The action's requested wall time in seconds, or None when it names none.

    Reads ``resources.wallTimeSeconds`` (contracts/actions.schema.json), or the
    older spellings ``resources.wallSeconds`` / ``resources.timeLimit``.
    """
    resources = spec.get("resources") or {}
    if not isinstance(resources, dict):
        raise SpecError("resources must be a mapping")
    for raw in (
        resources.get("wallTimeSeconds"),
        resources.get("wallSeconds"),
        resources.get("timeLimit"),
    ):
        if raw is not None:
            return _seconds(raw)
    return None


def gpu_class(spec: dict[str, Any]) -> str | None:
    """The GPU class the action asks for (``resources.gpuClass``), or None."""
    resources = spec.get("resources") or {}
    if not isinstance(resources, dict):
        return None
    if resources.get("gpuClass"):
        return str(resources["gpuClass"])
    return None


def pinned_inputs(spec: dict[str, Any]) -> list[dict[str, str]]:
    """Input repositories of the spec that name an exact commit, as pinned repositories."""
    out: list[dict[str, str]] = []
    for item in spec.get("inputs") or []:
        if isinstance(item, dict) and COMMIT.match(str(item.get("commit", ""))):
            out.append(
                {
                    "role": f"input:{item.get('name', '')}",
                    "url": str(item.get("url", "")),
                    "commit": str(item["commit"]),
                    "branch": str(item.get("branch", "")),
                }
            )
    return out


def plan(inp: PlanningInput) -> Plan | Rejection | Wait:
    """Decide the Run's target and immutable specification (seed 004 §3C).

    Rules, in order: the revision belongs to the Project and is active; its
    family is known; the retry policy and resources are readable; among the
    Project's Sites of the action's environment, a Site must bind the member,
    allow the wall time and offer the GPU class (else a definite Rejection with
    the first failing reason); one of those must be ready (else Wait
    ``site-not-ready``); one of the ready ones must not be draining (else Wait
    ``site-draining``); the Project's and the Site's concurrent-Run limits must
    leave room (else Wait ``concurrent-run-limit``). Among the remaining Sites the
    one with the fewest active Runs is chosen (ties by Site id). A child of an array
    group already placed (``site_id``) is planned on that Site only.
    """
    rev = inp.revision
    if rev.project != inp.project:
        return Rejection(
            reasons.WORKLOAD_PROJECT_MISMATCH, "the Workload revision belongs to another Project"
        )
    if not rev.active:
        return Rejection(reasons.WORKLOAD_NOT_ACTIVE, "the Workload is not active")
    if rev.family not in FAMILIES:
        return Rejection(reasons.WORKLOAD_SPEC_INVALID, f"unknown workload family {rev.family!r}")
    commit = inp.repository_commit or rev.commit
    if not COMMIT.match(commit):
        return Rejection(
            reasons.WORKLOAD_SPEC_INVALID, "the pinned commit is not 40 hex characters"
        )
    try:
        policy = retry_policy(rev.spec)
        wall = wall_seconds(rev.spec)
        if wall is None and rev.family == QUEUED_BATCH:
            wall = DEFAULT_WALL_SECONDS
        gpu = gpu_class(rev.spec)
    except SpecError as exc:
        return Rejection(reasons.WORKLOAD_SPEC_INVALID, str(exc))
    if rev.family != QUEUED_BATCH:
        policy = RetryPolicy(1, 0.0)  # services are reconciled by the Site, never re-attempted here

    in_env = sorted(
        (s for s in inp.sites if s.environment == rev.environment
         and (not inp.site_id or s.site_id == inp.site_id)),
        key=lambda s: s.site_id,
    )
    if not in_env:
        return Rejection(
            reasons.NO_SITE_FOR_ENVIRONMENT,
            f"the Project has no Site of environment {rev.environment!r}",
        )
    eligible: list[SiteFacts] = []
    first_refusal: Rejection | None = None
    for site in in_env:
        refusal = _site_refusal(site, inp.bindings.get(site.site_id), wall, gpu)
        if refusal is None:
            eligible.append(site)
        elif first_refusal is None:
            first_refusal = refusal
    if not eligible:
        assert first_refusal is not None
        return first_refusal
    ready = [s for s in eligible if s.ready]
    if not ready:
        return Wait(reasons.WAIT_SITE_NOT_READY, "no eligible Site is ready")
    undrained = [s for s in ready if s.site_id not in inp.draining]
    if not undrained:
        return Wait(reasons.WAIT_SITE_DRAINING,
                    "every eligible Site is draining: " + ", ".join(s.site_id for s in ready))
    ready = undrained
    if inp.project_run_limit is not None and inp.active_in_project >= inp.project_run_limit:
        return Wait(
            reasons.WAIT_CONCURRENT_RUN_LIMIT, "the Project's concurrent-Run limit is reached",
            limit=inp.project_run_limit,
        )
    roomy = [
        s
        for s in ready
        if s.concurrent_run_limit is None
        or inp.active_per_site.get(s.site_id, 0) < s.concurrent_run_limit
    ]
    if not roomy:
        return Wait(
            reasons.WAIT_CONCURRENT_RUN_LIMIT, "every eligible Site is at its concurrent-Run limit",
            limit=max(s.concurrent_run_limit or 0 for s in ready),
        )
    site = min(roomy, key=lambda s: (inp.active_per_site.get(s.site_id, 0), s.site_id))
    binding = inp.bindings[site.site_id]
    repository = {"url": rev.repository_url, "commit": commit, "branch": rev.branch}
    pinned = [{"role": "action", **repository}] + pinned_inputs(rev.spec)
    member = {
        "id": inp.member_id,
        "site_username": binding.site_username,
        "account": binding.account,
    }
    spec, digest = effective_spec(rev.spec, rev.spec_digest, inp.parameters)
    return Plan(
        site_id=site.site_id,
        environment=rev.environment,
        family=rev.family,
        service_kind=rev.service_kind,
        action=rev.action,
        action_type=rev.action_type,
        spec=spec,
        spec_digest=digest,
        repository=repository,
        member=member,
        material_digest=material_digest(spec, repository, member),
        retry=policy,
        wall_seconds=wall,
        repositories=tuple(pinned),
    )


def effective_spec(spec: dict[str, Any], digest: str, values: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The Run's specification and its digest: the revision's, plus a collection child's ``parameters``.

    Without values it is the revision's own (same digest). With them the spec
    gains ``parameters`` (name → value), which the Site turns into
    ``METALLO_PARAM_<NAME>`` environment variables only, and its own
    ``sha256:`` digest (each child has an immutable effective digest, seed 002 §15.2).
    """
    if not values:
        return spec, digest
    effective = {**spec, "parameters": dict(values)}
    return effective, "sha256:" + sha256_hex(canonical_json(effective))


def _site_refusal(
    site: SiteFacts, binding: Binding | None, wall: int | None, gpu: str | None
) -> Rejection | None:
    if binding is None:
        return Rejection(
            reasons.MEMBER_BINDING_MISSING,
            f"the member has no account binding at Site {site.site_id}",
        )
    if wall is not None and site.max_wall_seconds is not None and wall > site.max_wall_seconds:
        return Rejection(
            reasons.WALL_TIME_ABOVE_LIMIT,
            f"wall time {wall} s is above Site {site.site_id}'s limit of {site.max_wall_seconds} s",
        )
    if gpu is not None and gpu not in site.gpu_classes:
        return Rejection(
            reasons.GPU_CLASS_UNAVAILABLE, f"Site {site.site_id} offers no GPU class {gpu!r}"
        )
    return None
