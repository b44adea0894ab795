"""Handle one ``start-array`` command in its own process, optionally dying at a step.

``python -m tests.slurm.array_command_runner STATE_DIR COMMAND_JSON [FAULT_STEP]``:
``COMMAND_JSON`` is the SiteCommand's fields; when the submission reaches
``FAULT_STEP`` (e.g. ``posted:compute``) the process sends itself SIGKILL, exactly
like ``kill -9`` of the Runtime there. Prints the command's result as JSON, or
``{"deferred": code}``.
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
    state_dir, command = Path(sys.argv[1]), SiteCommand(**json.loads(sys.argv[2]))
    fault_step = sys.argv[3] if len(sys.argv) > 3 else None

    def fault(step: str) -> None:
        if step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        executor = make_executor(state_dir, LabTokens(), RecordingGrants(), fault=fault)
        try:
            print(json.dumps((await executor.start_array(command)).to_json()))
        except Deferred as deferred:
            print(json.dumps({"deferred": deferred.code}))
        finally:
            await executor.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
