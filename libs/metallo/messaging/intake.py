"""Who is asking: the owner's check of every command and query before it is believed
(docs/operators.md, Trust boundaries; docs/contracts.md, Who is asking).

Two proofs, decided in :meth:`Intake.admit` before a handler or a saved outcome
is looked at:

* **A member token.** Header ``authorization: Bearer <access token>`` from the
  OIDC issuer. The token is verified (issuer JWKS, expiry, client) and its
  subject is bound to a member by the governance file (``oidc_subject``). The
  request's ``metadata.acting_member`` must then be empty (it is filled in with
  that member) or name the same member; another member is ``member-token-mismatch``.
  The token is in a header, never in the body: a retry with a refreshed token
  keeps the command's idempotency fingerprint.
* **A trusted principal.** Without a token, ``acting_member`` is believed only
  when the publishing RabbitMQ user — the ``user_id`` property, which RabbitMQ
  checks against the connection's user — holds an assertion grant for the
  message (``METALLO_BUS_ASSERTERS``; :data:`DEFAULT_ASSERTERS`): the Go API,
  which authenticated the member itself, for every request; Pipeline
  Coordination for the launches, cancellations and preparations that continue a
  Pipeline its member started; Execution Core for the Site commands of a Run its
  member launched. The owner still checks the member's *current* Project
  permission when it decides (seed 004, Run access).

Anything else is refused (``unauthenticated``, ``member-token-rejected``,
``member-not-bound``) and the refusal is never saved under the command_id, so a
retry with a valid token is decided afresh. No token is logged, saved or echoed.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from aio_pika.abc import AbstractIncomingMessage
from google.protobuf.message import Message

from metallo.messaging.errors import Rejected
from metallo.messaging.registry import full_name

log = logging.getLogger(__name__)

MEMBER_TOKEN_HEADER = "authorization"
# Set by an owner that re-queues a delivery for a retry (its own user_id, checked by
# RabbitMQ): the principal that published the original.
SENDER_HEADER = "x-metallo-sender"
MAX_HEADER_CHARS = 16_384

#: What each trusted principal may assert (ADR 0026), by role: the Go API everything;
#: Pipeline Coordination what continues a Pipeline; Execution Core a Run's Site commands.
ASSERTION_ROLES: dict[str, tuple[str, ...]] = {
    "go_api": ("*",),
    "pipeline_coordination": (
        "metallo.execution_core.v1.LaunchRun", "metallo.execution_core.v1.CancelRun",
        "metallo.execution_core.v1.GetRun", "metallo.workload_portfolio.v1.PrepareAction",
        "metallo.workload_portfolio.v1.PrepareBranch"),
    "execution_core": (
        "metallo.site_coordination.v1.AppendSiteCommand",
        "metallo.workload_portfolio.v1.GetWorkloadRevision"),
}


def assertion_grants_text(principals: Mapping[str, str]) -> str:
    """``METALLO_BUS_ASSERTERS`` for ``{role: RabbitMQ user}`` (roles of
    :data:`ASSERTION_ROLES`; a role missing from ``principals`` gets no grant)."""
    return ";".join(f"{principals[role]}={','.join(patterns)}"
                    for role, patterns in ASSERTION_ROLES.items() if role in principals)


DEFAULT_ASSERTERS = assertion_grants_text({
    "go_api": "metallo-go-api", "pipeline_coordination": "metallo-pipeline-coordination",
    "execution_core": "metallo-execution-core"})


@dataclass(frozen=True)
class AssertionGrants:
    """Which RabbitMQ principals may assert ``acting_member`` without a member token, and
    for which messages (``fnmatch`` patterns over full names, ``*`` = every message)."""

    grants: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, principal: str | None, message_name: str) -> bool:
        """Whether ``principal`` may assert the acting member of ``message_name``."""
        if not principal:
            return False
        return any(fnmatch.fnmatchcase(message_name, p) for p in self.grants.get(principal, ()))

    @classmethod
    def parse(cls, text: str) -> AssertionGrants:
        """``principal=pattern,pattern;principal2=*`` → grants. Raises ValueError with the
        bad entry when an entry has no ``=`` or no principal or no pattern."""
        grants: dict[str, tuple[str, ...]] = {}
        for entry in (e.strip() for e in text.split(";")):
            if not entry:
                continue
            principal, sep, patterns = entry.partition("=")
            names = tuple(p.strip() for p in patterns.split(",") if p.strip())
            if not sep or not principal.strip() or not names:
                raise ValueError(f"METALLO_BUS_ASSERTERS entry {entry!r} is not principal=pattern,…")
            grants[principal.strip()] = grants.get(principal.strip(), ()) + names
        return cls(grants)


@dataclass(frozen=True)
class Caller:
    """Who a delivery comes from: the RabbitMQ ``principal`` and the acting ``member``,
    proven by a member token (``proof="member-token"``) or asserted by a trusted
    principal (``proof="asserted"``)."""

    principal: str | None
    member: str
    proof: str


def sender(incoming: AbstractIncomingMessage, own_principal: str | None) -> str | None:
    """The principal that published ``incoming``: its ``user_id``, or — for a delivery
    this owner itself re-queued for a retry — the original sender it recorded."""
    user = incoming.user_id or None
    headers = incoming.headers or {}
    if user is not None and user == own_principal and SENDER_HEADER in headers:
        original = headers[SENDER_HEADER]
        if isinstance(original, bytes):
            original = original.decode("utf-8", "replace")
        return str(original) or None
    return user


def _bearer(headers: Mapping[str, object]) -> str | None:
    value = headers.get(MEMBER_TOKEN_HEADER)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    text = str(value)
    if len(text) > MAX_HEADER_CHARS or not text.startswith("Bearer ") or len(text) < 8:
        raise Rejected("member-token-rejected", "the authorization header is not 'Bearer <token>'",
                       {"reason": "malformed"})
    return text[len("Bearer "):]


Directory = Callable[[str], str | None]


@dataclass
class Intake:
    """The owner's admission check (see module doc).

    ``tokens`` verifies member tokens (an
    :class:`~metallo.identity.access.AccessTokenVerifier`; None: this owner accepts
    none), ``directory(subject)`` names the member bound to a subject (None when
    none is; raises ``Rejected`` when the authority cannot be read), ``grants``
    says which principals may assert, ``own_principal`` is this owner's RabbitMQ
    user.
    """

    grants: AssertionGrants
    own_principal: str | None
    tokens: object | None = None
    directory: Directory | None = None

    async def admit(self, message: Message, incoming: AbstractIncomingMessage) -> Caller:
        """Decide whether ``message`` is believed; fill in ``metadata.acting_member`` from
        a member token. Raises :class:`Rejected` (never to be saved) when not."""
        name = full_name(message)
        principal = sender(incoming, self.own_principal)
        metadata = getattr(message, "metadata", None)
        named = getattr(metadata, "acting_member", "") if metadata is not None else ""
        token = _bearer(incoming.headers or {})
        if token is not None:
            member = await self._member_of(token)
            if named and named != member:
                # The refusal is recorded as the token's member's: who asked, not whom
                # the body named.
                if metadata is not None:
                    metadata.acting_member = member
                raise Rejected("member-token-mismatch",
                               f"the request names member '{named}' but its token proves "
                               f"member '{member}'",
                               {"token_member": member, "named_member": named})
            if metadata is not None:
                metadata.acting_member = member
            return Caller(principal, member, "member-token")
        if self.grants.allows(principal, name):
            return Caller(principal, named, "asserted")
        raise Rejected(
            "unauthenticated",
            f"{name} carries no member token and principal {principal or '(none)'!r} may not "
            "assert the acting member; send the member's access token (`metallo login`)",
            {"principal": principal or ""})

    async def _member_of(self, token: str) -> str:
        from metallo.identity.verify import JwksUnavailable, MemberTokenRejected

        if self.tokens is None or self.directory is None:
            raise Rejected("member-token-rejected",
                           "this service is not configured to accept member tokens "
                           "(METALLO_OIDC_ISSUER, METALLO_OIDC_JWKS_URL, METALLO_GOVERNANCE_FILE)",
                           {"reason": "not-configured"})
        try:
            verified = await self.tokens.verify(token)
        except MemberTokenRejected as exc:
            raise Rejected("member-token-rejected", f"the member token is not accepted ({exc.reason})",
                           {"reason": exc.reason}) from None
        except JwksUnavailable:
            raise Rejected("member-token-keys-unavailable",
                           "the issuer's keys cannot be fetched right now; retry", transient=True) from None
        member = self.directory(verified.subject)
        if member is None:
            raise Rejected("member-not-bound",
                           "no member of the governance file is bound to this token's subject")
        return member

    @classmethod
    def from_environment(cls, own_principal: str | None,
                         environ: Mapping[str, str] | None = None) -> Intake:
        """The intake configured by the environment (docs/operators.md, Trust boundaries):
        ``METALLO_BUS_ASSERTERS`` (default :data:`DEFAULT_ASSERTERS`), and member tokens
        when ``METALLO_OIDC_ISSUER`` and ``METALLO_OIDC_JWKS_URL`` are set:
        ``METALLO_OIDC_CLIENTS`` (default ``metallo-cli``), ``METALLO_OIDC_CA_FILE``,
        subjects bound through ``METALLO_GOVERNANCE_FILE``. Raises ValueError for a
        malformed setting."""
        env = os.environ if environ is None else environ
        grants = AssertionGrants.parse(env.get("METALLO_BUS_ASSERTERS", DEFAULT_ASSERTERS))
        issuer, jwks = env.get("METALLO_OIDC_ISSUER"), env.get("METALLO_OIDC_JWKS_URL")
        governance = env.get("METALLO_GOVERNANCE_FILE")
        if not (issuer and jwks and governance):
            return cls(grants, own_principal)
        from metallo.identity.access import AccessTokenVerifier, jwks_source
        from metallo.identity.verify import JwksCache

        clients = frozenset(c.strip() for c in env.get("METALLO_OIDC_CLIENTS", "metallo-cli").split(",")
                            if c.strip())
        verifier = AccessTokenVerifier(
            issuer=issuer, clients=clients,
            keys=JwksCache(jwks_source(jwks, ca_file=env.get("METALLO_OIDC_CA_FILE") or None)))
        return cls(grants, own_principal, verifier, governance_directory(governance))


def governance_directory(path: str) -> Directory:
    """``subject → member id`` through the governance file at ``path`` (re-read when it
    changes). An unreadable file is a transient ``governance-unavailable`` refusal."""
    from metallo.governance import GovernanceError, GovernanceFile

    file = GovernanceFile(path)

    def member_for(subject: str) -> str | None:
        try:
            member = file.current().member_for_subject(subject)
        except GovernanceError:
            raise Rejected("governance-unavailable", "the governance file cannot be read",
                           transient=True) from None
        return None if member is None else member.id

    return member_for
