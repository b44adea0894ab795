"""Native and transport troubles of the slurm executor as deferrals
(:mod:`site_runtime.domain.native_errors` holds the table)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from metallo.identity.verify import JwksUnavailable, MemberTokenRejected
from site_runtime.adaptors.slurm.rest import SlurmUncertain, SlurmUnreachable
from site_runtime.application.ports import Deferred
from site_runtime.domain.native_errors import SITE_WIDE_TROUBLES, deferral_for

log = logging.getLogger("metallo.site_runtime.slurm")


class SiteWideDeferred(Deferred):
    """A deferral of a Site-wide condition (``SITE_WIDE_TROUBLES``): it may hold the
    Site's stream; every other deferral is bounded per Attempt."""


def deferred(trouble: str) -> Deferred:
    """The :class:`Deferred` of ``trouble`` (a key of ``DEFERRAL_FOR``); a
    :class:`SiteWideDeferred` for a Site-wide one."""
    code, message = deferral_for(trouble)
    kind = SiteWideDeferred if trouble in SITE_WIDE_TROUBLES else Deferred
    return kind(code, message)


@contextmanager
def deferring(attempt_id: str, *, token_rejection: bool = True) -> Iterator[None]:
    """Turn slurmrestd and identity troubles inside the block into deferrals.

    With ``token_rejection=False`` a :class:`MemberTokenRejected` passes through
    (``start`` refuses it as ``member-token-rejected``). Everything else — a
    definite ``SlurmRefused``, a ``Deferred`` — passes through unchanged.
    """
    try:
        yield
    except MemberTokenRejected as rejected:
        if not token_rejection:
            raise
        log.warning("attempt %s: member token unusable (%s)", attempt_id, rejected.reason)
        raise deferred("member-token-unusable") from None
    except JwksUnavailable:
        raise deferred("issuer-keys-unavailable") from None
    except SlurmUnreachable:
        raise deferred("slurm-unreachable") from None
    except SlurmUncertain:
        raise deferred("slurm-uncertain") from None
