"""A diamond Pipeline end to end on the dev stack with the local executor.

a → b, a → c, (b, c) → d: b and c run at the same time (their recorded start and
end times overlap), each pushes its own file, and d, pinned when it starts, reads
both pushes. Then `metallo run rerun` reruns a's Run at the same revision and commit.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.conftest import metallo, publish

pytestmark = pytest.mark.e2e

BRANCH = "{shell: \"date +%s.%N > {n}.start && sleep 6 && echo {n} > {n}.txt && date +%s.%N > {n}.end\"}"
ACTIONS = f"""version: 1
actions:
  a:
    type: slurm-job
    command: {{shell: "echo a > a.txt"}}
    resources: {{wallTimeSeconds: 300}}
  b:
    type: slurm-job
    command: {BRANCH.replace("{n}", "b")}
    needs: [a]
    resources: {{wallTimeSeconds: 300}}
  c:
    type: slurm-job
    command: {BRANCH.replace("{n}", "c")}
    needs: [a]
    resources: {{wallTimeSeconds: 300}}
  d:
    type: slurm-job
    command: {{shell: "cat a.txt b.txt c.txt > d.txt"}}
    needs: [b, c]
    resources: {{wallTimeSeconds: 300}}
"""


def test_diamond_runs_b_and_c_at_once_and_d_reads_both(local_stack, scratch_repo, tmp_path):
    url = publish(scratch_repo(ACTIONS), "e2e-graph")
    done = metallo("pipeline", "run", url, "--wait", "--timeout", "900", "--quiet", "--output", "json",
                   timeout=960)
    assert done.code == 0, done.stderr[-3000:]
    p = done.json()["pipeline"]
    assert p["state"] == "succeeded", p
    steps = {s["action"]: s for s in p["steps"]}
    assert steps["d"]["needs"] == [2, 3] and steps["b"]["needs"] == [1]

    clone = tmp_path / "out"
    cloned = metallo("dev", "clone", url, str(clone), timeout=120)
    assert cloned.code == 0, cloned.stderr
    subprocess.run(["git", "checkout", "-q", steps["d"]["output_commit"]], cwd=clone, check=True)
    assert (clone / "d.txt").read_text() == "a\nb\nc\n"  # d read both pushes
    b = [float((clone / f"b.{k}").read_text()) for k in ("start", "end")]
    c = [float((clone / f"c.{k}").read_text()) for k in ("start", "end")]
    assert b[0] < c[1] and c[0] < b[1], f"b {b} and c {c} did not run at the same time"

    shown = metallo("pipeline", "show", p["pipeline_id"], timeout=60)
    assert shown.code == 0 and "↳ 4 d (also here)" in shown.stdout, shown.stdout

    first = steps["a"]["run_id"]
    rerun = metallo("run", "rerun", first, "--wait", "--timeout", "600", "--quiet", "--output", "json",
                    timeout=660)
    assert rerun.code == 0, rerun.stderr[-3000:]
    document = rerun.json()
    assert document["rerun"]["rerun_of"] == first
    run = document["run"]
    assert run["outcome"] == "succeeded" and run["rerun_of"] == first
    assert run["repositories"][0]["commit"] == steps["a"]["pinned_commit"]
