"""Request and response bodies of the Site edge (docs/site-commands.md, docs/site-edge.md).

Every string is length-bounded; unknown fields of a result are kept (the result
is stored exactly as reported), elsewhere they are refused.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Id = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
Short = Annotated[str, Field(min_length=1, max_length=256)]
Code = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z0-9][a-z0-9.-]*$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """An error: stable ``code``, human ``message`` and optional finer ``reason``."""

    code: str = Field(description="Stable error code (docs/site-edge.md)")
    message: str
    reason: str | None = Field(default=None, description="Finer reason code, e.g. of authorisation-refused")


class ErrorBody(BaseModel):
    """The body of every error response: ``{"error": ErrorDetail}``."""

    error: ErrorDetail


class SiteCommand(BaseModel):
    """One numbered command of the caller's stream (docs/site-commands.md)."""

    sequence: int
    command_id: str
    kind: str
    site_id: str
    environment: str
    run_id: str
    attempt_id: str
    attempt_number: int
    payload: dict[str, Any]


class CommandResult(BaseModel):
    """A command's exact result (docs/site-commands.md); stored once, byte-for-byte canonical."""

    model_config = ConfigDict(extra="allow")

    command_id: Id
    outcome: Literal["succeeded", "refused"]
    code: Annotated[str, Field(max_length=128)] | None = None
    message: Annotated[str, Field(max_length=2000)] | None = None
    native_jobs: Annotated[list[dict[str, Any]], Field(max_length=32)] = Field(default_factory=list)
    observation: dict[str, Any] | None = None


class ResultRecorded(BaseModel):
    """Answer to a reported result; ``next`` only when the caller asked to wait for it."""

    recorded: bool = Field(description="true: recorded now; false: the identical result was already recorded")
    next: SiteCommand | None = Field(
        None, description="Only when next_wait was given: the stream's next command "
                          "(delivered as by GET /v1/commands/next), or null when none arrived "
                          "within next_wait; absent otherwise")


class ProgressReport(_Strict):
    """A best-effort progress code for a pending command (seed 001), e.g. a deferral code."""

    command_id: Id
    code: Code


class ProgressAccepted(BaseModel):
    """Answer to a progress report."""

    reported: bool = Field(description="false when this command already reported this code")


class NativeEndNotice(_Strict):
    """A Runtime's notice that an Attempt's native work ended (ADR 0016): no fields; the
    Attempt is named by the path. The body may also be absent."""


class NativeEndNoticed(BaseModel):
    """Answer to a native end notice (a hint for Execution Core, never evidence)."""

    noticed: bool = Field(description="true: the first notice for this Attempt, published "
                                      "now; false: already noticed, nothing published")


class ExecutionAuthorisationRequest(_Strict):
    """Runtime's request to execute an Attempt (seed 001, authorise interface).

    ``material_digest``, ``member_id``, ``site_username`` and ``account`` must equal
    the saved material, else the edge refuses (``authorisation-refused``).
    """

    run_id: Id
    attempt_id: Id
    material_digest: Annotated[str, Field(min_length=1, max_length=128)]
    member_id: Id
    site_username: Short
    account: Short
    repository_grant: Literal["stage-in", "stage-out"] | None = Field(
        default=None,
        description=(
            "Also issue this repository grant for the Attempt, in the same decision and "
            "transaction (one round trip for the Runtime's start); absent: none"
        ),
    )


class CurrentAuthority(BaseModel):
    """The Project, Site and member the owner confirmed at decision time."""

    project: str
    site_id: str
    member_id: str


class AccountBinding(BaseModel):
    """The member's Site account (username and account) confirmed at decision time."""

    site_username: str
    account: str


class RepositoryGrant(BaseModel):
    """An issued repository credential; ``token`` is returned only in this answer."""

    grant_id: str
    direction: str
    username: str
    token: str = Field(description="Shown once; HTTP Basic password for the repository")
    repository_url: str
    expires_at: datetime


class ExecutionAuthorised(BaseModel):
    """A positive execution decision: saved material, authority and binding, used once."""

    authorised: Literal[True] = True
    material: dict[str, Any] = Field(description="The saved prepare/apply payload")
    authority: CurrentAuthority = Field(description="The Project authority confirmed now")
    binding: AccountBinding = Field(description="The member's account binding confirmed now")
    repository_grant: RepositoryGrant | None = Field(
        default=None, description="The grant asked for with ``repository_grant``, if any"
    )


class ReadAuthorisationRequest(_Strict):
    """A request for a private read permit (seed 001, Private reads).

    ``max_bytes`` is in bytes, 1 to 5 MiB.
    """

    run_id: Id
    attempt_id: Id
    viewer: Id
    read_kind: Literal["output", "logs", "file"]
    path: Annotated[str, Field(min_length=1, max_length=1024)]
    max_bytes: Annotated[int, Field(ge=1, le=5 * 1024 * 1024)]


class ReadPermit(BaseModel):
    """An issued read permit: the exact Run, Attempt, viewer, kind, path and byte limit.

    ``max_bytes`` is in bytes; ``expires_at`` is on the owner's database clock.
    """

    permit_id: str
    run_id: str
    attempt_id: str
    viewer: str
    read_kind: str
    path: str
    max_bytes: int
    expires_at: datetime


class RepositoryGrantRequest(_Strict):
    """A request for a Run-scoped repository credential (``stage-in`` or ``stage-out``)."""

    direction: Literal["stage-in", "stage-out"]


class RepositoryGrantRevocations(_Strict):
    """Repository grants of the caller's stream to revoke at once (1 to 100 ids)."""

    grant_ids: list[Annotated[str, StringConstraints(min_length=1, max_length=128)]] = Field(
        min_length=1, max_length=100
    )


class RepositoryGrantRevocationResults(BaseModel):
    """Each named grant's answer: ``revoked`` (now or before), ``not-found`` or ``forbidden``
    (another stream's)."""

    results: dict[str, Literal["revoked", "not-found", "forbidden"]]


class MemberToken(BaseModel):
    """A per-action member JWT and its expiry (lifetime at most 3600 seconds)."""

    token: str = Field(description="RS256 JWT (lab issuer), at most 3600 s")
    expires_at: datetime


class Health(BaseModel):
    """The health answer: always ``{"status": "ok"}`` while the process serves."""

    status: Literal["ok"] = "ok"
