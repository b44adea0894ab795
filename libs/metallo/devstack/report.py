"""The demo's summary (``python -m metallo.devstack report PIPELINE_ID``): each step's
state, Run, Site, executor, native jobs and commits, and the metrics the last step
committed; ends with exactly one JSON line on stdout::

    {"pipeline": ID, "state": "succeeded", "steps": [{"action", "run", "state", "site",
     "executor", "native_jobs": [{"stage", "job_id"}], "input_commit", "output_commit"}],
     "metrics": {...}}
"""

from __future__ import annotations

import asyncio
import json
import sys

from metallo.cli.settings import actor, connection
from metallo.cli.transport import Platform, query_metadata
from metallo.devstack.gitrepo import PublishError, read_file
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc

METRICS_FILE = "metrics.json"


async def gather(pipeline_id: str, executor: str) -> dict:
    """The summary document (see module doc); metrics {} when the last step pushed none."""
    who, conn = actor(None, None), connection()
    async with Platform(conn) as platform:
        pipeline = await platform.request(pc.GetPipeline(metadata=query_metadata(who),
                                                         pipeline_id=pipeline_id))
        steps = []
        for step in pipeline.steps:
            run = (await platform.request(ec.GetRun(metadata=query_metadata(who),
                                                    run_id=step.run_id))
                   if step.run_id else None)
            attempt = run.attempts[-1] if run is not None and len(run.attempts) else None
            input_commit = step.pinned_commit
            if run is not None and len(run.repositories):
                input_commit = run.repositories[0].commit
            steps.append({
                "action": step.action, "run": step.run_id, "state": step.state,
                "site": run.site_id if run is not None else "", "executor": executor,
                "native_jobs": ([{"stage": j.stage, "job_id": j.job_id}
                                 for j in attempt.native_jobs] if attempt else []),
                "input_commit": input_commit,
                "output_commit": step.output_commit or (run.output_commit if run else ""),
            })
    metrics: dict = {}
    last = steps[-1]["output_commit"] if steps else ""
    if last:
        try:
            metrics = json.loads(read_file(pipeline.repository_url, pipeline.branch, last,
                                           METRICS_FILE))
        except (PublishError, ValueError):
            metrics = {}
    return {"pipeline": pipeline.pipeline_id, "state": pipeline.state, "steps": steps,
            "metrics": metrics}


def print_report(summary: dict) -> None:
    """People's lines on stderr, then the one JSON line on stdout."""
    for s in summary["steps"]:
        jobs = " ".join(f"{j['stage']}={j['job_id']}" for j in s["native_jobs"]) or "none"
        print(f"step {s['action']}: {s['state']} · run {s['run']} · site {s['site']} "
              f"({s['executor']}) · native jobs {jobs} · {s['input_commit'][:12]} → "
              f"{(s['output_commit'] or '-')[:12]}", file=sys.stderr)
    if summary["metrics"]:
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in sorted(summary["metrics"].items())
                                      if not isinstance(v, (list, dict))), file=sys.stderr)
    sys.stdout.write(json.dumps(summary, sort_keys=False) + "\n")
    sys.stdout.flush()


def main(pipeline_id: str, executor: str) -> int:
    """Print the report; 0 when the Pipeline succeeded and metrics were found, else 1."""
    summary = asyncio.run(gather(pipeline_id, executor))
    print_report(summary)
    return 0 if summary["state"] == "succeeded" and summary["metrics"] else 1
