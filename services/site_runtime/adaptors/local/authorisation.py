"""Asking the Site edge's current authority before a local native effect
(docs/site-runtime.md, How a command is handled): once per effect, never cached."""

from __future__ import annotations

import logging

from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.ports import Deferred
from site_runtime.application.site_access import ExecutionAuthority, RepositoryGrant
from site_runtime.domain.local_batch import LocalJob

log = logging.getLogger("site_runtime.local")


def authorisation_request(run_id: str, attempt_id: str, job: LocalJob) -> dict[str, str]:
    """The ``POST /v1/authorisations/execution`` body for ``job``."""
    return {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "material_digest": job.material_digest,
        "member_id": job.member.get("id", ""),
        "site_username": job.member.get("site_username", ""),
        "account": job.member.get("account", ""),
    }


class EdgeAuthorisation:
    """Current authority for one Attempt's effect, optionally with its stage-in grant.

    ``combines_grants`` turns False once an edge older than the combined request
    refused it (422): from then on the authorisation and the grant are two requests.
    """

    def __init__(self, authority: ExecutionAuthority) -> None:
        self.authority = authority
        self.combines_grants = True

    def can_combine(self) -> bool:
        """Whether the next start may ask for its stage-in grant with the decision."""
        return self.combines_grants and hasattr(self.authority, "authorise_with_grant")

    async def authorise(self, run_id: str, attempt_id: str, job: LocalJob) -> str | None:
        """None when the edge authorises the execution now; the refusal text otherwise.
        Raises Deferred ``authority-unavailable``."""
        try:
            await self.authority.authorise_execution(authorisation_request(run_id, attempt_id, job))
        except EdgeUnavailable as error:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from error
        except EdgeRefused as error:
            return f"{error.code}: {error.reason or 'refused'}"
        return None

    async def authorise_with_grant(
        self, run_id: str, attempt_id: str, job: LocalJob
    ) -> tuple[str | None, RepositoryGrant | None]:
        """(None, stage-in grant) when the edge authorises the execution now, (refusal
        text, None) when it refuses the decision; an edge without the combined request
        gets the plain authorisation, (refusal or None, None). Raises Deferred
        ``authority-unavailable`` and EdgeRefused when only the grant is refused."""
        request = authorisation_request(run_id, attempt_id, job)
        try:
            _, grant = await self.authority.authorise_with_grant(request, "stage-in")  # type: ignore[attr-defined]
        except EdgeUnavailable as error:
            raise Deferred("authority-unavailable", "authorisation cannot be confirmed") from error
        except EdgeRefused as error:
            if error.status == 422:
                # An edge older than the optional field refuses it as invalid: use two
                # requests from now on.
                log.warning("the Site edge does not combine grants with authorisations")
                self.combines_grants = False
                return await self.authorise(run_id, attempt_id, job), None
            if error.code != "authorisation-refused":
                raise
            return f"{error.code}: {error.reason or 'refused'}", None
        return None, grant
