"""OpenAPI schema validation of what clients write, with kubernetes-validate's schemas
for the version the lab reports (v1.31), so the lab refuses (422 Invalid) what a
cluster's schema refuses: wrong types, missing required fields. Unknown fields pass,
as the API server's default ``fieldValidation`` lets them (it drops them with a
warning). Each (kind, apiVersion) validator is built once (the schemas take tens of
milliseconds to load; a check then takes well under a millisecond).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import jsonschema
from kubernetes_validate.utils import schema_contents
from referencing import Registry, Resource

SCHEMAS = "kubernetes-json-schema/v1.31.0-local"
MAX_CAUSES = 20


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator | None:
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = schema_contents(f"{SCHEMAS}/{kind.lower()}-{group}.json", "1.31")
    except FileNotFoundError:
        return None  # e.g. KServe: no schema shipped, nothing to check
    definitions = schema_contents(f"{SCHEMAS}/_definitions.json", "1.31")
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _field(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_causes(obj: dict) -> list[tuple[str, str, str]]:
    """(field, reason, message) for each schema violation (at most 20), Kubernetes-style:
    ``spec.template.spec.containers[0].name``, ``FieldValueRequired``."""
    validator = _validator(str(obj.get("kind", "")), str(obj.get("apiVersion", "")))
    if validator is None:
        return []
    causes = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])[:MAX_CAUSES]:
        field = _field(error.absolute_path)
        if error.validator == "required":
            missing = re.match(r"'([^']+)' is a required property", error.message)
            name = missing.group(1) if missing else "?"
            causes.append((f"{field}.{name}" if field else name, "FieldValueRequired", "Required value"))
        else:
            shown = json.dumps(error.instance)[:80]
            causes.append((field, "FieldValueInvalid", f"Invalid value: {shown}: {error.message[:200]}"))
    return causes
