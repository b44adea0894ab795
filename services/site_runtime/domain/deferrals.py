"""The deferral catalogue of the Site Runtime (docs/site-runtime.md, Deferral codes: every deferral names a
stable code from this catalogue; the platform explains each code with fixed text).

A deferral is not a result: the command stays pending, the worker reports the
code once per command and code (``POST /v1/commands/{sequence}/progress``) and
tries again later. The Site edge accepts only codes of ``contracts/deferrals.json``;
``tests/unit/site_runtime/test_site_runtime_deferrals.py`` fails when this catalogue and that
file disagree, or when a ``Deferred("...")`` in ``services/site_runtime`` names a
code that is not catalogued here.
"""

from __future__ import annotations

from types import MappingProxyType

#: code -> what it means (for operators; members see the edge's fixed text).
DEFERRALS = MappingProxyType(
    {
        "slurm-submission-limited": "slurmctld turned a stage away for now before creating it (e.g. error 2050, "
        "MaxSubmitJobs reached); the stage goes back to prepared and is submitted again.",
        "slurm-unavailable": "slurmrestd refused the connection or could not be reached; nothing was "
        "submitted, the stage is submitted again when it answers.",
        "slurm-observation-unavailable": "Slurm could not be asked about the Attempt's jobs (or an uncertain submission "
        "is not visible yet); the Attempt is observed again shortly.",
        "kubernetes-unavailable": "The Site's Kubernetes API could not be reached; the action is retried.",
        "site-edge-unreachable": "The Runtime could not reach the Site edge for something the command needs "
        "(e.g. the credential file cannot be read); it keeps the command and retries.",
        "repository-unavailable": "A repository grant could not be issued or released right now; the stage waits.",
        "identity-provider-unavailable": "A member token could not be issued right now; the stage waits.",
        "authority-unavailable": "Current Project authority could not be confirmed right now (the edge's "
        "authorisation answered 503 or not at all); the action waits.",
        "workspace-unavailable": "The Attempt's private workspace could not be created, read or cleaned up yet; "
        "the action is retried.",
        "runtime-busy": "The Runtime is at its local concurrency limit (local executor: "
        "RUNTIME_LOCAL_MAX_ACTIVE Attempts); the start waits for a free slot. Current "
        "Runtimes never send it: a busy local Runtime accepts the start and the Attempt "
        "waits in its journal, so the Site's stream is not held.",
    }
)


def is_catalogued(code: str) -> bool:
    """True when ``code`` is a catalogued deferral code."""
    return code in DEFERRALS
