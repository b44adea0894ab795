"""The Site edge's member-token answers as the Runtime classifies them (seed 001;
domain/consent.py): the real edge over TLS, the real governance file adapter and
the Runtime's HTTPS edge client. A permanent refusal is a ConsentRefused of the
slurm executor's submissions; anything that may pass stays a deferral."""

from __future__ import annotations

import os

import pytest

from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.adaptors.slurm.submission import ConsentRefused, StageSubmissions
from site_runtime.application.ports import Deferred
from site_runtime.domain.consent import permanent_reason
from tests.integration.site_coordination_support import prepare_payload


class _Attempt:
    def __init__(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id


def _edit_governance(edge, old: str, new: str) -> None:
    text = edge.governance_file.read_text()
    assert old in text
    tmp = edge.governance_file.with_suffix(".new")
    tmp.write_text(text.replace(old, new))
    os.replace(tmp, edge.governance_file)


async def test_member_token_refusals_of_the_real_edge_are_classified(edge, tmp_path):
    grant = tmp_path / "grant"
    grant.write_text(await edge.grant())
    client = EdgeClient(
        EdgeSettings(base_url=edge.url, ca_file=edge.ca_file, credential_file=grant)
    )
    # Only the token source is used by credential(); the rest belongs to submissions.
    submissions = StageSubmissions(journal=None, rest=None, tokens=client, grants=None)
    try:
        for attempt in ("att-ok", "att-changed", "att-gone", "att-down"):
            await edge.append("prepare", attempt_id=attempt, payload=prepare_payload())
        assert (await submissions.credential(_Attempt("att-ok"))).bearer().count(".") == 2

        # The member's binding at the Site changed: refused for good.
        _edit_governance(
            edge,
            "lab-slurm: {site_username: alice, account: demo}",
            "lab-slurm: {site_username: alice, account: other}",
        )
        with pytest.raises(ConsentRefused) as refused:
            await submissions.credential(_Attempt("att-changed"))
        assert refused.value.reason == "binding-changed"

        # The Project no longer has the Site: refused for good.
        _edit_governance(
            edge,
            "lab-slurm: {site_username: alice, account: other}",
            "lab-slurm: {site_username: alice, account: demo}",
        )
        _edit_governance(edge, "sites: [lab-slurm, lab-k8s]", "sites: [lab-k8s]")
        with pytest.raises(ConsentRefused) as refused:
            await submissions.credential(_Attempt("att-gone"))
        assert refused.value.reason == "site-not-in-project"

        # The authority cannot answer now (a broken file): a deferral, not a refusal.
        edge.governance_file.write_text("version: [")
        with pytest.raises(Deferred) as deferred:
            await submissions.credential(_Attempt("att-down"))
        assert deferred.value.code == "authority-unavailable"

        # A grant the edge does not know (being rotated): 401, temporary.
        grant.write_text("psb_" + "0" * 40)
        with pytest.raises(Deferred) as deferred:
            await submissions.credential(_Attempt("att-down"))
        assert deferred.value.code == "identity-provider-unavailable"
        assert permanent_reason(401, "unauthenticated", None) is None
    finally:
        await client.close()
