"""Each running component's readiness, read from its operations endpoint
(``GET <ops_url>/readyz``; docs/operators.md, Probes) for ``metallo dev status``."""

from __future__ import annotations

import asyncio

import httpx

TIMEOUT_SECONDS = 5.0


async def _read(client: httpx.AsyncClient, url: str) -> dict:
    try:
        answer = await client.get(f"{url}/readyz")
    except httpx.HTTPError as error:
        return {"ready": False, "checks": {}, "error": f"no answer from {url} ({type(error).__name__})"}
    try:
        body = answer.json()
    except ValueError:
        return {"ready": False, "checks": {}, "error": f"{url}/readyz answered HTTP {answer.status_code}"}
    return {"ready": answer.status_code == 200 and body.get("ready") is True,
            "checks": dict(body.get("checks") or {})}


async def read_readiness(state: dict) -> dict[str, dict]:
    """{component: {"ready": bool, "checks": {name: "ok" | reason}[, "error": text]}} for
    every component of ``state`` (``state.json``) that has an ``ops_url``."""
    urls = {name: c["ops_url"] for name, c in state.get("components", {}).items() if c.get("ops_url")}
    async with httpx.AsyncClient(timeout=TIMEOUT_SECONDS) as client:
        found = await asyncio.gather(*(_read(client, url) for url in urls.values()))
    return dict(zip(urls, found, strict=True))


def not_ready_reason(readiness: dict) -> str:
    """One line for people: ``"migrations: database at …; broker: …"`` or the error."""
    if readiness.get("error"):
        return readiness["error"]
    return "; ".join(f"{k}: {v}" for k, v in readiness["checks"].items() if v != "ok")
