"""Every JSON Schema violation of a loaded document, located by line and said in the
author's terms (unknown fields with the allowed ones, the form a field expects).

A message never dumps a large instance: bounds say what is over or under, the
count and the limit; a duplicate item is named at its own line; any other
message shows at most a short excerpt of the value."""

from __future__ import annotations

import json
import re

import jsonschema

from metallo.governance.faithful_yaml.document import Document, Path, Problem, printable


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
        return [doc.problem(path, f"got {shown(err.instance)}; expected {wanted[:1].lower()}{wanted[1:]}")]
    if err.validator == "required":
        return [doc.problem(path, err.message)]
    if err.validator == "type":
        wanted = err.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return [doc.problem(path, f"must be of type {wanted}, got {shown(err.instance)}")]
    if err.validator in ("enum", "const"):
        values = err.validator_value if err.validator == "enum" else [err.validator_value]
        return [doc.problem(path, f"{shown(err.instance)} is not one of {', '.join(map(repr, values))}")]
    if "propertyNames" in err.relative_schema_path or "propertyNames" in err.absolute_schema_path:
        return [doc.problem(path + (err.instance,),
                            f"name {shown(err.instance)}: {_bound_message(err) or _short_message(err)}",
                            key=True)]
    bound = _bound_message(err)
    if bound is not None:
        return [doc.problem(path, bound)]
    if err.validator == "uniqueItems" and isinstance(err.instance, list):
        dup = _duplicate(err.instance)
        if dup is not None:
            first, second = dup
            line = doc.locate(path + (first,))[0]
            where = f"{path[-1]}[{first}]" if path and isinstance(path[-1], str) else f"item {first}"
            return [doc.problem(path + (second,),
                                f"the same as {printable(where)} (line {line}); no two may be alike")]
    return [doc.problem(path, _short_message(err))]


_BOUNDS = {
    # validator: (what is counted, the comparison said)
    "maxItems": ("items", "at most"),
    "minItems": ("items", "at least"),
    "maxLength": ("characters", "at most"),
    "minLength": ("characters", "at least"),
    "maxProperties": ("keys", "at most"),
    "minProperties": ("keys", "at least"),
}


def _bound_message(err: jsonschema.ValidationError) -> str | None:
    """``1001 items; at most 1000 are allowed`` for a size bound, else None."""
    if err.validator not in _BOUNDS or not isinstance(err.instance, (list, str, dict)):
        return None
    unit, comparison = _BOUNDS[err.validator]
    limit = err.validator_value
    said = "are allowed" if comparison == "at most" else ("is needed" if limit == 1 else "are needed")
    count = len(err.instance)
    return f"{count} {unit if count != 1 else unit[:-1]}; {comparison} {limit} {said}"


def _duplicate(items: list) -> tuple[int, int] | None:
    """(first, second) index of the first repeated item, compared as canonical JSON."""
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        key = json.dumps(item, sort_keys=True)
        if key in seen:
            return seen[key], i
        seen[key] = i
    return None


SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``repr(value)``, cut to about 60 characters (``…`` and the full length when cut)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    if isinstance(value, str):
        size = f"{len(value)} characters"
    elif isinstance(value, (list, dict)):
        unit = "item" if isinstance(value, list) else "key"
        size = f"{len(value)} {unit}{'' if len(value) == 1 else 's'}"
    else:
        size = f"{len(text)} characters"
    return f"{text[:SHOWN_CHARS]}… ({size})"


def _short_message(err: jsonschema.ValidationError) -> str:
    """jsonschema's message with a leading dump of the instance cut to :func:`shown`."""
    message = err.message
    full = repr(err.instance)
    if len(full) > SHOWN_CHARS and message.startswith(full):
        return shown(err.instance) + message[len(full):]
    return message
