"""The Runtime's slurmrestd requests are measured (metallo_native_request_seconds,
target slurmrestd) on the real Slurm lab, beside the Site edge client's."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.adaptors.native_metrics import measure_native_requests

pytestmark = pytest.mark.slurm


def count(target: str, method: str) -> float:
    return REGISTRY.get_sample_value("metallo_native_request_seconds_count",
                                     {"target": target, "method": method}) or 0.0


async def test_slurmrestd_requests_are_counted(executor, tokens):
    edge = EdgeClient(EdgeSettings(base_url="https://127.0.0.1:9", credential="psb_unused"))
    try:
        measure_native_requests(edge, executor)
        before = count("slurmrestd", "GET")
        credential = await tokens.member_token("att-metrics")
        await executor.rest.list_jobs(credential=credential, user="alice")
        assert count("slurmrestd", "GET") == before + 1
    finally:
        await edge.close()
