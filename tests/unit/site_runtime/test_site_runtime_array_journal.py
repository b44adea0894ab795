"""Array groups in the slurm journal (adaptors/slurm/array_journal.py): the mapping is
saved once, a conflicting group is refused, stage states survive a reopen."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.array_journal import ArrayJournal, GroupConflict
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.domain.slurm_arrays import TaskMapping


def test_a_group_is_saved_once_with_three_prepared_stages(tmp_path):
    journal = SlurmJournal(tmp_path / "jobs.sqlite")
    arrays = ArrayJournal(journal)
    mapping = TaskMapping(("a-2", "a-1", "a-3"))
    saved = arrays.create_group("g-1", mapping, 2)
    assert saved.mapping == mapping and saved.max_active == 2
    assert {s: r.state for s, r in arrays.stages("g-1").items()} == {
        "stage-in": "prepared",
        "compute": "prepared",
        "stage-out": "prepared",
    }
    arrays.update_stage("g-1", "stage-in", state="held", job_id="41", request={"job": {}})
    # the same group again changes nothing
    assert arrays.create_group("g-1", mapping, 2).created_at == saved.created_at
    assert arrays.stages("g-1")["stage-in"].state == "held"
    with pytest.raises(GroupConflict):
        arrays.create_group("g-1", TaskMapping(("a-1", "a-2", "a-3")), 2)
    with pytest.raises(GroupConflict):
        arrays.create_group("g-1", mapping, None)
    journal.close()

    reopened = ArrayJournal(SlurmJournal(tmp_path / "jobs.sqlite"))
    row = reopened.stages("g-1")["stage-in"]
    assert (row.state, row.job_id, row.request) == ("held", "41", {"job": {}})
    assert reopened.group("g-1").mapping.index_of("a-3") == 2
    assert reopened.group("g-2") is None


def test_only_known_columns_are_updated(tmp_path):
    arrays = ArrayJournal(SlurmJournal(tmp_path / "jobs.sqlite"))
    arrays.create_group("g-1", TaskMapping(("a-1",)), None)
    with pytest.raises(ValueError):
        arrays.update_stage("g-1", "compute", state="held", updated_at=0)
