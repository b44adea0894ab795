"""Which deferral each native or transport trouble is (docs/site-runtime.md, Deferral
codes).

An executor names the trouble it met (its adaptor maps exceptions to these names)
and defers with the code this table gives, so the same trouble always reads the
same to the member, whichever command met it. Every code is catalogued in
:mod:`~site_runtime.domain.deferrals`.
"""

from __future__ import annotations

from types import MappingProxyType

#: trouble -> (deferral code, message for the Runtime's log).
DEFERRAL_FOR = MappingProxyType(
    {
        "slurm-unreachable": ("slurm-unavailable", "slurmrestd refused the connection"),
        "slurm-uncertain": ("slurm-observation-unavailable", "Slurm could not be asked now"),
        "member-token-unusable": (
            "identity-provider-unavailable",
            "the member token cannot be used",
        ),
        "issuer-keys-unavailable": (
            "identity-provider-unavailable",
            "the issuer's keys are unavailable",
        ),
    }
)


def deferral_for(trouble: str) -> tuple[str, str]:
    """``(code, message)`` of ``trouble`` (a key of :data:`DEFERRAL_FOR`); KeyError else."""
    return DEFERRAL_FOR[trouble]


#: Troubles of the whole Site: every command would wait for them, so they may hold
#: the Site's ordered stream. Any other deferral is a condition of one Attempt.
SITE_WIDE_TROUBLES = frozenset({"slurm-unreachable", "issuer-keys-unavailable"})


def attempt_pending_expired(since: float | None, now: float, limit: float) -> bool:
    """True when a condition of one Attempt has kept its command pending for ``limit``
    seconds or more since ``since`` (epoch seconds; None: not pending)."""
    return since is not None and now - since >= limit


def pending_confidence(code: str) -> str:
    """The confidence of an observation answered after a bounded deferral: ``uncertain``
    when Slurm could not be asked, else ``stale`` (the last known state)."""
    return "uncertain" if code == "slurm-observation-unavailable" else "stale"
