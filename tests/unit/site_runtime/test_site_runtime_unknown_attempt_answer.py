"""The Site's answer for an Attempt it does not know is the one Execution Core's
lost-Attempt rule reads (docs/site-commands.md; docs/runs.md, Lost Attempts): a
Runtime whose state was removed answers ``observe`` with ``refused`` and a code of
``UNKNOWN_ATTEMPT_CODES``. Real local executor over a fresh (empty) journal."""

from __future__ import annotations

from execution_core.domain.reasons import UNKNOWN_ATTEMPT_CODES
from site_runtime.adaptors.local.executor import LocalExecutor
from site_runtime.adaptors.local.jobs import LocalJobsJournal
from site_runtime.adaptors.local.settings import LocalSettings
from site_runtime.application.ports import SiteCommand


class NoGrants:
    """The executor's grant ports; an unknown Attempt must reach neither."""

    async def release_many(self, grant_ids):
        raise AssertionError("no grant is released for an unknown Attempt")


async def test_a_runtime_without_the_attempts_state_answers_unknown(tmp_path):
    journal = LocalJobsJournal(tmp_path / "jobs.sqlite")  # the state was removed: empty
    try:
        executor = LocalExecutor(LocalSettings(workspace_root=tmp_path / "ws"), journal,
                                 authority=NoGrants(), grants=NoGrants())  # type: ignore[arg-type]
        answer = await executor.observe(SiteCommand(
            sequence=9, command_id="c-9", kind="observe", site_id="lab-local",
            environment="slurm", run_id="r-1", attempt_id="a-gone", attempt_number=1))
    finally:
        journal.close()
    assert answer.outcome == "refused" and answer.code in UNKNOWN_ATTEMPT_CODES
