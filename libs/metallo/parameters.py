"""Collection parameters: the rules every owner applies to them (docs/actions.md, Collections).

A collection runs one action once per item; an item is a record of parameter
values (name → text). Workload Portfolio checks the file's ``matrix`` or
``parameters`` with these rules, Pipeline Coordination expands them into items,
Execution Core checks each child's values again on LaunchRun, and the Site
Runtime hands them to the command only as environment variables
``METALLO_PARAM_<NAME>`` (:func:`environment`) — never substituted into a
command or script.

Bounds: names match ``[A-Za-z][A-Za-z0-9_]{0,31}`` and stay unique once
upper-cased; at most :data:`MAX_NAMES` names; values are text of at most
:data:`MAX_VALUE_BYTES` UTF-8 bytes without NUL; at most :data:`MAX_ITEMS` items
(the matrix's cross product included).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

PREFIX = "METALLO_PARAM_"
MAX_NAMES = 16
MAX_VALUE_BYTES = 1024
MAX_ITEMS = 1000
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")


class ParameterError(ValueError):
    """Parameter values that cannot be used; ``problems`` lists each."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def env_name(name: str) -> str:
    """The environment variable a parameter reaches the command as: ``METALLO_PARAM_`` + NAME."""
    return PREFIX + name.upper()


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a parameter name, or None."""
    if not isinstance(name, str) or not NAME.match(name):
        shown = name[:40] if isinstance(name, str) else name
        return f"parameter name {shown!r} must match [A-Za-z][A-Za-z0-9_]{{0,31}}"
    return None


def value_problem(value: object) -> str | None:
    """Why ``value`` cannot be a parameter value, or None (text, bounded, no NUL)."""
    if not isinstance(value, str):
        return f"a parameter value must be text (quote it: \"{value}\")"
    if "\x00" in value:
        return "a parameter value may not hold NUL"
    if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
        return f"a parameter value is longer than {MAX_VALUE_BYTES} bytes"
    return None


def names_problems(names: Sequence[object]) -> list[str]:
    """Problems of one set of names: each name's, their count, clashes once upper-cased."""
    out = [p for n in names if (p := name_problem(n))]
    if len(names) > MAX_NAMES:
        out.append(f"{len(names)} parameter names; at most {MAX_NAMES}")
    seen: dict[str, str] = {}
    for n in names:
        if isinstance(n, str):
            other = seen.setdefault(n.upper(), n)
            if other != n:
                out.append(f"parameter names {other!r} and {n!r} are the same variable {env_name(n)}")
    return out


def check(values: Mapping[str, str]) -> None:
    """Refuse (:class:`ParameterError`) one item's values that break a rule above."""
    problems = names_problems(list(values))
    problems += [p for v in values.values() if (p := value_problem(v))]
    if problems:
        raise ParameterError(problems)


def environment(values: Mapping[str, str]) -> dict[str, str]:
    """The environment variables of one item's values (checked first: ParameterError)."""
    check(values)
    return {env_name(k): v for k, v in values.items()}


def matrix_size(axes: Sequence[tuple[str, Sequence[str]]]) -> int:
    """How many items a matrix makes: the product of its value counts (0 for no axis)."""
    if not axes:
        return 0
    size = 1
    for _name, values in axes:
        size *= len(values)
    return size


def expand(
    matrix: Sequence[tuple[str, Sequence[str]]] = (), records: Sequence[Mapping[str, str]] = ()
) -> tuple[dict[str, str], ...]:
    """The items of a collection, in expansion order (checked: ParameterError).

    ``matrix``: (name, values) in file order, expanded as a cross product whose
    last name varies fastest; ``records``: explicit items, each with the same
    names. Exactly one of them must be non-empty; at most :data:`MAX_ITEMS` items.
    """
    if bool(matrix) == bool(records):
        raise ParameterError(["a collection names exactly one of matrix or parameters"])
    if matrix:
        problems = names_problems([n for n, _ in matrix])
        for name, values in matrix:
            if not values:
                problems.append(f"matrix {name!r} has no value")
            problems += [p for v in values if (p := value_problem(v))]
            if len(set(values)) != len(values):
                problems.append(f"matrix {name!r} lists a value twice")
        size = matrix_size(matrix)
        if size > MAX_ITEMS:
            problems.append(f"the matrix makes {size} items; at most {MAX_ITEMS}")
        if problems:
            raise ParameterError(problems)
        items: list[dict[str, str]] = [{}]
        for name, values in matrix:
            items = [{**item, name: v} for item in items for v in values]
        return tuple(items)
    if len(records) > MAX_ITEMS:
        raise ParameterError([f"{len(records)} parameter records; at most {MAX_ITEMS}"])
    first = sorted(records[0])
    problems = []
    for i, r in enumerate(records):
        if sorted(r) != first:
            problems.append(f"parameters[{i}] names {sorted(r)}, not {first} as parameters[0] does")
            continue
        try:
            check(r)
        except ParameterError as e:
            problems += [f"parameters[{i}]: {p}" for p in e.problems]
    if not first:
        problems.append("a parameter record names no parameter")
    if problems:
        raise ParameterError(problems[:50])
    return tuple(dict(r) for r in records)
