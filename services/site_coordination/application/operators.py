"""Operator commands and queries over the bus: command grants of Site Runtimes.

Each checks the acting member's platform-wide operator capability
(``sites.grants``) in the governance file now, never a cached verdict, before
anything is read or written. A grant is only made for the stream of a governed
Site in that Site's own environment.
"""

from __future__ import annotations

from site_coordination.application.grants import (
    Transaction,
    create_grant_for_hash,
    list_command_grants,
    revoke_command_grant,
)
from site_coordination.application.ports import OperatorAuthority
from site_coordination.domain.errors import Forbidden, Invalid, NotFound
from site_coordination.domain.grants import CommandGrant, parse_duration

GRANTS_CAPABILITY = "sites.grants"


def check_operator(authority: OperatorAuthority, member: str, capability: str) -> None:
    """Raise :class:`Forbidden` ``permission-denied`` unless ``member`` holds the
    operator ``capability`` now (``AuthorityUnavailable`` passes through)."""
    if not member or not authority.is_operator(member, capability):
        raise Forbidden("permission-denied",
                        f"member {member or '(none)'} does not hold the operator capability "
                        f"{capability}")


async def operator_create_grant(transaction: Transaction, authority: OperatorAuthority,
                                member: str, site_id: str, environment: str, expires: str,
                                label: str, secret_sha256: str) -> CommandGrant:
    """Create a grant for a governed Site's stream; ``expires`` is a duration text
    (``45s``, ``90m``, ``12h``, ``30d``). Raises Forbidden, NotFound ``site-not-found``
    or Invalid (bad environment, duration, label or hash)."""
    check_operator(authority, member, GRANTS_CAPABILITY)
    seconds = parse_duration(expires)
    known = authority.site_environment(site_id)
    if known is None:
        raise NotFound("site-not-found", f"no Site {site_id[:80]!r} in the governance file")
    if known != environment:
        raise Invalid("environment-mismatch",
                      f"Site {site_id!r} is a {known} Site, not {environment[:20]!r}")
    return await create_grant_for_hash(transaction, site_id, environment, seconds, label,
                                       secret_sha256)


async def operator_revoke_grant(transaction: Transaction, authority: OperatorAuthority,
                                member: str, grant_id: str) -> bool:
    """Revoke a grant now; False when unknown or already revoked. Raises Forbidden."""
    check_operator(authority, member, GRANTS_CAPABILITY)
    if not grant_id or len(grant_id) > 64:
        raise Invalid("invalid-argument", "grant_id is required (at most 64 characters)")
    return await revoke_command_grant(transaction, grant_id)


async def operator_list_grants(transaction: Transaction, authority: OperatorAuthority,
                               member: str) -> list[CommandGrant]:
    """Every grant, newest first (never a secret). Raises Forbidden."""
    check_operator(authority, member, GRANTS_CAPABILITY)
    return await list_command_grants(transaction)
