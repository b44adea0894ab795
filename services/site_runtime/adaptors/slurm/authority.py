"""Asking current execution authority before a new native effect (docs/site-runtime.md,
How a command is handled): once per effect, never cached as a verdict."""

from __future__ import annotations

from typing import Any

from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import ExecutionAuthority, definite


async def authorise(
    authority: ExecutionAuthority | None, run_id: str, attempt_id: str, record: dict[str, Any]
) -> str | None:
    """None when ``authority`` (None: none configured) allows the Attempt's new native
    effect, else the refusal's reason. Raises Deferred (``authority-unavailable``) when
    the answer cannot be had now or may pass."""
    if authority is None:
        return None
    binding = record["binding"]
    request = {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "material_digest": record.get("material_digest") or "",
        "member_id": binding.get("member") or "",
        "site_username": binding["user"],
        "account": binding["account"],
    }
    try:
        await authority.authorise_execution(request)
    except EdgeUnavailable:
        raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from None
    except EdgeRefused as error:
        if not definite(error):
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from None
        return f"authority refused ({error.code})"
    return None
