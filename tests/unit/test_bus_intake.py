"""Rules of the owner's intake check and of member access tokens (no broker)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from metallo.common.v1 import common_pb2
from metallo.identity.access import AccessTokenVerifier
from metallo.identity.issuer import LabIssuer, generate_key
from metallo.identity.verify import FileJwksSource, JwksCache, MemberTokenRejected
from metallo.messaging.errors import Rejected
from metallo.messaging.intake import (
    DEFAULT_ASSERTERS,
    SENDER_HEADER,
    AssertionGrants,
    Intake,
    sender,
)
from metallo.testkit.v1 import testkit_pb2 as tk

ISSUER = "https://issuer.test"


@dataclass
class Delivery:
    user_id: str | None = None
    headers: dict = field(default_factory=dict)


@pytest.fixture
def issuer(tmp_path: Path) -> LabIssuer:
    return LabIssuer(generate_key(tmp_path), issuer=ISSUER)


def verifier(tmp_path: Path, clock=time.time) -> AccessTokenVerifier:
    return AccessTokenVerifier(ISSUER, frozenset({"metallo-cli"}),
                               JwksCache(FileJwksSource(tmp_path / "jwks.json")), clock=clock)


async def test_an_expired_access_token_is_refused(issuer, tmp_path):
    token, lifetime = issuer.issue_access("lab-alice", "metallo-cli")
    later = verifier(tmp_path, clock=lambda: time.time() + lifetime + 60)
    with pytest.raises(MemberTokenRejected) as refused:
        await later.verify(token)
    assert refused.value.reason == "expired"
    assert (await verifier(tmp_path).verify(token)).subject == "lab-alice"


async def test_refresh_and_site_tokens_are_not_bus_access_tokens(issuer, tmp_path):
    refresh, _ = issuer.issue_refresh("lab-alice", "metallo-cli")
    with pytest.raises(MemberTokenRejected) as refused:
        await verifier(tmp_path).verify(refresh)
    assert refused.value.reason == "type"
    site_token, _ = issuer.issue("m-alice", "alice")  # azp metallo-site-runtime
    with pytest.raises(MemberTokenRejected) as other:
        await verifier(tmp_path).verify(site_token)
    assert other.value.reason == "authorized-party"


def test_a_refresh_token_is_accepted_back_only_for_its_client(issuer):
    refresh, _ = issuer.issue_refresh("lab-alice", "metallo-cli")
    assert issuer.refreshed_subject(refresh, "metallo-cli") == "lab-alice"
    with pytest.raises(ValueError):
        issuer.refreshed_subject(refresh, "another-client")
    access, _ = issuer.issue_access("lab-alice", "metallo-cli")
    with pytest.raises(ValueError):
        issuer.refreshed_subject(access, "metallo-cli")


def test_assertion_grants_parse_and_match_full_names():
    grants = AssertionGrants.parse(DEFAULT_ASSERTERS)
    assert grants.allows("metallo-go-api", "metallo.execution_core.v1.CancelRun")
    assert grants.allows("metallo-pipeline-coordination", "metallo.execution_core.v1.LaunchRun")
    assert not grants.allows("metallo-pipeline-coordination", "metallo.site_coordination.v1.AppendSiteCommand")
    assert grants.allows("metallo-execution-core", "metallo.site_coordination.v1.AppendSiteCommand")
    assert not grants.allows("metallo-cli", "metallo.execution_core.v1.CancelRun")
    assert not grants.allows(None, "metallo.execution_core.v1.CancelRun")
    with pytest.raises(ValueError, match="principal=pattern"):
        AssertionGrants.parse("metallo-go-api")


def test_the_sender_of_a_retried_delivery_is_believed_only_under_the_owners_user_id():
    assert sender(Delivery("metallo-cli"), "metallo-execution-core") == "metallo-cli"
    retried = Delivery("metallo-execution-core", {SENDER_HEADER: b"metallo-go-api"})
    assert sender(retried, "metallo-execution-core") == "metallo-go-api"
    forged = Delivery("metallo-cli", {SENDER_HEADER: "metallo-go-api"})
    assert sender(forged, "metallo-execution-core") == "metallo-cli"
    assert sender(Delivery(None, {SENDER_HEADER: "metallo-go-api"}), "metallo-execution-core") is None


async def test_without_token_settings_a_token_is_refused_and_nothing_is_believed():
    intake = Intake(AssertionGrants({}), own_principal="owner")
    command = tk.Deposit(metadata=common_pb2.CommandMetadata(command_id="c", acting_member="m-alice"))
    with pytest.raises(Rejected) as refused:
        await intake.admit(command, Delivery("someone", {"authorization": "Bearer a.b.c"}))
    assert refused.value.code == "member-token-rejected"
    assert refused.value.details["reason"] == "not-configured"
    with pytest.raises(Rejected) as anonymous:
        await intake.admit(command, Delivery("someone"))
    assert anonymous.value.code == "unauthenticated"
    with pytest.raises(Rejected) as malformed:
        await intake.admit(command, Delivery("someone", {"authorization": "Basic abc"}))
    assert malformed.value.code == "member-token-rejected"


def test_from_environment_reads_the_operator_settings(tmp_path):
    intake = Intake.from_environment("metallo-execution-core", {
        "METALLO_BUS_ASSERTERS": "gw=*", "METALLO_OIDC_ISSUER": ISSUER,
        "METALLO_OIDC_JWKS_URL": f"file:{tmp_path}/jwks.json",
        "METALLO_GOVERNANCE_FILE": str(tmp_path / "g.yaml")})
    assert intake.grants.allows("gw", "metallo.x.v1.Y") and intake.tokens is not None
    bare = Intake.from_environment("x", {})
    assert bare.tokens is None and bare.grants.allows("metallo-go-api", "metallo.x.v1.Y")
