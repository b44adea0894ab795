"""`metallo dev down` says how many Runs are still active before it stops the stack
(a Run's stage-out would find the lab Git server gone). It asks Execution Core
(``CountActiveRuns``, as the dev stack's operator), never its database."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.adaptors.service import ExecutionCore
from execution_core.application.settings import Settings
from metallo.devstack.components import Options
from metallo.devstack.control import warn_active_runs, warn_switched_executor
from metallo.devstack.layout import Layout
from metallo.governance import GovernanceFile
from metallo.persistence.engine import create_engine
from site_runtime.adaptors.delivery_journal import SqliteDeliveryJournal
from site_runtime.application.ports import SiteCommand
from tests.integration.execution_core_support import MIGRATIONS, governance_copy

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_lab_logins(tmp_path, monkeypatch):
    """A dev-stack layout of the test's own, without lab logins: the operator request
    asserts the operator as the Go API's principal of the test bus (METALLO_BUS_ASSERTERS)."""
    monkeypatch.setenv("METALLO_DEV_STATE", str(tmp_path / "dev"))


@pytest.fixture
async def core(make_database, bus_url, topology, tmp_path):
    """Execution Core's request server on its own database; yields the engine."""
    engine = create_engine(await make_database("execution_core", MIGRATIONS), pool_size=2)
    service = ExecutionCore(engine=engine, amqp_url=bus_url("execution_core"), topology=topology,
                            authority=GovernanceAuthority(GovernanceFile(governance_copy(tmp_path))),
                            parts=frozenset({"server"}), settings=Settings(lost_after_seconds=120))
    await service.start()
    try:
        yield engine
    finally:
        await service.stop()
        await engine.dispose()


async def _insert_runs(engine, phases: list[str], sites: list[str] | None = None) -> None:
    async with engine.begin() as conn:
        for n, phase in enumerate(phases):
            await conn.execute(text(
                "INSERT INTO runs (run_id, project, workload_id, revision, initiating_member,"
                " launch_command_id, phase, next_wake_at, site_id, current_attempt_id)"
                " VALUES (:r, 'demo', 'w', 1, 'm', :c, :p, now() + interval '1 hour', :s, :a)"),
                {"r": f"r{n}", "c": f"c{n}", "p": phase, "a": f"a{n}",
                 "s": (sites or ["lab-slurm"] * len(phases))[n]})


async def test_active_runs_are_counted_and_said(core, bus_url, namespace):
    await _insert_runs(core, ["terminal", "running", "accepted", "terminal"])
    options = Options(executor="local", amqp_url=bus_url("go_api"), topology_prefix=namespace)
    said: list[str] = []
    # warn_active_runs runs its own event loop (the CLI is synchronous): a thread here.
    assert await asyncio.to_thread(warn_active_runs, options, said.append) == 2
    assert said and said[0].startswith("warning: 2 Run(s) still active")


async def test_nothing_is_said_when_none_is_active_or_execution_core_is_away(
    core, bus_url, namespace
):
    await _insert_runs(core, ["terminal"])
    said: list[str] = []
    options = Options(executor="local", amqp_url=bus_url("go_api"), topology_prefix=namespace)
    assert await asyncio.to_thread(warn_active_runs, options, said.append) == 0 and said == []
    away = Options(executor="local", amqp_url=bus_url("go_api"), topology_prefix=namespace + "away.")
    assert await asyncio.to_thread(warn_active_runs, away, said.append) == 0 and said == []


def _journal_starts(layout: Layout, executor: str, attempts: list[str]) -> None:
    """A Runtime's delivery journal under the layout, as if it had pulled these starts."""
    journal = SqliteDeliveryJournal(layout.runtime / executor / "delivery.sqlite")
    try:
        for n, attempt in enumerate(attempts, start=1):
            journal.journal(SiteCommand(sequence=n, command_id=f"{executor}-{n}", kind="start",
                                        site_id="lab-slurm", environment="slurm", run_id="r",
                                        attempt_id=attempt, attempt_number=1))
    finally:
        journal.close()


async def test_a_switched_executor_names_the_executor_its_active_runs_ran_on(
    core, bus_url, namespace
):
    # Runs placed on the dev Site: r0 and r2 started under Slurm, r1 under the local
    # executor, r3 ended. A Run on the Kubernetes lab's Site is not counted.
    await _insert_runs(core, ["running", "running", "cancelling", "terminal", "running"],
                       ["lab-slurm", "lab-slurm", "lab-slurm", "lab-slurm", "lab-k8s"])
    layout = Layout.default()
    _journal_starts(layout, "slurm", ["a0", "a2", "a3", "a4"])
    _journal_starts(layout, "local", ["a1"])
    options = Options(executor="local", amqp_url=bus_url("go_api"), topology_prefix=namespace)
    said: list[str] = []
    # Back on the local executor: only the Slurm Runtime's two are unknown here.
    assert await asyncio.to_thread(
        warn_switched_executor, options, "local", said.append, layout) == 2
    assert len(said) == 1
    assert said[0].startswith("warning: 2 Run(s) on lab-slurm are still active on Attempts the "
                              "slurm executor's Runtime started. The local Runtime")
    assert "attempt-unknown-at-site" in said[0] and "--executor slurm" in said[0]
    # The period Execution Core is configured with, not a fixed one.
    assert "reconciliation period (2 minutes)" in said[0]
    # Switching back to Slurm: the one the local Runtime started is named, with local.
    said.clear()
    assert await asyncio.to_thread(
        warn_switched_executor, options, "slurm", said.append, layout) == 1
    assert said[0].startswith("warning: 1 Run(s) on lab-slurm are still active on Attempts the "
                              "local executor's Runtime started. The slurm Runtime")
    assert "--executor local" in said[0]
