"""Definite versus uncertain answers of the Kubernetes API (seed 004 §5B; docs/site-runtime.md,
Kubernetes).

A definite refusal means the API decided and changed nothing: the command gets a
``refused`` result with a code and is not tried again. An uncertain answer (no
answer, a 5xx, a timeout, a 409 ``Conflict`` on an update) means the effect may or
may not exist: the command is deferred (``kubernetes-unavailable``) and kept, and
its retry finds any object by its deterministic name. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFERRAL = "kubernetes-unavailable"


@dataclass(frozen=True)
class Verdict:
    """How to treat one API answer. ``kind``: ``definite`` (refuse with ``code``),
    ``exists`` (409 AlreadyExists on a create: look the object up, adopt or refuse),
    ``absent`` (404 NotFound), ``uncertain`` (defer, keep the command)."""

    kind: str
    code: str | None = None
    reason: str = ""


def classify(status: int | None, body: dict[str, Any] | None, operation: str) -> Verdict:
    """Classify the answer ``status`` (None: no answer at all — connection lost, TLS
    failure, timeout) with its ``Status`` ``body`` to ``operation`` (``create``,
    ``update``, ``delete``, ``get``, ``list``, ``log``).

    Rules: 403 Forbidden (RBAC, impersonation, ``exceeded quota``) →
    ``native-request-denied``; 422 Invalid and 400 BadRequest → ``native-request-invalid``;
    409 on create with reason ``AlreadyExists`` → ``exists``; any other 409 (``Conflict``
    on update) → uncertain; 404 → ``absent``; 401, 429, 5xx and no answer → uncertain.
    """
    reason = str((body or {}).get("reason") or "")
    if status is None:
        return Verdict("uncertain", DEFERRAL, "no answer")
    if status == 403:
        return Verdict("definite", "native-request-denied", reason or "Forbidden")
    if status in (400, 422):
        return Verdict("definite", "native-request-invalid", reason or "Invalid")
    if status == 409:
        if operation == "create" and reason in ("AlreadyExists", ""):
            return Verdict("exists", None, "AlreadyExists")
        return Verdict("uncertain", DEFERRAL, reason or "Conflict")
    if status == 404:
        return Verdict("absent", None, reason or "NotFound")
    return Verdict("uncertain", DEFERRAL, reason or f"HTTP {status}")


def quota_exceeded(body: dict[str, Any] | None) -> bool:
    """True when a 403 ``Status`` is a ResourceQuota refusal (``exceeded quota``)."""
    return "exceeded quota" in str((body or {}).get("message") or "")
