"""Which branches a repository has, as the platform reads it (``ListBranches``): what a
member names with ``--branch`` when their own ``git`` cannot reach the server."""

from __future__ import annotations

from workload_portfolio.application.ports import BranchList, ProjectAuthority, SourceControl
from workload_portfolio.application.preparation import PREPARE_CAPABILITIES, READ_CAPABILITIES
from workload_portfolio.domain.errors import InvalidArgument

#: Whoever may prepare or read Workloads in the Project may see a repository's branches.
BRANCH_CAPABILITIES = PREPARE_CAPABILITIES + READ_CAPABILITIES


async def list_branches(source: SourceControl, authority: ProjectAuthority, *, project: str,
                        member: str, repository_url: str) -> BranchList:
    """Check access now, then read the branches (no database, no transaction).

    Raises InvalidArgument (missing project, member or URL), the authority's refusals
    (project-not-found, permission-denied, governance-unavailable) and the source's
    (repository-not-found, source-unavailable).
    """
    if not project or not member:
        raise InvalidArgument("metadata.project and metadata.acting_member are required")
    if not repository_url:
        raise InvalidArgument("repository_url is required")
    authority.check(project, member, BRANCH_CAPABILITIES)
    return await source.list_branches(repository_url)
