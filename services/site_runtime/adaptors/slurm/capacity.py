"""The compute partition's configured capacity from slurmrestd, cached briefly, and
the refusal of a request that can never fit it
(:mod:`site_runtime.domain.slurm_capacity`).

Two requests (the partition, then every node) at most once per ``cache_seconds``;
a record of an unexpected shape raises SlurmUncertain (the start is deferred, never
refused on a guess).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from metallo.identity.verify import MemberCredential
from site_runtime.adaptors.slurm.responses import number
from site_runtime.adaptors.slurm.rest import API, SlurmRest, SlurmUncertain
from site_runtime.domain.slurm_capacity import NodeRecord, PartitionRecord, parse_gres


def _limit(value: Any) -> int | None:
    """A partition limit: None for unlimited (-1, null, or the {"infinite": true} form)."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    found = number(value)
    return found if found is not None and found >= 0 else None


def parse_partition(body: Any, nodes_body: Any, name: str) -> PartitionRecord:
    """The partition ``name`` and its nodes from v0.0.38 ``partition`` and ``nodes``
    answers; SlurmUncertain for any other shape."""
    try:
        partition = next(p for p in body["partitions"] if p.get("name") == name)
        nodes = [
            NodeRecord(
                name=str(n["name"]),
                cpus=int(n["cpus"]),
                memory_mib=int(n["real_memory"]),
                gres=parse_gres(n.get("gres")),
            )
            for n in nodes_body["nodes"]
            if name in (n.get("partitions") or [])
        ]
        return PartitionRecord(
            name=name,
            nodes=tuple(nodes),
            max_nodes_per_job=_limit(partition.get("maximum_nodes_per_job")),
            max_cpus_per_node=_limit(partition.get("maximum_cpus_per_node")),
            max_memory_per_node_mib=_limit(partition.get("maximum_memory_per_node")),
        )
    except (KeyError, TypeError, ValueError, StopIteration):
        raise SlurmUncertain("the partition or node records have an unknown shape") from None


class PartitionCapacity:
    """The configured capacity of partitions, read through ``rest`` and cached."""

    def __init__(
        self,
        rest: SlurmRest,
        *,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rest = rest
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, PartitionRecord]] = {}

    async def partition(
        self, name: str, *, credential: MemberCredential, user: str
    ) -> PartitionRecord:
        """The partition's record (cached for ``cache_seconds``)."""
        cached = self._cache.get(name)
        if cached is not None and self.clock() - cached[0] <= self.cache_seconds:
            return cached[1]
        body = await self.rest.read(
            f"/slurm/{API}/partition/{name}", credential=credential, user=user
        )
        nodes = await self.rest.read(f"/slurm/{API}/nodes", credential=credential, user=user)
        record = parse_partition(body, nodes, name)
        self._cache[name] = (self.clock(), record)
        return record
