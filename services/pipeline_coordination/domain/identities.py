"""Stable identities of a Pipeline's outgoing requests (seed 004 §8B, §8C).

Every request the coordinator sends is named by a deterministic ``command_id``
derived from (Pipeline, step, launch attempt, purpose). A coordinator that dies
after sending and before saving the reply re-sends exactly the same command;
the owner answers it from its saved outcome, so a restart never launches twice.
"""

from __future__ import annotations

import uuid

# A fixed namespace: the ids must be the same in every process and release.
_NAMESPACE = uuid.UUID("6f0b7a52-3f1e-5c8e-9d55-8a1c0e4b7d21")


def command_id(pipeline_id: str, purpose: str, step: int = 0, attempt: int = 1, round_: int = 0) -> str:
    """The UUIDv5 command_id of one request.

    ``purpose`` is ``prepare-branch``, ``pin``, ``launch`` or ``cancel``; ``step``
    is the 1-based step index (0 for Pipeline-wide requests); ``attempt`` the
    step's launch attempt (1). ``round_`` grows only after an owner *replied*
    "try again later" (a temporary rejection is saved under its command_id, so
    re-sending that id would replay it forever); a restart or a timeout keeps
    the round, so the very same request is re-sent. A launch stays one Run
    whatever the round: Execution Core also deduplicates by the launch key.
    """
    name = f"pipeline:{pipeline_id}:step:{step}:attempt:{attempt}:{purpose}"
    if round_:
        name += f":round:{round_}"
    return str(uuid.uuid5(_NAMESPACE, name))


def launch_key(pipeline_id: str, step: int, attempt: int = 1) -> str:
    """Execution Core's launch key of a step: ``pipeline:<id>:step:<n>:<attempt>`` (≤ 200 chars)."""
    return f"pipeline:{pipeline_id}:step:{step}:{attempt}"


def parse_launch_key(key: str) -> tuple[str, int, int] | None:
    """(pipeline_id, step, attempt) of a launch key made by :func:`launch_key`, else None."""
    parts = key.split(":")
    if len(parts) != 5 or parts[0] != "pipeline" or parts[2] != "step":
        return None
    try:
        return parts[1], int(parts[3]), int(parts[4])
    except ValueError:
        return None


def item_key(pipeline_id: str, step: int, attempt: int, item: int) -> str:
    """The launch key of a collection child: ``pipeline:<id>:step:<n>:<attempt>:item:<k>``."""
    return f"{launch_key(pipeline_id, step, attempt)}:item:{item}"


def parse_item_key(key: str) -> tuple[str, int, int, int] | None:
    """(pipeline_id, step, attempt, item) of a key made by :func:`item_key`, else None."""
    parts = key.split(":")
    if len(parts) != 7 or parts[0] != "pipeline" or parts[2] != "step" or parts[5] != "item":
        return None
    try:
        return parts[1], int(parts[3]), int(parts[4]), int(parts[6])
    except ValueError:
        return None


def collection_id(pipeline_id: str, step: int) -> str:
    """The stable id of a Pipeline step's collection (UUIDv5 of the Pipeline and step)."""
    return str(uuid.uuid5(_NAMESPACE, f"collection:{pipeline_id}:{step}"))


def labels(pipeline_id: str, step: int, action: str) -> dict[str, str]:
    """Labels copied by Execution Core onto a step's Run and its events."""
    return {"pipeline_id": pipeline_id, "pipeline_step": str(step), "pipeline_action": action[:200]}
