"""Words of the Run lifecycle (seed 004 §4D, §7C; seed 002 §9.2 state dimensions).

Each dimension is kept in its own field and never folded into another:

- desired state — what the member (or a deadline) asks for: ``run`` or ``cancel``;
- phase — where Execution Core's orchestration stands;
- native observation — the Site's latest observed phase and native state (evidence);
- observation confidence — how far that observation can be trusted now;
- exit facts — the process result, immutable once known (seed 002 §3.1, invariant 6);
- effective outcome — ``succeeded`` | ``failed`` | ``cancelled`` | ``lost`` |
  ``timed-out``, set once at the end.
"""

from __future__ import annotations

# Desired state.
DESIRED_RUN = "run"
DESIRED_CANCEL = "cancel"

# Run phases, in the order a Run normally moves through them. "retry-wait" sits
# between two Attempts; "terminal" is absorbing.
PHASE_ACCEPTED = "accepted"  # recorded, waiting for planning (seed 004 §3B–3D)
PHASE_PREPARING = "preparing"  # prepare/apply sent, waiting for its result
PHASE_STARTING = "starting"  # start sent, native start not yet confirmed
PHASE_QUEUED = "queued"  # the Site reports the native work queued
PHASE_RUNNING = "running"  # the Site reports it running (a service: ready)
PHASE_RETRY_WAIT = "retry-wait"  # an Attempt failed definitely; the next one waits
PHASE_CANCELLING = "cancelling"  # cancel/terminate sent; waiting for the native end
PHASE_TERMINAL = "terminal"

RUN_PHASES = (
    PHASE_ACCEPTED,
    PHASE_PREPARING,
    PHASE_STARTING,
    PHASE_QUEUED,
    PHASE_RUNNING,
    PHASE_RETRY_WAIT,
    PHASE_CANCELLING,
    PHASE_TERMINAL,
)

# Attempt states.
ATTEMPT_PENDING = "pending"
ATTEMPT_PREPARING = "preparing"
ATTEMPT_PREPARED = "prepared"
ATTEMPT_STARTING = "starting"
ATTEMPT_ACTIVE = "active"
ATTEMPT_CANCELLING = "cancelling"
ATTEMPT_SUCCEEDED = "succeeded"
ATTEMPT_FAILED = "failed"
ATTEMPT_CANCELLED = "cancelled"
ATTEMPT_REFUSED = "refused"
ATTEMPT_LOST = "lost"  # the Site no longer knew it for the reconciliation period (seed 002 §9.3)
ATTEMPT_TERMINAL = frozenset(
    {ATTEMPT_SUCCEEDED, ATTEMPT_FAILED, ATTEMPT_CANCELLED, ATTEMPT_REFUSED, ATTEMPT_LOST}
)

# Observation confidence (seed 002 §9.2).
CONFIDENCE_NONE = "none"  # nothing observed yet
CONFIDENCE_CURRENT = "current"
CONFIDENCE_STALE = "stale"  # the last observation is older than the stale window
CONFIDENCE_UNCERTAIN = "uncertain"  # the Site could not tell, or a start has no result yet

# Effective outcomes.
OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_FAILED = "failed"
OUTCOME_CANCELLED = "cancelled"
OUTCOME_LOST = "lost"  # the native work's fate is unknowable: no fact says it ran or ended
OUTCOME_TIMED_OUT = "timed-out"  # the Site stopped it at its wall time
OUTCOMES = (OUTCOME_SUCCEEDED, OUTCOME_FAILED, OUTCOME_CANCELLED, OUTCOME_LOST, OUTCOME_TIMED_OUT)

# Workload families (seed 004, Workload families).
QUEUED_BATCH = "queued-batch"
RECONCILED_SERVICE = "reconciled-service"
FAMILIES = (QUEUED_BATCH, RECONCILED_SERVICE)

# Observation phases reported by the Site (docs/site-commands.md).
OBS_PREPARED = "prepared"
OBS_QUEUED = "queued"
OBS_RUNNING = "running"
OBS_SUCCEEDED = "succeeded"
OBS_FAILED = "failed"
OBS_CANCELLED = "cancelled"
OBS_UNKNOWN = "unknown"
OBS_TERMINAL = frozenset({OBS_SUCCEEDED, OBS_FAILED, OBS_CANCELLED})
# Rank used so a late, older observation never moves an Attempt backwards.
OBS_RANK = {
    OBS_UNKNOWN: 0,
    OBS_PREPARED: 1,
    OBS_QUEUED: 2,
    OBS_RUNNING: 3,
    OBS_SUCCEEDED: 4,
    OBS_FAILED: 4,
    OBS_CANCELLED: 4,
}
