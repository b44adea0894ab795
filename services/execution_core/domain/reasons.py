"""Stable reason codes of Runs and Attempts (docs/runs.md lists them for members).

Codes are part of the contract: never renamed, never reused with another meaning.
Codes reported by a Site (e.g. ``slurm-error-2014``, ``authorisation-refused``)
are passed through unchanged as the Attempt's and Run's reason.
"""

from __future__ import annotations

# Acceptance (LaunchRun / CancelRun rejections).
PERMISSION_DENIED = "permission-denied"
INVALID_ARGUMENT = "invalid-argument"
NOT_FOUND = "not-found"
LAUNCH_KEY_CONFLICT = "launch-key-conflict"
ATTEMPT_NOT_AT_SITE = "attempt-not-at-site"  # ReadRunLog: the Attempt is not sent to its Site yet
NOT_RECONCILABLE = "not-reconcilable"  # ReconcileRun: the Site still vouches for the Attempt

# Planning rejections (seed 004 §3C): the Run ends failed with one of these.
WORKLOAD_REVISION_NOT_FOUND = "workload-revision-not-found"
WORKLOAD_PROJECT_MISMATCH = "workload-project-mismatch"
WORKLOAD_NOT_ACTIVE = "workload-not-active"
WORKLOAD_SPEC_INVALID = "workload-spec-invalid"
PROJECT_NOT_FOUND = "project-not-found"
NO_SITE_FOR_ENVIRONMENT = "no-site-for-environment"
MEMBER_BINDING_MISSING = "member-binding-missing"
WALL_TIME_ABOVE_LIMIT = "wall-time-above-limit"
GPU_CLASS_UNAVAILABLE = "gpu-class-unavailable"
PLANNING_TIMED_OUT = "planning-timed-out"
#: An ``array: require`` collection child whose group cannot start as one Slurm array
#: (also a lifecycle ending: the group's start-array was refused or never formed).
ARRAY_UNAVAILABLE = "array-unavailable"

# Temporary planning conditions: planning waits and retries at a durable time.
WAIT_SITE_NOT_READY = "site-not-ready"
WAIT_SITE_DRAINING = "site-draining"
WAIT_CONCURRENT_RUN_LIMIT = "concurrent-run-limit"
WAIT_WORKLOAD_PORTFOLIO_UNAVAILABLE = "workload-portfolio-unavailable"
WAIT_GOVERNANCE_UNAVAILABLE = "governance-unavailable"

# Lifecycle endings.
COMPLETED = "completed"  # the Run's work finished successfully
CANCELLED_BY_MEMBER = "cancelled-by-member"
CANCELLED_BEFORE_START = "cancelled-before-start"
DISPATCH_DEADLINE_PASSED = "dispatch-deadline-passed"
NATIVE_FAILURE = "native-failure"  # failed without a more precise code from the Site
LOST_AT_SITE = "lost-at-site"  # the Site did not know the Attempt for the reconciliation period
MARKED_LOST = "marked-lost"  # an operator ended it with `metallo run reconcile --mark-lost`

# Waiting codes Execution Core sets itself (Run.waiting_reason; the Site's deferral
# codes are the others).
WAIT_ATTEMPT_UNKNOWN_AT_SITE = "attempt-unknown-at-site"
WAIT_ARRAY_GROUP_FORMING = "array-group-forming"  # prepared; its siblings are not all yet
WAIT_ARRAY_MAX_ACTIVE = "array-max-active"  # started on its own: maxActive siblings run now

#: Refusal codes with which a Site says it does not know an Attempt (docs/site-commands.md):
#: for an Attempt whose start was sent, the lost-Attempt rule applies (docs/runs.md).
UNKNOWN_ATTEMPT_CODES = frozenset({"attempt-not-prepared"})

#: Observed failure codes of work the Site stopped at its wall time: outcome ``timed-out``.
TIMED_OUT_FAILURES = frozenset({"wall-time-exceeded", "timed-out"})

# Site refusals that no retry can cure: the same material fails the same way
# (seed 004, Pinned Run inputs: a Site that cannot prepare the pinned commits
# rejects the Attempt for good).
PERMANENT_SITE_REFUSALS = frozenset(
    {
        "authorisation-refused",
        "member-consent-refused",  # the member-token owner refused for good (seed 001)
        "repository-commit-missing",
        "repository-not-served",  # the Site's Git server does not serve the repository
        "unsupported-slurm-accelerator-class",
        "slurm-wall-time-above-limit",
        "slurm-request-never-fits",  # what the nodes are, not what is free: a retry fits no better
        DISPATCH_DEADLINE_PASSED,
        "start-fenced",
        "invalid-spec",
    }
)
#: Failure codes of an *observed* failure that no new Attempt can cure: authority
#: refused it (a local Attempt that waited for a slot is authorised only then, ADR 0015),
#: the member-token owner refused for good between stages, or the pinned commit is not
#: in the repository.
PERMANENT_FAILURES = frozenset(
    {
        "authorisation-refused",
        "member-consent-refused",
        "repository-commit-missing",
        "repository-not-served",
    }
)
