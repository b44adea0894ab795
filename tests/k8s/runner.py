"""Run one command of the kubernetes executor in its own process, optionally dying at a step.

``python -m tests.k8s.runner STATE_DIR SITE_ID COMMAND_JSON [FAULT_STEP]``: when the
executor reaches ``FAULT_STEP`` (e.g. ``created:compute``) the process sends itself
SIGKILL, exactly like ``kill -9`` of the Runtime at that point. Prints the command's
result as JSON otherwise. ``METALLO_K8S_RUNNER_SETTINGS`` (JSON object) adds Site
settings (e.g. ``REPOSITORY_CA_FILE``); its ``"grants": "cluster"`` issues the real-cluster
lane's repository grants (tests/k8s_real).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from site_runtime.application.ports import Deferred, SiteCommand
from tests.k8s.lab import make_executor


def main() -> None:
    state_dir, site_id, command_json = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    fault_step = sys.argv[4] if len(sys.argv) > 4 else None

    def fault(step: str) -> None:
        if step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        settings = {"KUBERNETES_RETENTION_SECONDS": 3600}
        settings.update(json.loads(os.environ.get("METALLO_K8S_RUNNER_SETTINGS") or "{}"))
        grants = None
        if settings.pop("grants", None) == "cluster":  # the real-cluster lane's repository
            from tests.k8s_real.cluster import ClusterGrants, cluster_from_env

            cluster = cluster_from_env()
            assert cluster is not None
            grants = ClusterGrants(
                username=cluster.repository_username,
                token=cluster.repository_token,
                url=cluster.repository_url,
            )
        executor = make_executor(state_dir, grants=grants, site_id=site_id, fault=fault, **settings)
        command = SiteCommand(**json.loads(command_json))
        try:
            result = await executor.recover(command)
            print(json.dumps(result.to_json()))
        except Deferred as deferred:
            print(json.dumps({"deferred": deferred.code}))
        finally:
            await executor.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
