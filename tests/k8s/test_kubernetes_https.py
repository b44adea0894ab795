"""A k8s-job from an HTTPS repository: the stage grants reach the helper Pods through
Secrets the Runtime may delete but never read, and cleanup still ends with every
journal row ``deleted`` and nothing left in the namespace — also after kill -9 of the
Runtime between a Secret's intent and its create, or after its create."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.k8s.git_https import FETCH_AND_PUSH, FETCH_ONLY, GitHttpsServer
from tests.k8s.lab import (
    NAMESPACE,
    REPOS,
    Driver,
    RecordingGrants,
    git_out,
    make_executor,
    make_repository,
    objects_of,
    observe_until,
    payload,
)
from tests.k8s.test_kubernetes_recovery import exactly_one_of_each, run_in_process, wait_phase

pytestmark = pytest.mark.k8s
TERMINAL = {"succeeded", "failed", "cancelled"}
ROLES = {"workspace", "stage-in-secret", "stage-in", "compute", "stage-out-secret", "stage-out"}


@pytest.fixture
def git_server(k8s_lab):
    with GitHttpsServer(REPOS) as server:
        yield server


def https_repository(server: GitHttpsServer) -> tuple[str, str, object]:
    _, commit, bare = make_repository()
    return server.url(bare), commit, bare


async def clean_up(executor, attempt_id: str, timeout: float = 90.0) -> None:
    """Supervision passes until the Attempt has no cleanup pending (or ``timeout``)."""
    end = time.monotonic() + timeout
    while attempt_id in executor.journal.cleanup_pending() and time.monotonic() < end:
        await executor.tick()
        await asyncio.sleep(0.5)


def assert_cleaned_up(executor, attempt_id: str) -> None:
    rows = executor.journal.objects(attempt_id)
    assert {(o.role, o.state) for o in rows} == {(r, "deleted") for r in ROLES}, rows
    assert all(o.grant_released for o in rows if o.grant_id), rows
    assert attempt_id not in executor.journal.cleanup_pending()
    left = objects_of(attempt_id, namespace=NAMESPACE)  # as the lab administrator
    assert all(items == [] for items in left.values()), left


async def test_an_https_attempt_runs_and_its_cleanup_finishes(git_server, tmp_path):
    grants = RecordingGrants()
    executor = make_executor(
        tmp_path / "state", grants=grants, REPOSITORY_CA_FILE=git_server.ca_file
    )
    try:
        url, commit, bare = https_repository(git_server)
        drv = Driver(executor.site.site_id)
        body = payload(url, commit, ["/bin/sh", "-c", "echo over-https > out.txt"])
        assert (await executor.prepare(drv.command("prepare", body))).outcome == "succeeded"
        assert (await executor.start(drv.command("start"))).outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL, timeout=180)
        assert final.observation["phase"] == "succeeded", final.observation
        pushed = final.observation["output_commit"]
        assert git_out("-C", str(bare), "rev-parse", "refs/heads/main") == pushed
        assert (FETCH_ONLY, "fetch") in git_server.seen
        assert (FETCH_AND_PUSH, "push") in git_server.seen
        await clean_up(executor, drv.attempt_id)
        assert_cleaned_up(executor, drv.attempt_id)
        assert sorted(grants.released) == sorted(g.grant_id for g in grants.issued)
        assert len(grants.issued) == 2
    finally:
        await executor.close()


@pytest.mark.parametrize(
    ("kind", "fault"),
    [
        ("prepare", "intent:stage-in-secret"),  # grant issued, the Secret never sent
        ("prepare", "created:stage-in-secret"),  # Secret created, its answer lost
        ("observe", "intent:stage-out-secret"),
        ("observe", "created:stage-out-secret"),
    ],
)
async def test_kill_9_at_a_grant_secret_then_restart_recovers_and_cleans_up(
    git_server, tmp_path, kind, fault
):
    state = tmp_path / "state"
    settings = {"REPOSITORY_CA_FILE": str(git_server.ca_file)}
    executor = make_executor(state, KUBERNETES_RETENTION_SECONDS=3600, **settings)
    site = executor.site.site_id
    drv = Driver(site)
    try:
        url, commit, bare = https_repository(git_server)
        prepare = drv.command("prepare", payload(url, commit, ["/bin/sh", "-c", "echo r > r.txt"]))
        start = drv.command("start")
        if kind == "prepare":
            crashed = run_in_process(state, site, prepare, fault, settings)
        else:
            assert (await executor.prepare(prepare)).outcome == "succeeded"
            wait_phase(drv.attempt_id, "Pod", "stage-in", {"Succeeded"}, timeout=120)
            assert (await executor.start(start)).outcome == "succeeded"
            wait_phase(drv.attempt_id, "Job", "compute", {"Complete"}, timeout=120)
            crashed = run_in_process(state, site, drv.command("observe"), fault, settings)
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        await executor.close()
        grants = RecordingGrants()
        executor = make_executor(state, grants=grants, site_id=site, **settings)
        role = fault.split(":", 1)[1]
        stale = executor.journal.object(drv.attempt_id, role)
        assert stale is not None and stale.state == "intent" and stale.grant_id, stale
        if kind == "prepare":
            assert (await executor.recover(prepare)).outcome == "succeeded"
            assert (await executor.start(start)).outcome == "succeeded"
        final = await observe_until(executor, drv, TERMINAL, timeout=180)
        assert final.observation["phase"] == "succeeded", final.observation
        exactly_one_of_each(executor, drv.attempt_id)
        pushed = final.observation["output_commit"]
        assert git_out("-C", str(bare), "rev-parse", f"{pushed}^") == commit  # pushed once
        assert stale.grant_id in grants.released  # the dead process's grant is revoked
        await clean_up(executor, drv.attempt_id)
        assert_cleaned_up(executor, drv.attempt_id)
    finally:
        await executor.close()
