"""A 20-child collection end to end on the dev stack with the local executor.

`sweep` has a 20-value matrix with maxActive 3: each child writes its own value
(read only from METALLO_PARAM_SEED) and its start/end times, and pushes them;
no more than three children run at once (their recorded times say so); `report`
needs `sweep` and reads every child's push. `metallo collection show` gives each
child's Run, and a child's Run is an ordinary Run (`metallo run show`).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.conftest import metallo, publish

pytestmark = pytest.mark.e2e

CHILD = ('date +%s.%N > "t-$METALLO_PARAM_SEED.start" && sleep 3 && '
         'printf "%s\\n" "$METALLO_PARAM_SEED" > "out-$METALLO_PARAM_SEED.txt" && '
         'date +%s.%N > "t-$METALLO_PARAM_SEED.end"')
SEEDS = [str(i) for i in range(1, 21)]
ACTIONS = f"""version: 1
actions:
  sweep:
    type: slurm-job
    command: {{shell: '{CHILD}'}}
    resources: {{wallTimeSeconds: 300}}
    matrix:
      seed: [{", ".join(f'"{s}"' for s in SEEDS)}]
    maxActive: 3
  report:
    type: slurm-job
    command: {{shell: "cat out-*.txt | sort -n > report.txt"}}
    needs: [sweep]
    resources: {{wallTimeSeconds: 300}}
"""


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_twenty_children_three_at_a_time_then_report_reads_every_push(local_stack, scratch_repo, tmp_path):
    url = publish(scratch_repo(ACTIONS), "e2e-collection")
    done = metallo("pipeline", "run", url, "--wait", "--timeout", "1500", "--quiet", "--output", "json",
                   timeout=1560)
    assert done.code == 0, done.stderr[-3000:]
    p = done.json()["pipeline"]
    assert p["state"] == "succeeded", p
    sweep, report = p["steps"]
    assert sweep["collection_counts"]["succeeded"] == 20 and sweep["collection_id"]

    shown = metallo("collection", "show", sweep["collection_id"], "--output", "json", timeout=60)
    assert shown.code == 0, shown.stderr
    c = shown.json()
    assert c["state"] == "succeeded" and c["max_active"] == 3 and len(c["items"]) == 20
    assert sorted(i["parameters"]["seed"] for i in c["items"]) == sorted(SEEDS)
    child = metallo("run", "show", c["items"][4]["run_id"], "--output", "json", timeout=60)
    assert child.code == 0, child.stderr
    run = child.json()
    assert run["outcome"] == "succeeded" and run["parameters"] == c["items"][4]["parameters"]

    clone = tmp_path / "out"
    assert metallo("dev", "clone", url, str(clone), timeout=120).code == 0
    subprocess.run(["git", "checkout", "-q", report["output_commit"]], cwd=clone, check=True)
    assert (clone / "report.txt").read_text().split() == SEEDS  # every child's own value, pushed
    times = [tuple(float((clone / f"t-{s}.{k}").read_text()) for k in ("start", "end")) for s in SEEDS]
    most = most_at_once(times)
    assert 2 <= most <= 3, f"{most} children ran at once"
