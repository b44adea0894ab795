"""The normalised Workload specification and its digest (seed 004, 2D and "Pinned Run inputs").

``normalise`` turns one validated actions.yaml action into the specification a
revision saves: every default filled in, one command form, and the action's
repository pinned to the commit actions.yaml was read from. The digest is the
SHA-256 of its canonical JSON, so the same action at the same commit always has
the same digest (reuse) and any change, including a new commit, a new one
(revise). Shape: docs/actions.md, "The normalised specification".
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from workload_portfolio.domain.action_types import action_type

SPEC_VERSION = 1
DEFAULT_CPUS = 1
DEFAULT_MEMORY_MIB = 1024
DEFAULT_WALL_TIME_SECONDS = 3600
DEFAULT_SERVICE_PORT = 8080


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 text kept (not \\u-escaped).

    Only str, int, bool, None, list and dict occur in a specification (no
    floats), so the text is stable across Python versions.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_digest(spec: dict) -> str:
    """``"sha256:" + hex`` of the canonical JSON's UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(canonical_json(spec).encode("utf-8")).hexdigest()


def normalise_command(command: Any) -> dict:
    """``[..]`` or ``{argv: [..]}`` → ``{"argv": [..]}``; ``{shell: s}`` → ``{"shell": s}``."""
    if isinstance(command, list):
        return {"argv": list(command)}
    if "argv" in command:
        return {"argv": list(command["argv"])}
    return {"shell": command["shell"]}


def normalise(name: str, action: dict, *, repository_url: str, commit: str) -> dict:
    """The normalised specification of one validated action.

    name: the action's key in actions.yaml; action: its validated mapping
    (contracts/actions.schema.json plus the checks of the actions file parser);
    repository_url / commit: where actions.yaml was read (commit = 40 hex).
    Returns a JSON-compatible dict (see docs/actions.md for every field).
    """
    t = action_type(action["type"])
    res = action.get("resources") or {}
    gpus = res.get("gpus", 0)
    resources: dict[str, Any] = {
        "cpus": res.get("cpus", DEFAULT_CPUS),
        "memoryMiB": res.get("memoryMiB", DEFAULT_MEMORY_MIB),
        "gpus": gpus,
    }
    if gpus:
        resources["gpuClass"] = res.get("gpuClass")
    if t.family == "queued-batch":
        resources["wallTimeSeconds"] = res.get("wallTimeSeconds", DEFAULT_WALL_TIME_SECONDS)
    if t.environment == "slurm":
        resources["nodes"] = res.get("nodes", 1)
    runtime = action.get("runtime") or {}
    intent: dict[str, Any] = {"family": t.family}
    if t.service_kind is not None:
        intent["serviceKind"] = t.service_kind
    spec: dict[str, Any] = {
        "specVersion": SPEC_VERSION,
        "action": name,
        "actionType": t.name,
        "environment": t.environment,
        "intent": intent,
        "description": action.get("description", ""),
        "repository": {"url": repository_url, "commit": commit},
        "preCommands": [normalise_command(c) for c in action.get("preCommands", [])],
        "resources": resources,
        "runtime": {
            "environment": dict(runtime.get("environment") or {}),
            "workingDirectory": runtime.get("workingDirectory", "."),
        },
        "inputs": [_input(i) for i in action.get("inputs", [])],
    }
    if "command" in action:
        spec["command"] = normalise_command(action["command"])
    if t.family == "queued-batch":
        retry = action.get("retry") or {}
        spec["retry"] = {
            "maxAttempts": retry.get("maxAttempts", 1),
            "backoffSeconds": retry.get("backoffSeconds", 0),
            "onLost": retry.get("onLost", False),
        }
    if t.service_kind == "application":
        svc = action.get("service") or {}
        spec["service"] = {
            "port": svc.get("port", DEFAULT_SERVICE_PORT),
            "replicas": svc.get("replicas", 1),
            "healthPath": svc.get("healthPath", "/"),
        }
    if t.service_kind == "huggingface-inference":
        m = action["model"]
        model: dict[str, Any] = {"name": m["name"], "format": "huggingface", "args": list(m.get("args", []))}
        if "id" in m:
            model["source"] = {"huggingface": m["id"], "revision": m.get("revision", "main")}
        else:
            model["source"] = {"path": m["path"]}
        if "task" in m:
            model["task"] = m["task"]
        spec["model"] = model
    return spec


def _input(i: dict) -> dict:
    out = {"name": i["name"], "url": i["url"], "path": i.get("path", f"inputs/{i['name']}")}
    if "commit" in i:
        out["commit"] = i["commit"]
    else:
        # Pinned at acceptance by Execution Core (seed 004, "Pinned Run inputs").
        out["branch"] = i["branch"]
    return out
