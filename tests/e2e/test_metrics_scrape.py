"""Each process of the dev stack serves /metrics; scraped before, during and after a
Run, the counters of the work it did moved: the launch and the preparation counted
by outcome, Runs by phase, launch → native start observed, the Site stream and the
Runtime's requests to the edge measured, every outbox backlog reported; native end →
Run completed observed, the Runtime's journals grown, Workload Portfolio's git fetches
and the lab-k8s Runtime's Kubernetes API requests measured."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import metallo, publish

pytestmark = pytest.mark.e2e

ACTIONS = """version: 1
actions:
  metered:
    type: slurm-job
    command: [sleep, "10"]  # long enough to be scraped while running, under load
    resources: {wallTimeSeconds: 120}
"""
SERVICES = ("site_coordination", "workload_portfolio", "execution_core", "pipeline_coordination")


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of one /metrics answer."""
    answer = httpx.get(f"{url}/metrics", timeout=10)
    assert answer.status_code == 200, answer.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def kubernetes_requests(samples) -> float:
    """Kubernetes API requests a Runtime's ``/metrics`` counts (every verb and code)."""
    return sum(v for (name, labels), v in samples.items()
               if name == "metallo_native_request_seconds_count"
               and ("target", "kubernetes") in labels)


def scrape_all(urls: dict[str, str]) -> dict[str, dict]:
    return {name: scrape(url) for name, url in urls.items()}


def test_counters_move_during_a_run(local_stack, scratch_repo):
    state = metallo("dev", "status", "--output", "json", timeout=60).json()
    urls = {name: c["ops_url"] for name, c in state["components"].items()}
    # The lab-k8s Runtime runs beside the first whenever the Kubernetes lab is up.
    assert set(urls) - {"site_runtime_k8s"} == {*SERVICES, "site_runtime"}
    repository = publish(scratch_repo(ACTIONS), "metrics")
    before = scrape_all(urls)

    launched = metallo("action", "run", repository, "metered", "--output", "json", timeout=120)
    assert launched.code == 0, launched.stderr
    run_id = launched.json()["launch"]["run_id"]
    during, deadline = None, time.monotonic() + 120
    while time.monotonic() < deadline:
        run = metallo("run", "show", run_id, "--output", "json").json()
        if run["phase"] == "running":
            during = scrape_all(urls)
            break
        time.sleep(0.5)
    assert during is not None, "the Run never ran"
    waited = metallo("run", "wait", run_id, "--timeout", "120", "--output", "json", timeout=180)
    assert waited.code == 0, waited.stderr
    after = scrape_all(urls)

    launch = dict(service="execution_core", kind="command",
                  message="metallo.execution_core.v1.LaunchRun", outcome="accepted", code="")
    assert value(during["execution_core"], "metallo_requests_total", **launch) >= \
        value(before["execution_core"], "metallo_requests_total", **launch) + 1
    prepare = dict(service="workload_portfolio", kind="command",
                   message="metallo.workload_portfolio.v1.PrepareAction", outcome="accepted",
                   code="")
    assert value(during["workload_portfolio"], "metallo_requests_total", **prepare) >= \
        value(before["workload_portfolio"], "metallo_requests_total", **prepare) + 1
    timed = dict(service="execution_core", kind="command",
                 message="metallo.execution_core.v1.LaunchRun")
    assert value(after["execution_core"], "metallo_request_seconds_count", **timed) > \
        value(before["execution_core"], "metallo_request_seconds_count", **timed)

    assert value(during["execution_core"], "metallo_runs", phase="running") >= 1
    assert value(after["execution_core"], "metallo_runs", phase="terminal") >= \
        value(before["execution_core"], "metallo_runs", phase="terminal") + 1
    started = "metallo_run_launch_to_native_start_seconds_count"
    assert value(after["execution_core"], started) >= value(before["execution_core"], started) + 1

    site = local_stack["site_id"]
    assert ("metallo_site_stream_depth", frozenset({("site", site)})) in after["site_coordination"]
    edge = dict(target="site_edge", method="POST")
    assert value(after["site_runtime"], "metallo_native_request_seconds_count", **edge) > \
        value(before["site_runtime"], "metallo_native_request_seconds_count", **edge)
    def edge_answers(samples) -> float:
        return sum(v for (name, labels), v in samples.items()
                   if name == "metallo_http_requests_total" and ("status", "2xx") in labels)
    assert edge_answers(after["site_coordination"]) > edge_answers(before["site_coordination"])
    for name in SERVICES:
        assert ("metallo_outbox_backlog", frozenset({("service", name)})) in after[name], name

    completed = "metallo_run_native_end_to_completed_seconds_count"  # local end notices
    assert value(after["execution_core"], completed) >= value(before["execution_core"], completed) + 1
    journaled = dict(journal="delivery", table="commands")
    assert value(after["site_runtime"], "metallo_journal_rows", **journaled) >= \
        value(before["site_runtime"], "metallo_journal_rows", **journaled) + 2  # prepare, start…
    assert value(after["site_runtime"], "metallo_journal_bytes", journal="delivery") > 0
    fetches = dict(target="git", method="fetch")  # PrepareAction read actions.yaml
    assert value(after["workload_portfolio"], "metallo_native_request_seconds_count", **fetches) \
        >= value(before["workload_portfolio"], "metallo_native_request_seconds_count", **fetches) + 1
    # The Kubernetes API counters move with a k8s Run: tests/e2e/test_kubernetes_runs.py.
