"""Requests that can never fit the compute partition (domain/slurm_capacity.py), read
from partition and node records recorded from the lab's slurmrestd 22.05.8
(``fixtures/v0.0.38_partition_compute.json``, ``fixtures/v0.0.38_nodes.json``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from site_runtime.adaptors.slurm.capacity import parse_partition
from site_runtime.adaptors.slurm.rest import SlurmUncertain
from site_runtime.domain.slurm_capacity import NodeRecord, PartitionRecord, never_fits, parse_gres

FIXTURES = Path(__file__).parent / "fixtures"


def lab_partition() -> PartitionRecord:
    body = json.loads((FIXTURES / "v0.0.38_partition_compute.json").read_text())
    nodes = json.loads((FIXTURES / "v0.0.38_nodes.json").read_text())
    return parse_partition(body, nodes, "compute")


def test_the_recorded_lab_partition_is_read():
    p = lab_partition()
    assert [(n.name, n.cpus, n.memory_mib) for n in p.nodes] == [("vm", 8, 16384)]
    assert (p.max_nodes_per_job, p.max_cpus_per_node, p.max_memory_per_node_mib) == (
        None,
        None,
        None,
    )


def test_an_unknown_shape_is_uncertain_never_a_refusal():
    with pytest.raises(SlurmUncertain):
        parse_partition(
            {"partitions": [{"name": "compute"}]},
            {"nodes": [{"name": "x", "partitions": ["compute"]}]},
            "compute",
        )
    with pytest.raises(SlurmUncertain):
        parse_partition({"partitions": []}, {"nodes": []}, "compute")


GPU = PartitionRecord(
    name="gpu",
    nodes=(
        NodeRecord("g1", 32, 256_000, parse_gres("gpu:a100:4(S:0-1)")),
        NodeRecord("g2", 16, 128_000, parse_gres("gpu:a100:2,gpu:v100:1")),
        NodeRecord("c1", 64, 512_000, {}),
    ),
    max_nodes_per_job=2,
    max_memory_per_node_mib=300_000,
)

# (case, partition, request, fragment of the message or None when it fits)
CASES = [
    ("fits the lab", lab_partition(), {"cpus": 8, "memory_mib": 16384, "nodes": 1}, None),
    ("too many CPUs on the lab", lab_partition(), {"cpus": 9, "nodes": 1},
     "CPUs does not fit: the request asks for 9 CPUs on each of 1 node(s); partition compute's "
     "nodes have at most 8 CPUs (lower resources.cpus to at most 8)"),
    ("too much memory on the lab", lab_partition(), {"cpus": 1, "memory_mib": 16385},
     "memory does not fit: the request asks for 16385 MiB on each of 1 node(s); partition "
     "compute's nodes have at most 16384 MiB (lower resources.memoryMiB to at most 16384)"),
    ("more nodes than the lab has", lab_partition(), {"nodes": 2},
     "nodes does not fit: the request asks for 2 nodes; partition compute has 1 "
     "(lower resources.nodes to at most 1)"),
    ("more nodes than allowed per job", GPU, {"nodes": 3}, "allows at most 2 per job (lower resources.nodes to at most 2)"),
    ("above the per-node memory limit", GPU, {"memory_mib": 400_000},
     "allows at most 300000 MiB per node (lower resources.memoryMiB to at most 300000)"),
    ("GPUs on one node", GPU, {"cpus": 8, "tres_per_node": "gres:gpu:a100:4"}, None),
    ("GPUs no node has", GPU, {"tres_per_node": "gres:gpu:a100:8"},
     "GPUs (gpu:a100) does not fit: the request asks for 8 gpu:a100 GPUs on each of 1 node(s); "
     "partition gpu's nodes have at most 4 gpu:a100 GPUs (lower resources.gpus to at most 4)"),
    ("GPUs on two nodes", GPU, {"nodes": 2, "tres_per_node": "gres:gpu:a100:2"}, None),
    (
        "GPUs of a type on too few nodes",
        GPU,
        {"nodes": 2, "tres_per_node": "gres:gpu:v100:1"},
        "have at most 0 gpu:v100 GPUs on 2 of them (drop resources.gpus or use another Site)",
    ),
    (
        "each limit fits alone, no node has all",
        GPU,
        {"cpus": 64, "tres_per_node": "gres:gpu:1"},
        "no 1 node(s) of partition gpu have 64 CPUs, 0 MiB and 1 gpu GPUs each",
    ),
]


@pytest.mark.parametrize(
    ("partition", "request_", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_never_fits_table(partition, request_, fragment):
    reason = never_fits(request_, partition)
    if fragment is None:
        assert reason is None
    else:
        assert reason is not None and fragment in reason, reason


def test_gres_counts_per_type_and_in_total():
    assert parse_gres("gpu:a100:2(S:0),gpu:v100:1,bogus") == {
        "gpu": 3,
        "gpu:a100": 2,
        "gpu:v100": 1,
    }
    assert parse_gres("") == {} and parse_gres(None) == {}
