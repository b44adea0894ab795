"""The Slurm executor reports the native state of the chain's current job (stage-in,
compute, stage-out are submitted together; the later ones wait on dependencies)."""

from __future__ import annotations

from types import SimpleNamespace

from site_runtime.adaptors.slurm_chain_base import ChainBase


def _state(**stages) -> str | None:
    rows = {
        name: SimpleNamespace(job_id=job_id, native=native)
        for name, (job_id, native) in {
            "stage-in": stages.get("stage_in", (None, None)),
            "compute": stages.get("compute", (None, None)),
            "stage-out": stages.get("stage_out", (None, None)),
        }.items()
    }
    chain = SimpleNamespace(journal=SimpleNamespace(stages=lambda attempt_id: rows))
    return ChainBase._native_state(chain, "att-1")


def test_the_current_job_speaks_for_the_chain():
    done = {"state": "COMPLETED", "terminal": True}
    running = {"state": "RUNNING", "terminal": False}
    assert _state() is None
    assert _state(stage_in=("1", None), compute=("2", None), stage_out=("3", None)) == "PENDING"
    assert _state(stage_in=("1", running), compute=("2", None), stage_out=("3", None)) == "RUNNING"
    # compute runs while stage-out waits on it: the Run is RUNNING, not PENDING
    assert _state(stage_in=("1", done), compute=("2", running), stage_out=("3", None)) == "RUNNING"
    assert _state(stage_in=("1", done), compute=("2", done), stage_out=("3", None)) == "PENDING"
    assert _state(stage_in=("1", done), compute=("2", done), stage_out=("3", done)) == "COMPLETED"
    failed = {"state": "FAILED", "terminal": True}
    assert _state(stage_in=("1", done), compute=("2", failed)) == "FAILED"
