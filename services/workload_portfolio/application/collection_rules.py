"""The cross-field rules of a collection in actions.yaml (docs/actions.md, Collections).

The schema bounds each field; these rules need several at once: ``matrix`` or
``parameters``, not both; the collection keys only with one of them and only
for a queued-batch action; names unique once upper-cased (they become
``METALLO_PARAM_<NAME>``); the matrix's cross product at most 1,000 items;
every record naming the same parameters. Each problem is reported at its line.
"""

from __future__ import annotations

from metallo import parameters
from metallo.governance.faithful_yaml import Document, Problem
from workload_portfolio.domain.action_types import action_type

COLLECTION_KEYS = ("maxActive", "failFast", "array")


def collection_problems(doc: Document, name: str, a: dict) -> list[Problem]:
    """Every problem of action ``name``'s collection fields (none when it is no collection)."""
    base = ("actions", name)
    out: list[Problem] = []
    matrix, records = a.get("matrix"), a.get("parameters")
    if matrix is None and records is None:
        for key in COLLECTION_KEYS:
            if key in a:
                out.append(doc.problem(base + (key,), f"{key} is for a collection: name matrix or parameters too",
                                       key=True))
        return out
    if matrix is not None and records is not None:
        out.append(doc.problem(base + ("parameters",), "a collection names matrix or parameters, not both", key=True))
    t = a.get("type")
    try:
        family = action_type(t).family if isinstance(t, str) else ""
    except KeyError:
        family = ""
    if family == "reconciled-service":
        key = "matrix" if matrix is not None else "parameters"
        out.append(doc.problem(base + (key,), f"a collection runs jobs; {t} is a service", key=True))
    if isinstance(matrix, dict):
        for why in parameters.names_problems([n for n in matrix if isinstance(n, str) and parameters.NAME.match(n)]):
            out.append(doc.problem(base + ("matrix",), why, key=True))
        axes = [(n, v) for n, v in matrix.items() if isinstance(v, list)]
        size = parameters.matrix_size(axes)
        if size > parameters.MAX_ITEMS:
            out.append(doc.problem(base + ("matrix",),
                                   f"the matrix makes {size} items (the product of its value counts); "
                                   f"at most {parameters.MAX_ITEMS}", key=True))
    if isinstance(records, list):
        first: list[str] | None = None
        for i, r in enumerate(records):
            if not isinstance(r, dict):
                continue
            names = sorted(k for k in r if isinstance(k, str))
            for why in parameters.names_problems([n for n in names if parameters.NAME.match(n)]):
                out.append(doc.problem(base + ("parameters", i), why))
            if first is None:
                first = names
            elif names != first:
                out.append(doc.problem(base + ("parameters", i),
                                       f"names {', '.join(names)}; every record names {', '.join(first)} "
                                       "(as parameters[0])"))
    return out
