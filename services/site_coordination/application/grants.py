"""Operator functions for ``psb_`` command grants, and their check on every request
(seed 004 §4B; DESIGN.md, The Site edge).

``create_command_grant``/``revoke_command_grant``/``list_command_grants`` are the
functions the ``metallo site grant …`` CLI and ``python -m site_coordination grant …``
call. The secret is returned once and never stored.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta

from site_coordination.application.ports import SiteStore
from site_coordination.domain.errors import Invalid
from site_coordination.domain.grants import (
    CommandGrant,
    check_grant,
    new_grant_secret,
    parse_bearer,
    secret_hash,
)
from site_coordination.domain.streams import ENVIRONMENTS, StreamKey, check_identifier

_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# A transaction factory: ``async with transaction() as store: ...`` commits on success.
Transaction = Callable[[], AbstractAsyncContextManager[SiteStore]]


@dataclass(frozen=True)
class IssuedGrant:
    """A new command grant and its secret (shown once, then forgotten)."""

    grant: CommandGrant
    secret: str


async def create_command_grant(transaction: Transaction, site_id: str, environment: str,
                               expires_in_seconds: int, label: str = "") -> IssuedGrant:
    """Create a grant for the one stream ``(site_id, environment)`` lasting
    ``expires_in_seconds`` (1 s … 400 days) from PostgreSQL's now, with a new secret.

    Raises :class:`Invalid` for a bad site id, environment, duration or label.
    """
    secret = new_grant_secret()
    grant = await create_grant_for_hash(transaction, site_id, environment, expires_in_seconds,
                                        label, secret_hash(secret))
    return IssuedGrant(grant=grant, secret=secret)


async def create_grant_for_hash(transaction: Transaction, site_id: str, environment: str,
                                expires_in_seconds: int, label: str,
                                secret_sha256: str) -> CommandGrant:
    """Create a grant whose secret only the caller knows: ``secret_sha256`` is the
    lower-case hex SHA-256 of a ``psb_`` secret the caller made (an operator client
    over the bus, so no secret travels or is saved with a command receipt).

    Raises :class:`Invalid` for a bad site id, environment, duration, label or hash.
    """
    check_identifier("site_id", site_id)
    if environment not in ENVIRONMENTS:
        raise Invalid("invalid-argument", "environment must be slurm or k8s")
    if not 1 <= expires_in_seconds <= 400 * 86400:
        raise Invalid("invalid-duration", "a grant lasts 1 second to 400 days")
    if len(label) > 200:
        raise Invalid("invalid-argument", "label is at most 200 characters")
    if not _SHA256.match(secret_sha256):
        raise Invalid("invalid-argument", "secret_sha256 must be 64 lower-case hex characters")
    async with transaction() as store:
        now = await store.now()
        grant = CommandGrant(
            grant_id="cg-" + secrets.token_hex(8),
            stream=StreamKey(site_id, environment),
            label=label,
            created_at=now,
            expires_at=now + timedelta(seconds=expires_in_seconds),
            revoked_at=None,
        )
        await store.insert_grant(grant, secret_sha256)
    return grant


async def revoke_command_grant(transaction: Transaction, grant_id: str) -> bool:
    """Revoke a grant now; True when it was active, False when unknown or already revoked."""
    async with transaction() as store:
        return await store.revoke_grant(grant_id)


async def list_command_grants(transaction: Transaction) -> list[CommandGrant]:
    """Every grant (active, expired and revoked), newest first; never a secret."""
    async with transaction() as store:
        return await store.list_grants()


async def authenticate(store: SiteStore, authorization: str | None) -> CommandGrant:
    """Resolve the ``Authorization`` header to a usable grant, read afresh now.

    Raises :class:`Unauthenticated` (401) ``credential-missing`` / ``-malformed`` /
    ``-unknown`` / ``-revoked`` / ``-expired``.
    """
    secret = parse_bearer(authorization)
    grant, now = await store.grant_by_hash(secret_hash(secret))
    return check_grant(grant, now)
