"""The stage helper of the platform helper image: one ``stage-in`` or ``stage-out`` of a
Kubernetes Attempt, inside its helper Pod (docs/site-runtime.md, Kubernetes).

    python3 -I -S pod_stage.py --runner /path/stage_runner.py stage-in|stage-out

Standard library only (the image carries git, git-lfs and python3, nothing else).
The stage's spec (no secret) arrives in ``METALLO_STAGE_SPEC``; the repository grant
in ``METALLO_GIT_USERNAME``/``METALLO_GIT_TOKEN`` from the stage's Secret. The git
work is the local executor's stage runner, unchanged — checkout of the exact pinned
commit with ``git lfs pull``; commit, push, and rebase when the branch moved on —
run with its control directory on the workspace PVC. The outcome is the exit status
(``site_runtime.domain.kubernetes_observation.HELPER_EXITS``) and a last log line
``metallo-stage-result {json}`` that carries the output commit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

# Exit statuses: kept equal to kubernetes_observation.HELPER_EXITS (a unit test checks).
EXITS = {
    "stage-in-failed": 10,
    "repository-commit-missing": 11,
    "stage-out-failed": 12,
    "wall-time-exceeded": 13,
    "cancelled": 14,
}
USAGE = 2


def _runner_module(path: str):
    spec = importlib.util.spec_from_file_location("metallo_stage_runner", path)
    if spec is None or spec.loader is None:
        raise OSError(f"no stage runner at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    """Run the stage; 0 on success, a status of :data:`EXITS` on failure, 2 on misuse."""
    if len(argv) != 3 or argv[0] != "--runner" or argv[2] not in ("stage-in", "stage-out"):
        print("usage: pod_stage.py --runner STAGE_RUNNER stage-in|stage-out", file=sys.stderr)
        return USAGE
    stage = argv[2]
    try:
        spec = json.loads(os.environ.pop("METALLO_STAGE_SPEC", ""))
    except ValueError:
        print("METALLO_STAGE_SPEC is missing or not JSON", file=sys.stderr)
        return USAGE
    if not isinstance(spec, dict) or spec.get("stage") != stage:
        print("METALLO_STAGE_SPEC is not this stage's", file=sys.stderr)
        return USAGE
    credentials = {
        k: os.environ.pop(k)
        for k in ("METALLO_GIT_USERNAME", "METALLO_GIT_TOKEN")
        if k in os.environ
    }
    os.umask(0o077)  # the workspace is the member's alone (mode 0700 directories)
    runner_module = _runner_module(argv[1])
    control = Path(spec["repo_dir"]).parent / ".metallo" / stage
    control.mkdir(mode=0o700, parents=True, exist_ok=True)
    runner = runner_module.Runner(control, spec, credentials)

    def on_term(signum, frame) -> None:  # Pod deletion: the step is stopped (TERM, grace, KILL)
        runner.cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    outcome = runner.run()
    # The stage log (a file: the runner reads back what git said) becomes the Pod log.
    runner.log.close()
    with open(spec["log_file"], "rb") as written:
        sys.stdout.flush()
        while chunk := written.read(65536):
            sys.stdout.buffer.write(chunk)
    code = outcome.get("code")
    print(
        "metallo-stage-result "
        + json.dumps(
            {
                "stage": stage,
                "exit_code": outcome.get("exit_code"),
                "signal": outcome.get("signal"),
                "code": code,
                "output_commit": outcome.get("output_commit"),
            },
            sort_keys=True,
        ),
        flush=True,
    )
    if outcome.get("exit_code") == 0 and not code:
        return 0
    return EXITS.get(
        str(code), EXITS["stage-in-failed" if stage == "stage-in" else "stage-out-failed"]
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
