"""Settings of the local executor (docs/site-runtime.md, Local executor)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from site_runtime.domain.local_batch import Machine


@dataclass(frozen=True)
class LocalSettings:
    """Settings of the local executor (units: seconds).

    ``grace_seconds``: TERM → KILL delay for wall time and cancellation;
    ``staging_seconds``: time limit of stage-in and stage-out each;
    ``max_wall_seconds``: the Site's compute limit (None: no limit);
    ``max_active``: Attempts in stage-in/compute/stage-out at once; a start beyond it is
    accepted and the Attempt ``waiting`` until a slot frees (first come, first served);
    ``launch_timeout_seconds``: a launched runner that has not claimed its stage after
    this long is launched once more (the claim file prevents a second effect);
    ``release_delay_seconds``: an ended stage's repository grant is released within
    this long, together with the others ended meanwhile (:mod:`.grant_releases`);
    ``notice_timeout_seconds``: bound of one native-end notice to the edge (ADR 0016);
    ``machine``: the host's CPUs and physical memory — a request above them is refused
    ``local-request-never-fits`` (None: not checked).
    """

    workspace_root: Path
    grace_seconds: float = 10.0
    staging_seconds: int = 600
    max_wall_seconds: int | None = None
    max_active: int = 4
    repository_ca_file: Path | None = None
    author_name: str = "Metallo"
    author_email: str = "metallo@localhost"
    poll_seconds: float = 0.5
    launch_timeout_seconds: float = 10.0
    release_delay_seconds: float = 1.0
    base_path: str = "/usr/local/bin:/usr/bin:/bin"
    notice_timeout_seconds: float = 5.0
    machine: Machine | None = None


def this_machine() -> Machine | None:
    """This host's CPUs (``os.cpu_count``) and physical memory, or None when unknown."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    cpus = os.cpu_count()
    return Machine(cpus=cpus, memory_mib=memory // (1024 * 1024)) if cpus and memory > 0 else None
