"""`metallo dev down` says how many Runs are still active before it stops the stack
(a Run's stage-out would find the lab Git server gone). It asks Execution Core
(``CountActiveRuns``, as the dev stack's operator), never its database."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text

from execution_core.adaptors.governance_authority import GovernanceAuthority
from execution_core.adaptors.service import ExecutionCore
from metallo.devstack.components import Options
from metallo.devstack.control import warn_active_runs, warn_switched_executor
from metallo.governance import GovernanceFile
from metallo.persistence.engine import create_engine
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
                            parts=frozenset({"server"}))
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
                " launch_command_id, phase, next_wake_at, site_id)"
                " VALUES (:r, 'demo', 'w', 1, 'm', :c, :p, now() + interval '1 hour', :s)"),
                {"r": f"r{n}", "c": f"c{n}", "p": phase,
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


async def test_a_switched_executor_names_the_sites_active_runs_and_the_way_back(
    core, bus_url, namespace
):
    # Runs placed on the dev Site when the stack ran Slurm: the local Runtime does not
    # know their Attempts. A Run on the Kubernetes lab's Site is not counted.
    await _insert_runs(core, ["running", "running", "cancelling", "terminal"],
                       ["lab-slurm", "lab-k8s", "lab-slurm", "lab-slurm"])
    options = Options(executor="local", amqp_url=bus_url("go_api"), topology_prefix=namespace)
    said: list[str] = []
    assert await asyncio.to_thread(
        warn_switched_executor, options, "slurm", "local", said.append) == 2
    assert said[0].startswith("warning: 2 Run(s) on lab-slurm are still active")
    assert "attempt-unknown-at-site" in said[0] and "--executor slurm" in said[0]
