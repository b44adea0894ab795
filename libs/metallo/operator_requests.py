"""Operator requests shared by ``metallo site …`` and the dev stack: the ``psb_``
secret a grant is created for, and the typed commands that carry only its hash.

The secret is made here, on the operator's machine; Site Coordination receives
and stores only its SHA-256 (``CreateCommandGrant.secret_sha256``), so it never
crosses the bus, is never saved with a command receipt and is shown once.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid

from metallo.common.v1 import common_pb2
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

GRANT_PREFIX = "psb_"


def new_grant_secret() -> str:
    """A fresh ``psb_`` secret: 32 random bytes, URL-safe base64 without padding."""
    return GRANT_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def operator_metadata(member: str, command_id: str | None = None) -> common_pb2.CommandMetadata:
    """CommandMetadata of an operator command (no Project); a fresh UUID by default."""
    return common_pb2.CommandMetadata(command_id=command_id or str(uuid.uuid4()),
                                      acting_member=member)


def create_grant_command(member: str, site_id: str, environment: str, expires: str,
                         label: str, secret: str) -> sc.CreateCommandGrant:
    """``CreateCommandGrant`` for ``secret`` (sent as its lower-case hex SHA-256)."""
    return sc.CreateCommandGrant(
        metadata=operator_metadata(member), site_id=site_id, environment=environment,
        expires=expires, label=label,
        secret_sha256=hashlib.sha256(secret.encode("ascii")).hexdigest())


def revoke_grant_command(member: str, grant_id: str) -> sc.RevokeCommandGrant:
    """``RevokeCommandGrant`` of ``grant_id``."""
    return sc.RevokeCommandGrant(metadata=operator_metadata(member), grant_id=grant_id)
