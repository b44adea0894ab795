"""The committed OpenAPI document matches the edge, and a bounded schemathesis run
against the real TLS edge finds no 5xx (DESIGN.md, The Site edge)."""

from __future__ import annotations

import asyncio
import json

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from site_coordination.__main__ import OPENAPI_PATH, render_openapi
from tests.integration.site_coordination_support import prepare_payload


def test_committed_openapi_matches_the_application():
    committed = OPENAPI_PATH.read_text()
    assert json.loads(committed) == json.loads(render_openapi()), (
        "contracts/site/openapi.json drifted: run "
        "`python -m site_coordination openapi --output contracts/site/openapi.json`")
    assert committed == render_openapi()


def _fuzz(base_url: str, ca_file: str, secret: str) -> tuple[list[str], dict[int, int]]:
    """Run every operation with positive and negative cases; return the 5xx findings
    and the count of responses per status."""
    schema = schemathesis.openapi.from_dict(json.loads(OPENAPI_PATH.read_text()))
    session = requests.Session()
    session.verify = ca_file
    failures: list[str] = []
    statuses: dict[int, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)
            where = f"{operation.label} {mode.value}"  # run() is called right below

            @given(case=strategy)
            @settings(max_examples=12, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[
                          hypothesis.Phase.explicit, hypothesis.Phase.generate])
            def run(case):
                response = case.call(base_url=base_url, session=session, timeout=30, verify=ca_file,
                                     headers={"Authorization": f"Bearer {secret}"})
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    failures.append(f"{where}: {response.status_code} "  # noqa: B023
                                    f"{response.text[:200]}")

            try:
                run()
            except hypothesis.errors.Unsatisfiable:
                continue  # e.g. no negative case exists for a route without inputs
    session.close()
    return failures, statuses


async def test_schemathesis_finds_no_server_errors(edge):
    secret = await edge.grant()
    await edge.append("prepare", attempt_id="att-1",
                      payload=prepare_payload(edge.url + "/git/demo.git"))
    await edge.append("start", attempt_id="att-1")
    # The stream keeps an unresulted command, so generated long-polls answer at once.
    failures, statuses = await asyncio.to_thread(_fuzz, edge.url, str(edge.ca_file), secret)
    assert failures == []
    assert sum(statuses.values()) >= 100 and 200 in statuses and 422 in statuses, statuses
