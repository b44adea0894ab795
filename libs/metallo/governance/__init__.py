"""Development adapter for Project authority, member account bindings and Project resources.

A YAML governance file an operator edits (schema: contracts/governance.schema.json,
guide: docs/governance.md) stands in for Beto (Project authority) and Waldur
(provisioning), DESIGN.md "External owners are ports".

    gov = GovernanceFile("examples/governance.yaml")
    g = gov.current()                       # re-read when the file changed
    g.has_capability("demo", "m-alice", "runs.launch")
"""

from metallo.governance.file import GovernanceError, GovernanceFile, parse_governance
from metallo.governance.model import (
    CAPABILITIES,
    OPERATOR_CAPABILITIES,
    Binding,
    Governance,
    Member,
    Project,
    Site,
)

__all__ = [
    "CAPABILITIES",
    "OPERATOR_CAPABILITIES",
    "Binding",
    "Governance",
    "GovernanceError",
    "GovernanceFile",
    "Member",
    "Project",
    "Site",
    "parse_governance",
]
