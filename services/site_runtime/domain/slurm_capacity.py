"""Whether a compute request can ever fit the compute partition (docs/site-runtime.md,
Slurm executor: requests that never fit).

``start`` asks :func:`never_fits` before stage-in is submitted, with the partition's
and its nodes' records from slurmrestd (cached briefly). A request that no set of
the partition's nodes could ever hold — more nodes than the partition has or allows
per job, more CPUs, memory or GPUs per node than enough of its nodes have — is
refused with a member-facing message naming the largest request that fits. Busy
nodes do not count: only what the nodes *are*, never what is free now. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEVER_FITS = "slurm-request-never-fits"


@dataclass(frozen=True)
class NodeRecord:
    """One node as configured: CPUs, memory (MiB) and GRES counts (``gpu:a100`` → 2,
    and ``gpu`` → the total of every type)."""

    name: str
    cpus: int
    memory_mib: int
    gres: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionRecord:
    """A partition's limits (None: unlimited) and its nodes."""

    name: str
    nodes: Sequence[NodeRecord]
    max_nodes_per_job: int | None = None
    max_cpus_per_node: int | None = None
    max_memory_per_node_mib: int | None = None


def parse_gres(text: str | None) -> dict[str, int]:
    """Counts of a node's ``gres`` string (``gpu:a100:2(S:0-1),gpu:1``): per
    ``name:type`` and per ``name``; unreadable entries count nothing."""
    counts: dict[str, int] = {}
    for entry in (text or "").split(","):
        entry = entry.split("(", 1)[0].strip()
        parts = entry.split(":")
        if len(parts) < 2 or not parts[-1].isdigit():
            continue
        count = int(parts[-1])
        name = parts[0]
        counts[name] = counts.get(name, 0) + count
        if len(parts) == 3:
            counts[f"{name}:{parts[1]}"] = counts.get(f"{name}:{parts[1]}", 0) + count
    return counts


def _gres_wanted(tres_per_node: str | None) -> tuple[str, int] | None:
    """``("gpu:a100", 2)`` of ``gres:gpu:a100:2`` (None without a GRES request)."""
    if not tres_per_node:
        return None
    parts = tres_per_node.removeprefix("gres:").split(":")
    if len(parts) < 2 or not parts[-1].isdigit():
        return None
    return ":".join(parts[:-1]), int(parts[-1])


def never_fits(compute: Mapping[str, Any], partition: PartitionRecord) -> str | None:
    """The member-facing reason ``compute`` (the saved compute request: ``cpus``,
    ``memory_mib``, ``nodes``, ``tres_per_node``) can never run on ``partition``;
    None when some set of its nodes could hold it."""
    nodes_wanted = int(compute.get("nodes") or 1)
    cpus = int(compute.get("cpus") or 1)
    memory = int(compute.get("memory_mib") or 0)
    gres = _gres_wanted(compute.get("tres_per_node"))
    name = partition.name
    if partition.max_nodes_per_job is not None and nodes_wanted > partition.max_nodes_per_job:
        return (
            f"the request asks for {nodes_wanted} nodes; partition {name} allows at most "
            f"{partition.max_nodes_per_job} per job"
        )
    if nodes_wanted > len(partition.nodes):
        return (
            f"the request asks for {nodes_wanted} nodes; partition {name} has "
            f"{len(partition.nodes)}"
        )
    if partition.max_cpus_per_node is not None and cpus > partition.max_cpus_per_node:
        return (
            f"the request asks for {cpus} CPUs per node; partition {name} allows at most "
            f"{partition.max_cpus_per_node}"
        )
    limit = partition.max_memory_per_node_mib
    if limit is not None and memory > limit:
        return (
            f"the request asks for {memory} MiB per node; partition {name} allows at most "
            f"{limit} MiB"
        )
    checks = [
        ("CPUs", cpus, lambda n: n.cpus),
        ("MiB of memory", memory, lambda n: n.memory_mib),
    ]
    if gres is not None:
        checks.append((f"{gres[0]} GPUs", gres[1], lambda n: n.gres.get(gres[0], 0)))
    for what, wanted, has in checks:
        enough = sorted((has(n) for n in partition.nodes), reverse=True)
        if len([h for h in enough if h >= wanted]) < nodes_wanted:
            best = enough[nodes_wanted - 1] if len(enough) >= nodes_wanted else 0
            return (
                f"the request asks for {wanted} {what} on each of {nodes_wanted} node(s); "
                f"partition {name} has at most {best}"
            )
    fitting = [
        n
        for n in partition.nodes
        if n.cpus >= cpus
        and n.memory_mib >= memory
        and (gres is None or n.gres.get(gres[0], 0) >= gres[1])
    ]
    if len(fitting) < nodes_wanted:
        return (
            f"no {nodes_wanted} node(s) of partition {name} have {cpus} CPUs, {memory} MiB"
            + (f" and {gres[1]} {gres[0]} GPUs" if gres else "")
            + " each"
        )
    return None
