"""A k8s-job end to end on the dev stack: ``metallo dev up`` starts the Kubernetes lab and
a second Site Runtime for ``lab-k8s``; ``metallo action run`` of a k8s-job is planned
there, runs as a Kubernetes Job and pushes its output through the stage-out Pod."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import metallo, publish, stack_state
from tests.e2e.test_metrics_scrape import kubernetes_requests, scrape

pytestmark = pytest.mark.e2e

ACTIONS = """version: 1
actions:
  count:
    type: k8s-job
    preCommands:
      - [python3, -c, "open('pre.txt', 'w').write('pre')"]
    command: [python3, count.py, "one two", "$(HOME)"]
    resources: {cpus: 1, memoryMiB: 256, wallTimeSeconds: 600}
    runtime:
      environment: {GREETING: "hello"}
"""
COUNT = """import os, sys
with open("counted.txt", "w") as f:
    f.write(repr(sys.argv[1:]) + " " + os.environ["GREETING"] + "\\n")
print("counted", len(sys.argv) - 1)
"""


def test_a_k8s_job_runs_on_the_kubernetes_lab_and_pushes_its_output(local_stack, tmp_path):
    state = stack_state()
    assert state is not None
    components = state["components"]
    assert components["site_runtime"]["state"] == "ready", components
    assert components["site_runtime_k8s"]["state"] == "ready", components
    shown = metallo("dev", "status")
    assert shown.code == 0 and "site_runtime_k8s" in shown.stdout, shown.stdout
    repo = tmp_path / "k8s-repo"
    repo.mkdir()
    (repo / "actions.yaml").write_text(ACTIONS)
    (repo / "count.py").write_text(COUNT)
    url = publish(repo, "e2e-k8s")
    ops_url = components["site_runtime_k8s"]["ops_url"]
    before = kubernetes_requests(scrape(ops_url))
    launched = metallo("action", "run", url, "count", "--output", "json", timeout=120)
    assert launched.code == 0, launched.stderr
    run_id = launched.json()["launch"]["run_id"]
    waited = metallo("run", "wait", run_id, "--timeout", "300", "--output", "json", timeout=360)
    assert waited.code == 0, waited.stdout + waited.stderr
    run = metallo("run", "show", run_id, "--output", "json").json()
    assert run["site_id"] == "lab-k8s", run
    assert run["outcome"] == "succeeded", run
    assert run["output_commit"], run
    assert kubernetes_requests(scrape(ops_url)) > before  # the Runtime's API counters moved
    log = metallo("run", "logs", run_id, "--stage", "compute", timeout=120)
    assert log.code == 0 and "counted 2" in log.stdout, log.stdout + log.stderr
