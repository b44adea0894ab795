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


def _refusal(resource: str, asked: str, allowed: str, key: str, most: int | None) -> str:
    """The member-facing text: which resource does not fit, what was asked, what the
    partition allows, and which ``resources`` key of the action to lower."""
    lower = (f"lower resources.{key} to at most {most}" if most
             else f"drop resources.{key} or use another Site")
    return f"{resource} does not fit: the request asks for {asked}; {allowed} ({lower})"


def never_fits(compute: Mapping[str, Any], partition: PartitionRecord) -> str | None:
    """The member-facing reason ``compute`` (the saved compute request: ``cpus``,
    ``memory_mib``, ``nodes``, ``tres_per_node``) can never run on ``partition``, naming
    the resource, what the partition allows (with its unit) and the action's
    ``resources`` key to change; None when some set of its nodes could hold it."""
    nodes_wanted = int(compute.get("nodes") or 1)
    cpus = int(compute.get("cpus") or 1)
    memory = int(compute.get("memory_mib") or 0)
    gres = _gres_wanted(compute.get("tres_per_node"))
    name = partition.name
    if partition.max_nodes_per_job is not None and nodes_wanted > partition.max_nodes_per_job:
        most = partition.max_nodes_per_job
        return _refusal("nodes", f"{nodes_wanted} nodes",
                        f"partition {name} allows at most {most} per job", "nodes", most)
    if nodes_wanted > len(partition.nodes):
        most = len(partition.nodes)
        return _refusal("nodes", f"{nodes_wanted} nodes", f"partition {name} has {most}",
                        "nodes", most)
    if partition.max_cpus_per_node is not None and cpus > partition.max_cpus_per_node:
        most = partition.max_cpus_per_node
        return _refusal("CPUs", f"{cpus} CPUs per node",
                        f"partition {name} allows at most {most} CPUs per node", "cpus", most)
    limit = partition.max_memory_per_node_mib
    if limit is not None and memory > limit:
        return _refusal("memory", f"{memory} MiB per node",
                        f"partition {name} allows at most {limit} MiB per node", "memoryMiB",
                        limit)
    checks = [
        ("CPUs", "cpus", " CPUs", cpus, lambda n: n.cpus),
        ("memory", "memoryMiB", " MiB", memory, lambda n: n.memory_mib),
    ]
    if gres is not None:
        checks.append((f"GPUs ({gres[0]})", "gpus", f" {gres[0]} GPUs", gres[1],
                       lambda n: n.gres.get(gres[0], 0)))
    for resource, key, unit, wanted, has in checks:
        enough = sorted((has(n) for n in partition.nodes), reverse=True)
        if len([h for h in enough if h >= wanted]) < nodes_wanted:
            best = enough[nodes_wanted - 1] if len(enough) >= nodes_wanted else 0
            return _refusal(resource, f"{wanted}{unit} on each of {nodes_wanted} node(s)",
                            f"partition {name}'s nodes have at most {best}{unit}"
                            + (f" on {nodes_wanted} of them" if nodes_wanted > 1 else ""),
                            key, best)
    fitting = [
        n
        for n in partition.nodes
        if n.cpus >= cpus
        and n.memory_mib >= memory
        and (gres is None or n.gres.get(gres[0], 0) >= gres[1])
    ]
    if len(fitting) < nodes_wanted:
        together = f"{cpus} CPUs, {memory} MiB" + (f" and {gres[1]} {gres[0]} GPUs" if gres else "")
        return (
            f"CPUs, memory and GPUs together do not fit: no {nodes_wanted} node(s) of "
            f"partition {name} have {together} each, though each fits alone on some node "
            "(lower resources.cpus, memoryMiB or gpus)"
        )
    return None
