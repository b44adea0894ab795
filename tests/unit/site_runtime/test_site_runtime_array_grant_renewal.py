"""Renewing a not-yet-started array task's repository grant
(``adaptors/slurm/array_grant_renewal.py``) over a real ``jobs.sqlite`` and a real
material file; the edge and slurmrestd are recording fakes, the clock is handed in."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from site_runtime.adaptors.slurm.array_grant_renewal import ArrayGrantRenewal
from site_runtime.adaptors.slurm.array_material import ArrayMaterial
from site_runtime.adaptors.slurm.grants import StageGrants
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.site_access import RepositoryGrant
from site_runtime.domain.grant_renewal import parse_material
from site_runtime.domain.slurm_array_start import material_bytes
from site_runtime.domain.slurm_stages import STAGES

T0 = 1_800_000_000.0
LIFETIME = 7200.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Edge:
    """Grants living LIFETIME from the clock; ``fail`` makes the next issue raise."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.issued: list[RepositoryGrant] = []
        self.released: list[str] = []
        self.fail: Exception | None = None

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        if self.fail is not None:
            raise self.fail
        n = len(self.issued)
        expires = datetime.fromtimestamp(self.clock() + LIFETIME, UTC).isoformat()
        grant = RepositoryGrant(f"g-{n}", f"grant-{direction}", f"prt_secret{n}", "u", expires)
        self.issued.append(grant)
        return grant

    async def release(self, grant_id: str) -> None:
        self.released.append(grant_id)


class Rest:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def cancel(self, job_id: str, *, credential, user: str) -> str:
        self.cancelled.append(job_id)
        return "accepted"


@pytest.fixture
def world(tmp_path):
    clock = Clock()
    journal = SlurmJournal(tmp_path / "jobs.sqlite")
    edge = Edge(clock)
    material = ArrayMaterial(journal, StageGrants(journal, edge), clock)
    rest = Rest()
    renewal = ArrayGrantRenewal(material, edge, rest, clock, 1800)
    record = {
        "workspace_root": str(tmp_path),
        "prefix": "metallo",
        "binding": {"user": "alice", "account": "demo"},
        "array": {"group_id": "g1", "index": 2},
    }
    journal.create_attempt(
        attempt_id="a-2", run_id="r-2", attempt_number=1, site_id="s", record=record, stages=STAGES
    )
    folder = tmp_path / "metallo-g1.material"
    folder.mkdir(mode=0o700)
    for stage, job in zip(STAGES, ("7_2", "8_2", "9_2"), strict=True):
        journal.update_stage(
            "a-2", stage, state="submitted", job_id=job, native={"state": "PENDING"}
        )
    for n, stage in enumerate(("stage-in", "stage-out")):
        journal.update_stage("a-2", stage, grant_state="issued", grant_id=f"first-{n}")
        material.book.issued("a-2", stage, f"first-{n}", T0, T0 + LIFETIME)
        env = {
            "METALLO_PARAM_ITEM": "2",
            "METALLO_GIT_USERNAME": "u0",
            "METALLO_GIT_PASSWORD": "prt_old",
        }
        (folder / f"{stage}.2").write_bytes(material_bytes(env))
        (folder / f"{stage}.2").chmod(0o600)

    return SimpleNamespace(
        clock=clock, journal=journal, edge=edge, rest=rest, renewal=renewal, folder=folder
    )


async def renew(w):
    att = w.journal.attempt("a-2")
    return await w.renewal.renew(att, w.journal.stages("a-2"), credential=None)


async def test_a_grant_is_renewed_once_per_margin_and_the_file_replaced_in_place(world):
    w = world
    w.clock.now = T0 + LIFETIME - 1801
    assert await renew(w) is None and w.edge.issued == []  # not due yet
    w.clock.now = T0 + LIFETIME - 1700
    assert await renew(w) is None
    assert [g.username for g in w.edge.issued] == ["grant-stage-in", "grant-stage-out"]
    for n, stage in enumerate(("stage-in", "stage-out")):
        path = w.folder / f"{stage}.2"
        entries = parse_material(path.read_bytes())
        assert entries["METALLO_GIT_PASSWORD"] == f"prt_secret{n}"
        assert entries["METALLO_PARAM_ITEM"] == "2"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert w.journal.stages("a-2")[stage].grant_id == f"g-{n}"
        # The predecessor is kept for release, never revoked while the task may run.
        assert [g.grant_id for g in w.renewal.book.superseded("a-2", stage)] == [f"first-{n}"]
    assert w.edge.released == []
    assert not list(w.folder.glob(".*.tmp"))
    # Observed again and again: nothing more until the new grants are due.
    for step in range(0, 3600, 30):
        w.clock.now = T0 + LIFETIME - 1700 + step
        await renew(w)
    assert len(w.edge.issued) == 2
    journal = w.journal.path.read_bytes() + (w.journal.path.parent / "jobs.sqlite-wal").read_bytes()
    assert b"prt_secret" not in journal and b"prt_old" not in journal


async def test_a_started_task_is_never_renewed(world):
    w = world
    w.clock.now = T0 + LIFETIME - 60
    (w.folder / "stage-in.2").unlink()  # the loader read and removed it
    w.journal.update_stage("a-2", "stage-out", native={"state": "RUNNING"})
    assert await renew(w) is None
    assert w.edge.issued == []


async def test_an_edge_outage_leaves_the_file_and_is_tried_again_at_the_next_observe(world):
    w = world
    w.clock.now = T0 + LIFETIME - 60
    w.edge.fail = EdgeUnavailable("down")
    before = (w.folder / "stage-out.2").read_bytes()
    assert await renew(w) is None
    assert (w.folder / "stage-out.2").read_bytes() == before
    assert w.journal.stages("a-2")["stage-out"].grant_id == "first-1"
    w.edge.fail = EdgeRefused(429, "rate-limited", "later")
    assert await renew(w) is None and w.rest.cancelled == []
    w.edge.fail = None
    assert await renew(w) is None
    assert len(w.edge.issued) == 2


async def test_a_renewal_refused_for_good_fails_only_this_child_with_the_edges_code(world):
    w = world
    w.clock.now = T0 + LIFETIME - 60
    w.edge.fail = EdgeRefused(409, "repository-not-served", "gone")
    verdict = await renew(w)
    assert verdict is not None and verdict.phase == "failed"
    assert verdict.failure["code"] == "repository-not-served"
    assert verdict.failure["stage"] == "stage-in"
    assert w.rest.cancelled == ["9_2", "8_2", "7_2"]  # newest stage first, own tasks only


async def test_superseded_grants_are_released_at_the_end_unless_already_expired(world):
    w = world
    w.clock.now = T0 + LIFETIME - 60
    await renew(w)
    w.clock.now = T0 + LIFETIME + 10  # the stage-in predecessor expires only now
    assert await w.renewal.release_superseded("a-2", "stage-in")
    assert w.edge.released == ["first-0"]
    w.clock.now = T0 + LIFETIME + 400  # long past: no call needed
    assert await w.renewal.release_superseded("a-2")
    assert w.edge.released == ["first-0"]
    assert w.renewal.book.superseded("a-2") == []
