"""Submit one array group in its own process, optionally dying at a step.

``python -m tests.slurm.array_runner STATE_DIR GROUP_ID ATTEMPTS_JSON MAX_ACTIVE [FAULT_STEP]``:
when the submission reaches ``FAULT_STEP`` (e.g. ``posted:compute``) the process
sends itself SIGKILL, exactly like ``kill -9`` of the Runtime at that point.
Prints ``{stage: array job id}`` as JSON otherwise, or ``{"deferred": code}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from site_runtime.adaptors.slurm.array_journal import ArrayJournal
from site_runtime.adaptors.slurm.arrays import ArraySubmissions
from site_runtime.application.ports import Deferred
from tests.slurm.lab import LabTokens, RecordingGrants, make_executor


def main() -> None:
    state_dir, group_id = Path(sys.argv[1]), sys.argv[2]
    attempts = json.loads(sys.argv[3])
    max_active = int(sys.argv[4]) if sys.argv[4] != "none" else None
    fault_step = sys.argv[5] if len(sys.argv) > 5 else None

    def fault(step: str) -> None:
        if step == fault_step:
            os.kill(os.getpid(), signal.SIGKILL)

    async def run() -> None:
        tokens = LabTokens()
        executor = make_executor(state_dir, tokens, RecordingGrants())
        submissions = ArraySubmissions(
            journal=executor.journal,
            arrays=ArrayJournal(executor.journal),
            rest=executor.rest,
            fault=fault,
        )
        try:
            credential = await tokens.member_token(attempts[0])
            print(json.dumps(await submissions.submit(group_id, attempts, max_active, credential)))
        except Deferred as deferred:
            print(json.dumps({"deferred": deferred.code}))
        finally:
            await executor.rest.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
