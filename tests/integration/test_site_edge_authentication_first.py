"""The Site edge settles who is asking before it judges the request: every route
under /v1 answers an unauthenticated caller 401 whatever body, path or query it
sends; the interactive API pages are off unless enabled; request paths enter log
lines escaped (docs/site-edge.md, Authentication first)."""

from __future__ import annotations

import logging
import re

import pytest

from site_coordination.__main__ import render_openapi
from site_coordination.adaptors.edge.app import EdgeSettings
from tests.integration.site_coordination_support import start_harness

UNKNOWN = "psb_" + "A" * 43  # well-formed, names no grant

# Each case breaks what validation would check: a required field missing, a value of
# the wrong type, text that is not JSON, nesting deeper than allowed, a body too large.
BODIES = [
    ("missing-fields", b'{"junk": 1}'),
    ("wrong-types", b'{"run_id": 7, "attempt_id": [], "grant_ids": "x", "direction": 3}'),
    ("not-json", b'{"run_id": '),
    ("too-deep", b"[" * 40 + b"]" * 40),
    ("too-large", b'{"x": "' + b"a" * (300 * 1024) + b'"}'),
]
CREDENTIALS = [("no-credential", None), ("malformed", "Bearer nope"), ("unknown", f"Bearer {UNKNOWN}")]


def _routes() -> list[tuple[str, str]]:
    """Every authenticated operation of the committed contract, with its path
    parameters filled with values validation refuses (out of range, too long)."""
    import json

    paths = json.loads(render_openapi())["paths"]
    bad = {"sequence": "0", "attempt_id": "a" * 200, "permit_id": "p" * 200,
           "grant_id": "g" * 200}
    out = []
    for path, operations in paths.items():
        if not path.startswith("/v1/"):
            continue
        filled = re.sub(r"\{(\w+)\}", lambda m: bad[m.group(1)], path)
        out.extend((method.upper(), filled) for method in operations)
    return out


def test_the_contract_has_the_routes_this_test_sweeps():
    routes = _routes()
    assert len(routes) >= 11, routes
    assert ("POST", "/v1/authorisations/execution") in routes


@pytest.mark.parametrize("body_case,body", BODIES, ids=[b[0] for b in BODIES])
async def test_every_route_answers_an_unauthenticated_caller_401(edge, body_case, body):
    client = edge.client()
    for method, path in _routes():
        for credential_case, authorization in CREDENTIALS:
            headers = {"content-type": "application/json"}
            if authorization:
                headers["authorization"] = authorization
            answer = await client.request(method, path + "?wait=abc&next_wait=-1",
                                          content=body, headers=headers)
            where = f"{method} {path} {credential_case} {body_case}"
            assert answer.status_code == 401, (where, answer.status_code, answer.text)
            code = answer.json()["error"]["code"]
            assert code.startswith("credential-"), (where, code)


async def test_an_authenticated_caller_still_learns_what_is_wrong(edge):
    client = edge.client(await edge.grant())
    answer = await client.post("/v1/authorisations/execution", json={"junk": 1})
    assert answer.status_code == 422
    assert answer.json()["error"]["code"] == "invalid-request"
    assert "run_id" in answer.json()["error"]["message"]
    json_type = {"content-type": "application/json"}
    answer = await client.post("/v1/repository-grants/revocations", content=b"{",
                               headers=json_type)
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "malformed-json")
    answer = await client.post("/v1/repository-grants/revocations",
                               content=b"[" * 40 + b"]" * 40, headers=json_type)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "body-too-deep")
    answer = await client.get("/v1/commands/next", params={"wait": "abc"})
    assert answer.status_code == 422


async def test_api_pages_are_off_by_default(edge):
    client = edge.client()
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert (await client.get(path)).status_code == 404, path
    assert (await client.get("/healthz")).status_code == 200


async def test_an_operator_can_enable_the_api_pages(make_database, tmp_path, namespace):
    harness = await start_harness(make_database, tmp_path, namespace,
                                  settings=EdgeSettings(api_docs=True))
    try:
        client = harness.client()
        assert (await client.get("/docs")).status_code == 200
        assert (await client.get("/redoc")).status_code == 200
        served = (await client.get("/openapi.json")).json()
        assert "/v1/commands/next" in served["paths"]
    finally:
        await harness.stop()
        await harness.engine.dispose()


async def test_control_characters_in_paths_are_escaped_in_log_lines(edge, caplog):
    caplog.set_level(logging.INFO, logger="site_coordination")
    client = edge.client()
    forged = "/v1/attempts/x%00y%0A2026-01-01 00:00:00,000 INFO forged: line%1b[31m/member-token"
    answer = await client.post(forged, content=b"{")
    assert answer.status_code in (401, 404)
    git = await client.get("/git-admin/repositories/a%00b%0Dc", auth=("operator", "wrong"))
    assert git.status_code == 401
    await client.post("/v1/commands/1/result", content=b"x" * (7 * 1024 * 1024))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("site_coordination")]
    touched = [line for line in lines if "x\\x00y" in line or "a\\x00b" in line]
    assert len(touched) >= 2, lines
    for line in lines:
        assert not any(ord(c) < 32 or ord(c) == 127 for c in line), repr(line)
    assert any("x\\x00y\\x0a2026-01-01" in line and "\\x1b[31m" in line for line in touched)
