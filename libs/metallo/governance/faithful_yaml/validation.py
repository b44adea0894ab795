"""Every JSON Schema violation of a loaded document, located by line and said in the
author's terms (unknown fields with the allowed ones, the form a field expects)."""

from __future__ import annotations

import re

import jsonschema

from metallo.governance.faithful_yaml.document import Document, Path, Problem


def schema_problems(doc: Document, schema: dict) -> list[Problem]:
    """Every JSON Schema violation of ``doc.data``, located by line (deepest cause first)."""
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema)
    out: list[Problem] = []
    seen: set[tuple] = set()
    for err in validator.iter_errors(doc.data):
        for leaf in _leaves(err):
            for p in _describe(doc, leaf):
                k = (p.line, p.column, p.field, p.message)
                if k not in seen:
                    seen.add(k)
                    out.append(p)
    return out


def _leaves(err: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For oneOf/anyOf failures, report the branch that got furthest, not the whole tree."""
    if (err.validator in ("oneOf", "anyOf") and not isinstance(err.instance, (dict, list))
            and isinstance(err.schema, dict) and err.schema.get("description")):
        return [err]  # a scalar matching no form: the schema's own description says best what is wanted
    if err.validator in ("oneOf", "anyOf") and err.context:
        best = jsonschema.exceptions.best_match(err.context)
        return _leaves(best) if best is not None else [err]
    return [err]


def _describe(doc: Document, err: jsonschema.ValidationError) -> list[Problem]:
    path: Path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        patterns = list(err.schema.get("patternProperties", {}))
        extra = [
            k for k in err.instance
            if k not in allowed and not any(re.search(p, k) for p in patterns)
        ]
        if extra:
            known = ", ".join(sorted(allowed)) or "none"
            return [doc.problem(path + (k,), f"unknown field {k!r} (allowed: {known})", key=True)
                    for k in extra]
    if err.validator in ("oneOf", "anyOf") and isinstance(err.schema, dict) and err.schema.get("description"):
        wanted = err.schema["description"].rstrip(".")
        return [doc.problem(path, f"got {err.instance!r}; expected {wanted[:1].lower()}{wanted[1:]}")]
    if err.validator == "required":
        return [doc.problem(path, err.message)]
    if err.validator == "type":
        wanted = err.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return [doc.problem(path, f"must be of type {wanted}, got {err.instance!r}")]
    if err.validator in ("enum", "const"):
        values = err.validator_value if err.validator == "enum" else [err.validator_value]
        return [doc.problem(path, f"{err.instance!r} is not one of {', '.join(map(repr, values))}")]
    if "propertyNames" in err.relative_schema_path or "propertyNames" in err.absolute_schema_path:
        return [doc.problem(path + (err.instance,), f"name {err.instance!r}: {err.message}", key=True)]
    return [doc.problem(path, err.message)]
