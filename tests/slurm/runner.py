"""Run one command of the slurm executor in its own process, optionally dying at a step.

``python -m tests.slurm.runner STATE_DIR COMMAND_JSON [FAULT_STEP]``: when the
executor reaches ``FAULT_STEP`` (e.g. ``intent:stage-in``) the process sends
itself SIGKILL, exactly like ``kill -9`` of the Runtime at that point.
Prints the command's result as JSON otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from site_runtime.application.ports import Deferred, SiteCommand
from tests.slurm.lab import LabTokens, RecordingGrants, make_executor


def main() -> None:
    state_dir, command_json = Path(sys.argv[1]), sys.argv[2]
    fault_step = sys.argv[3] if len(sys.argv) > 3 else None

    def fault(step: str) -> None:
        if step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        executor = make_executor(state_dir, LabTokens(), RecordingGrants(), fault=fault)
        command = SiteCommand(**json.loads(command_json))
        try:
            result = await executor.recover(command)
            print(json.dumps(result.to_json()))
        except Deferred as deferred:
            print(json.dumps({"deferred": deferred.code}))
        finally:
            await executor.rest.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
