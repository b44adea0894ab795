"""Authority decisions for a Site Runtime's requests (seed 001; seed 004 §4B).

The saved material is the ``prepare``/``apply`` payload Execution Core appended
to the stream (docs/site-commands.md). Current authority comes from the Project
authority port as :class:`AuthorityFacts`. A success is used once and never
retained as a verdict.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from site_coordination.domain.errors import Conflict, Forbidden, Invalid

READ_KINDS = frozenset({"output", "logs", "file"})
MAX_READ_BYTES = 5 * 1024 * 1024
DIRECTIONS = frozenset({"stage-in", "stage-out"})
_PATH_PART = re.compile(r"^[A-Za-z0-9._+@=-]{1,255}$")


@dataclass(frozen=True)
class AuthorityFacts:
    """What the Project authority says now about one member, Project and Site.

    ``binding`` is the member's ``(site_username, account)`` at the Site, or None.
    """

    project_known: bool
    site_in_project: bool
    is_member: bool
    capabilities: frozenset[str]
    binding: tuple[str, str] | None


@dataclass(frozen=True)
class AttemptState:
    """What the stream knows of one Attempt: its saved material and progress."""

    run_id: str
    attempt_id: str
    material: dict[str, Any]
    completed: bool
    start_delivered: bool

    @property
    def project(self) -> str:
        """The material's ``project`` (empty string when absent)."""
        return str(self.material.get("project", ""))

    @property
    def member(self) -> dict[str, Any]:
        """The material's ``member`` object (empty dict when absent or not an object)."""
        member = self.material.get("member")
        return member if isinstance(member, dict) else {}

    @property
    def repository_url(self) -> str | None:
        """The material's ``repository.url``, or None when absent or empty."""
        repo = self.material.get("repository")
        url = repo.get("url") if isinstance(repo, dict) else None
        return url if isinstance(url, str) and url else None

    def deadline(self) -> datetime | None:
        """The Attempt's deadline from the material, or None when absent/unreadable."""
        raw = self.material.get("deadline")
        if not isinstance(raw, str):
            return None
        try:
            return datetime.fromisoformat(raw)
        except ValueError:
            return None


def _refuse(reason: str, message: str) -> Forbidden:
    return Forbidden("authorisation-refused", message, reason=reason)


def check_accepted_work(attempt: AttemptState, facts: AuthorityFacts, site_id: str) -> None:
    """Accepted-work authority (seed 001): the Project still exists, still has the Site,
    and the member's binding there is exactly the saved account.

    Raises :class:`Forbidden` ``authorisation-refused`` with a reason code.
    """
    if attempt.completed:
        raise _refuse("attempt-completed", "the Attempt has ended")
    if not facts.project_known:
        raise _refuse("project-unknown", "the Project is not known to the Project authority")
    if not facts.site_in_project:
        raise _refuse("site-not-in-project", f"Site {site_id} no longer serves the Project")
    if facts.binding is None:
        raise _refuse("binding-missing", "the member has no account binding at this Site")
    saved = (attempt.member.get("site_username"), attempt.member.get("account"))
    if facts.binding != saved:
        raise _refuse("binding-changed", "the member's account binding differs from the saved one")


def decide_execution(attempt: AttemptState, request: dict[str, str], facts: AuthorityFacts,
                     site_id: str) -> None:
    """Authorise an execution (seed 001, ``authorise``): the request's Run, material
    digest, member and account must equal the saved material, and accepted-work
    authority must hold now. Raises :class:`Forbidden` with a reason code.
    """
    if request["run_id"] != attempt.run_id:
        raise _refuse("run-mismatch", "the Attempt belongs to another Run")
    if request["material_digest"] != attempt.material.get("material_digest"):
        raise _refuse("material-digest-mismatch", "the material digest differs from the saved one")
    if request["member_id"] != attempt.member.get("id"):
        raise _refuse("member-mismatch", "the member differs from the saved one")
    if (request["site_username"], request["account"]) != (
        attempt.member.get("site_username"), attempt.member.get("account")
    ):
        raise _refuse("account-mismatch", "the account reference differs from the saved one")
    check_accepted_work(attempt, facts, site_id)


