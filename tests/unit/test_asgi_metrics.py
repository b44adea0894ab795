"""The edge's request metrics label a request by its route template, method and
status class, never by the concrete path."""

from __future__ import annotations

import httpx
from fastapi import FastAPI, HTTPException
from prometheus_client import REGISTRY

from metallo.operations.asgi_metrics import RequestMetrics


def count(route: str, method: str, status: str) -> float:
    return REGISTRY.get_sample_value("metallo_http_requests_total",
                                     {"route": route, "method": method, "status": status}) or 0.0


async def test_requests_are_counted_by_route_template():
    app = FastAPI()

    @app.post("/v1/things/{number}/result")
    async def result(number: int):
        if number == 0:
            raise HTTPException(409, "taken")
        return {"number": number}

    template = "/v1/things/{number}/result"
    before = {s: count(template, "POST", s) for s in ("2xx", "4xx")}
    unmatched = count("unmatched", "GET", "4xx")
    transport = httpx.ASGITransport(app=RequestMetrics(app))
    async with httpx.AsyncClient(transport=transport, base_url="http://edge") as client:
        assert (await client.post("/v1/things/7/result")).status_code == 200
        assert (await client.post("/v1/things/0/result")).status_code == 409
        assert (await client.get("/nowhere/12345")).status_code == 404
    assert count(template, "POST", "2xx") == before["2xx"] + 1
    assert count(template, "POST", "4xx") == before["4xx"] + 1
    assert count("unmatched", "GET", "4xx") == unmatched + 1
    assert REGISTRY.get_sample_value("metallo_http_requests_total", {
        "route": "/v1/things/7/result", "method": "POST", "status": "2xx"}) is None
