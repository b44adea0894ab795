"""The kubernetes executor on the Kubernetes lab: k8s-job Attempts end to end.

Needs ``scripts/k8s-lab up`` (scripts/test runs it). Every test checks what the
cluster itself holds (through the administrator's kubeconfig), not only what the
executor says.
"""

from __future__ import annotations

import json

import pytest

from tests.k8s.lab import (
    Driver,
    git_out,
    make_repository,
    objects_of,
    observe_until,
    payload,
)

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}


def one_of_each(attempt_id: str) -> dict[str, dict]:
    """The Attempt's live objects by stage label, asserting exactly one per kind and stage."""
    found = objects_of(attempt_id)
    by: dict[str, dict] = {}
    for kind, items in found.items():
        for obj in items:
            if kind == "Pod" and obj["metadata"]["labels"].get("metallo.dev/stage") == "compute":
                continue  # the Job's own Pod
            key = f"{kind}/{obj['metadata']['labels']['metallo.dev/stage']}"
            assert key not in by, f"two {key}: {found}"
            by[key] = obj
    return by


async def test_a_k8s_job_runs_as_the_member_and_its_output_is_pushed(executor, authority):
    url, commit, bare = make_repository({"README.md": "lab\n"})
    drv = Driver(executor.site.site_id)
    command = {
        "argv": [
            "/bin/sh",
            "-c",
            'id -un > whoami.txt; printf "%s" "$GREETING" > env.txt; echo computed > out.txt; echo "$1"',
            "sh",
            "$(HOME) *",
        ]
    }
    pre = [{"argv": ["/bin/sh", "-c", "echo pre > pre.txt"]}]
    prepared = await executor.prepare(
        drv.command("prepare", payload(url, commit, command, pre=pre))
    )
    assert prepared.outcome == "succeeded", prepared
    assert prepared.observation["phase"] == "prepared"
    started = await executor.start(drv.command("start"))
    assert started.outcome == "succeeded", started
    final = await observe_until(executor, drv, TERMINAL)
    obs = final.observation
    assert obs["phase"] == "succeeded", obs
    assert obs["exit_code"] == 0 and obs["failure"] is None
    assert git_out("-C", str(bare), "rev-parse", "refs/heads/main") == obs["output_commit"]
    assert git_out("-C", str(bare), "show", f"{obs['output_commit']}:whoami.txt") == "alice"
    assert git_out("-C", str(bare), "show", f"{obs['output_commit']}:out.txt") == "computed"
    assert git_out("-C", str(bare), "show", f"{obs['output_commit']}:pre.txt") == "pre"
    # The environment reached the container exactly: no $(VAR) expansion, no shell.
    assert git_out("-C", str(bare), "show", f"{obs['output_commit']}:env.txt") == "hello $(HOME) $$"
    assert git_out("-C", str(bare), "rev-parse", f"{obs['output_commit']}^") == commit
    assert [j["stage"] for j in final.native_jobs] == ["stage-in", "compute", "stage-out"]
    assert len(authority.requests) == 2  # prepare and start each ask current authority
    # Cleanup: helper Pods gone; with retention 0 the Job and PVC go at the next pass.
    await executor.tick()
    left = objects_of(drv.attempt_id)
    assert left == {"Job": [], "Pod": [], "PersistentVolumeClaim": [], "Secret": []}, json.dumps(
        left
    )
    assert all(o.state == "deleted" for o in executor.journal.objects(drv.attempt_id))