def check_read_path(path: str) -> str:
    """Return a normalised relative read path; raise :class:`Invalid` ``invalid-read-path``.

    Absolute paths, ``..``, empty parts and unusual characters are refused.
    """
    if not path or len(path) > 1024 or path.startswith("/"):
        raise Invalid("invalid-read-path", "the path must be relative and at most 1024 characters")
    parts = path.split("/")
    if any(p in ("", ".", "..") or not _PATH_PART.match(p) for p in parts):
        raise Invalid("invalid-read-path", "the path has an empty, dot or unusual component")
    return posixpath.normpath(path)


def decide_read(attempt: AttemptState, request: dict[str, Any], facts: AuthorityFacts) -> None:
    """Authorise a private read (seed 001, Private reads): the viewer is a current
    member with ``runs.read`` and has an account at the Site; the read kind, path and
    byte limit are bounded. Raises :class:`Forbidden` / :class:`Invalid`.
    """
    if request["run_id"] != attempt.run_id:
        raise _refuse("run-mismatch", "the Attempt belongs to another Run")
    if request["read_kind"] not in READ_KINDS:
        raise Invalid("invalid-read-kind", f"read_kind must be one of {sorted(READ_KINDS)}")
    if not 1 <= request["max_bytes"] <= MAX_READ_BYTES:
        raise Invalid("invalid-byte-limit", f"max_bytes must be 1..{MAX_READ_BYTES}")
    check_read_path(request["path"])
    if not facts.project_known:
        raise _refuse("project-unknown", "the Project is not known to the Project authority")
    if not facts.is_member or "runs.read" not in facts.capabilities:
        raise _refuse("viewer-not-authorised", "the viewer may not read this Project's Runs")
    if facts.binding is None:
        raise _refuse("viewer-without-account", "the viewer has no account at this Site")


def decide_repository_grant(attempt: AttemptState, direction: str, facts: AuthorityFacts,
                            site_id: str, now: datetime) -> str:
    """Decide a Run-scoped repository grant (seed 001, Repository grants); return the
    saved repository URL.

    Stage-in needs accepted-work authority and the original deadline. Stage-out is
    limited to the saved repository of an Attempt that has not ended, and may cross
    the deadline only once the Attempt's ``start`` was delivered (output recovery).
    Completed Attempts cannot renew. Raises :class:`Invalid`, :class:`Conflict`,
    :class:`Forbidden`.
    """
    if direction not in DIRECTIONS:
        raise Invalid("invalid-direction", "direction must be stage-in or stage-out")
    url = attempt.repository_url
    if url is None:
        raise Conflict("attempt-without-repository", "the saved material names no repository")
    if attempt.completed:
        raise Conflict("attempt-completed", "the Attempt has ended; its grants cannot renew")
    deadline = attempt.deadline()
    past_deadline = deadline is not None and deadline <= now
    if direction == "stage-in":
        if past_deadline:
            raise _refuse("attempt-deadline-passed", "stage-in is not allowed after the deadline")
        check_accepted_work(attempt, facts, site_id)
    elif past_deadline and not attempt.start_delivered:
        raise _refuse("attempt-not-submitted",
                      "stage-out past the deadline needs a submitted Attempt")
    return url


def decide_member_token(attempt: AttemptState, facts: AuthorityFacts, site_id: str) -> tuple[str, str]:
    """Decide a per-action member token (seed 000/001): accepted-work authority must
    hold; return ``(member_id, site_username)`` from the saved material.
    """
    check_accepted_work(attempt, facts, site_id)
    member_id = attempt.member.get("id")
    site_username = attempt.member.get("site_username")
    if not isinstance(member_id, str) or not isinstance(site_username, str):
        raise _refuse("material-without-member", "the saved material names no member")
    return member_id, site_username
