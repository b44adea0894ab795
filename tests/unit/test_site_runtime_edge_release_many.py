"""EdgeClient.release_many against the current edge's answer shape and against an
older edge without the revocations route (one DELETE per grant then; ADR 0014).
The older edge is played by httpx.MockTransport: it is a past version of our own
edge, not something this repository can still start."""

from __future__ import annotations

import httpx
import pytest

from site_runtime.application.delivery import EdgeRefused
from tests.unit.edge_client_support import client_with


async def test_one_request_names_every_grant():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json={"results": {"rg-1": "revoked", "rg-2": "not-found", "rg-x": "revoked"}}
        )

    answers = await client_with(handler).release_many(["rg-1", "rg-2"])
    assert answers == {"rg-1": "revoked", "rg-2": "not-found"}  # ids not asked are ignored
    assert [(r.method, r.url.path) for r in seen] == [("POST", "/v1/repository-grants/revocations")]
    assert seen[0].headers["authorization"] == "Bearer psb_test"


async def test_an_older_edge_gets_one_delete_per_grant():
    seen: list[tuple[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path))
        if request.method == "POST":
            return httpx.Response(405, json={"detail": "Method Not Allowed"})
        if request.url.path.endswith("/rg-2"):
            return httpx.Response(403, json={"error": {"code": "grant-wrong-environment"}})
        if request.url.path.endswith("/rg-3"):
            return httpx.Response(404, json={"error": {"code": "repository-grant-not-found"}})
        if request.url.path.endswith("/rg-4"):
            return httpx.Response(401, json={"error": {"code": "credential-unknown"}})
        return httpx.Response(204)

    client = client_with(handler)
    answers = await client.release_many(["rg-1", "rg-2", "rg-3", "rg-4"])
    # rg-4 was refused for another reason: not revoked, so not answered (asked again later).
    assert answers == {"rg-1": "revoked", "rg-2": "forbidden", "rg-3": "revoked"}
    assert seen[1:] == [("DELETE", f"/v1/repository-grants/rg-{i}") for i in (1, 2, 3, 4)]
    seen.clear()
    assert await client.release_many(["rg-1"]) == {"rg-1": "revoked"}
    assert seen == [("DELETE", "/v1/repository-grants/rg-1")]  # the older edge is remembered


async def test_a_malformed_request_is_refused_not_retried_one_by_one():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": {"code": "invalid-argument"}})

    with pytest.raises(EdgeRefused):
        await client_with(handler).release_many(["x"])
