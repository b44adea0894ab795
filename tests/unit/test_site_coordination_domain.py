"""Pure rules of Site Coordination (seed 004 §4A–4B; seed 001)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest

from metallo.identity.issuer import LabIssuer, generate_key
from site_coordination.adaptors.deferral_catalogue import load_catalogue
from site_coordination.adaptors.lab_git.tokens import repository_path
from site_coordination.domain.authorisation import (
    AttemptState,
    AuthorityFacts,
    check_read_path,
    decide_repository_grant,
)
from site_coordination.domain.canonical import canonical_json, json_depth_ok
from site_coordination.domain.errors import Conflict, Forbidden, Invalid, Unauthenticated
from site_coordination.domain.grants import (
    CommandGrant,
    check_grant,
    check_scope,
    new_grant_secret,
    parse_bearer,
    parse_duration,
)
from site_coordination.domain.streams import StoredCommand, StreamKey, decide_result

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
STREAM = StreamKey("lab-slurm", "slurm")


def _command(sequence=1, delivered=True, result=None):
    return StoredCommand("c", STREAM, sequence, "prepare", "r", "a", 1, {}, "h", delivered, result)


def test_results_are_recorded_once_and_only_for_the_delivered_next_command():
    assert decide_result(_command(), 0, '{"x":1}') is True
    assert decide_result(_command(result='{"x":1}'), 1, '{"x":1}') is False
    with pytest.raises(Conflict, match="result-conflict"):
        decide_result(_command(result='{"x":1}'), 1, '{"x":2}')
    with pytest.raises(Conflict, match="command-not-delivered"):
        decide_result(_command(delivered=False), 0, "{}")
    with pytest.raises(Conflict, match="command-not-delivered"):
        decide_result(_command(sequence=3), 1, "{}")


def test_grant_secrets_and_checks():
    secret = new_grant_secret()
    assert secret.startswith("psb_") and len(secret) == 47
    assert parse_bearer(f"Bearer {secret}") == secret
    for bad, code in [(None, "credential-missing"), ("", "credential-missing"),
                      ("Bearer psb_x", "credential-malformed"), (secret, "credential-malformed")]:
        with pytest.raises(Unauthenticated) as err:
            parse_bearer(bad)
        assert err.value.code == code
    grant = CommandGrant("cg-1", STREAM, "", NOW, NOW + timedelta(days=1), None)
    assert check_grant(grant, NOW) is grant
    with pytest.raises(Unauthenticated, match="credential-expired"):
        check_grant(grant, NOW + timedelta(days=2))
    with pytest.raises(Unauthenticated, match="credential-revoked"):
        check_grant(CommandGrant("cg-1", STREAM, "", NOW, NOW + timedelta(days=1), NOW), NOW)
    with pytest.raises(Unauthenticated, match="credential-unknown"):
        check_grant(None, NOW)
    with pytest.raises(Forbidden, match="grant-wrong-environment"):
        check_scope(grant, StreamKey("lab-slurm", "k8s"))
    with pytest.raises(Forbidden, match="grant-wrong-scope"):
        check_scope(grant, StreamKey("other", "slurm"))


def test_durations():
    assert parse_duration("30d") == 30 * 86400 and parse_duration("90m") == 5400
    for bad in ("", "0d", "30", "1y", "401d", "-1h"):
        with pytest.raises(Invalid):
            parse_duration(bad)


def test_json_depth_and_canonical_form():
    assert json_depth_ok(b'{"a": [1, {"b": "[[[["}]}', 3)
    assert not json_depth_ok(b"[[[[1]]]]", 3)
    assert canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_read_paths():
    assert check_read_path("logs/compute.log") == "logs/compute.log"
    for bad in ("/etc/passwd", "../x", "a//b", "a/./b", "", "a\x00b"):
        with pytest.raises(Invalid):
            check_read_path(bad)


def test_repository_paths_of_lab_urls():
    assert repository_path("https://127.0.0.1:8443/git/demo.git") == "demo.git"
    assert repository_path("https://h/git/group/demo.git") == "group/demo.git"
    for bad in ("https://h/demo.git", "https://h/git/../x.git", "https://h/git/demo"):
        assert repository_path(bad) is None


def test_stage_out_crosses_the_deadline_only_after_start():
    facts = AuthorityFacts(True, True, True, frozenset(), ("alice", "demo"))
    material = {"repository": {"url": "https://h/git/d.git"},
                "member": {"id": "m", "site_username": "alice", "account": "demo"},
                "deadline": "2026-11-29T11:00:00Z"}
    attempt = AttemptState("r", "a", material, completed=False, start_delivered=False)
    with pytest.raises(Forbidden):
        decide_repository_grant(attempt, "stage-out", facts, "s", NOW)
    started = AttemptState("r", "a", material, completed=False, start_delivered=True)
    assert decide_repository_grant(started, "stage-out", facts, "s", NOW) == "https://h/git/d.git"
    with pytest.raises(Forbidden):
        decide_repository_grant(started, "stage-in", facts, "s", NOW)


def test_deferral_catalogue_has_the_seed_codes():
    catalogue = load_catalogue()
    for code in ("slurm-submission-limited", "slurm-unavailable", "site-edge-unreachable",
                 "repository-unavailable", "identity-provider-unavailable"):
        assert catalogue.description(code)
    with pytest.raises(Invalid, match="unknown-deferral-code"):
        catalogue.check("nope")


def test_lab_issuer_uses_the_kid_published_beside_its_key(tmp_path: Path):
    key = generate_key(tmp_path)
    jwks = json.loads((tmp_path / "jwks.json").read_text())
    jwks["keys"][0]["kid"] = "lab-key-1"
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    issuer = LabIssuer(key, issuer="https://i", azp="c")
    token, expires = issuer.issue("m-alice", "alice", 99999)
    assert jwt.get_unverified_header(token)["kid"] == "lab-key-1"
    claims = jwt.decode(token, jwt.PyJWK(issuer.jwks()["keys"][0]).key, algorithms=["RS256"],
                        issuer="https://i")
    assert claims["exp"] - claims["iat"] == 3600
    assert expires.timestamp() == claims["exp"]
