"""Reading the Site edge's answers (docs/site-commands.md): commands, grants, errors.

Every malformed answer raises :class:`EdgeUnavailable` (the command stays pending
and is asked again), never an error that quotes the body.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from site_runtime.application.delivery import EdgeUnavailable
from site_runtime.application.ports import SiteCommand
from site_runtime.application.site_access import RepositoryGrant

#: Owners the edge names in a 503 that are deferral codes of their own.
OWNER_CODES = ("authority-unavailable", "identity-provider-unavailable", "repository-unavailable")


def repository_grant(body: dict[str, Any], unavailable_code: str) -> RepositoryGrant:
    """A grant as the edge answers it; EdgeUnavailable(``unavailable_code``) when incomplete."""
    try:
        return RepositoryGrant.from_answer(body)
    except KeyError:
        raise EdgeUnavailable(
            "the repository grant answer is incomplete", unavailable_code
        ) from None


def command(body: dict[str, Any]) -> SiteCommand:
    """A command as the edge sends it (docs/site-commands.md); EdgeUnavailable otherwise."""
    try:
        return SiteCommand(
            sequence=int(body["sequence"]),
            command_id=str(body["command_id"]),
            kind=str(body["kind"]),
            site_id=str(body["site_id"]),
            environment=str(body["environment"]),
            run_id=str(body["run_id"]),
            attempt_id=str(body["attempt_id"]),
            attempt_number=int(body["attempt_number"]),
            payload=dict(body.get("payload") or {}),
        )
    except (KeyError, TypeError, ValueError):
        raise EdgeUnavailable("the edge sent a command of an unknown shape") from None


def segment(value: str) -> str:
    """``value`` for one edge path segment; ValueError unless 1..128 characters without '/'."""
    if not value or "/" in value or len(value) > 128:
        raise ValueError("identifiers in edge paths are 1..128 characters without '/'")
    return value


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object; EdgeUnavailable for anything else."""
    try:
        body = response.json()
    except ValueError:
        raise EdgeUnavailable("the edge answer is not JSON") from None
    if not isinstance(body, dict):
        raise EdgeUnavailable("the edge answer is not a JSON object")
    return body


def error(response: httpx.Response) -> dict[str, Any]:
    """The ``error`` object of an error answer (``{}`` when it has none)."""
    try:
        body = response.json()
        found = body.get("error") if isinstance(body, dict) else None
        return found if isinstance(found, dict) else {}
    except ValueError:
        return {}


def error_code(response: httpx.Response) -> str | None:
    """The edge's stable error code of an answer, None without one."""
    code = error(response).get("code")
    return code if isinstance(code, str) else None


def unavailable(code: str, default: str) -> str:
    """The deferral code of a 5xx answer: the owner the edge names, else ``default``."""
    # The edge names the owner that cannot answer (503 authority-unavailable,
    # identity-provider-unavailable); keep that when it is a deferral code.
    return code if code in OWNER_CODES else default


def expiry(value: Any, now: float) -> float:
    """A token's ``expires_at`` (epoch seconds or ISO 8601) in epoch seconds; five
    minutes from ``now`` when absent or unreadable."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    return now + 300.0
