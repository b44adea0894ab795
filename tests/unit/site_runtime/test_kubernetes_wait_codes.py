"""The kubernetes executor emits only catalogued native-wait codes (one list:
``domain/native_waits.py``), each with a member-facing text in ``metallo.waiting``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from metallo.waiting import NATIVE_WAIT_TEXTS, native_wait_text
from site_runtime.domain import kubernetes_status
from site_runtime.domain.kubernetes_status import job_facts, pod_facts
from site_runtime.domain.native_waits import KUBERNETES_REASONS, NATIVE_WAIT_CODES

JOB = {"metadata": {"name": "j"}, "status": {"active": 1}}


def _pods(reason: str) -> list[dict]:
    """Every Pod shape in which the executor reads ``reason``: a ``PodScheduled``
    condition, a waiting init container, a waiting main container."""
    waiting = [{"name": "c", "state": {"waiting": {"reason": reason, "message": "provider text"}}}]
    return [
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": reason,
                        "message": "0/1 nodes",
                    }
                ],
            }
        },
        {"status": {"phase": "Pending", "initContainerStatuses": waiting}},
        {"status": {"phase": "Pending", "containerStatuses": waiting}},
        {"status": {"phase": "Running", "containerStatuses": waiting}},
    ]


@pytest.mark.parametrize("reason", sorted(KUBERNETES_REASONS))
def test_every_reason_the_executor_reads_gives_a_catalogued_code_with_a_text(reason):
    emitted = set()
    for pod in _pods(reason):
        for state in (pod_facts(pod), job_facts(JOB, [pod])):
            if state.wait_code is not None:
                emitted.add(state.wait_code)
    assert emitted == {KUBERNETES_REASONS[reason]}
    for code in emitted:
        assert code in NATIVE_WAIT_CODES and code in NATIVE_WAIT_TEXTS
        assert native_wait_text(code) == f"pending: {NATIVE_WAIT_TEXTS[code]}"


def test_uncatalogued_reasons_give_no_code():
    for reason in ("ContainerCreating", "PodInitializing", "Insufficient cpu"):
        for pod in _pods(reason):
            assert pod_facts(pod).wait_code is None and job_facts(JOB, [pod]).wait_code is None


def test_the_executor_names_no_wait_code_of_its_own():
    """Any ``kubernetes-…`` literal in the status rules must be a catalogue code."""
    tree = ast.parse(Path(kubernetes_status.__file__).read_text(encoding="utf-8"))
    literals = {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value.startswith("kubernetes-")
    }
    assert literals <= NATIVE_WAIT_CODES, literals - NATIVE_WAIT_CODES
