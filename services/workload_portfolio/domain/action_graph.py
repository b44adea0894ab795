"""The dependency graph of an actions.yaml: ``needs`` between its actions (docs/pipelines.md).

Pure rules over action names. An action's ``needs`` may only name other actions
of the same file; no action may need itself; the graph must have no cycle; and
the file holds at most :data:`MAX_EDGES` needs in all. (A file where no action
names ``needs`` runs as a chain in file order: Pipeline Coordination's rule.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MAX_NEEDS = 50  # per action (the schema says so too)
MAX_EDGES = 2000  # per file
WHEN = ("success", "failure", "always")


@dataclass(frozen=True)
class GraphProblem:
    """One problem of the graph: the action and, when known, the index in its ``needs``."""

    action: str
    index: int | None
    message: str


def graph_problems(order: Sequence[str], needs: Mapping[str, Sequence[str]]) -> list[GraphProblem]:
    """Every problem of the ``needs`` graph (unknown names, self-references, cycles, the edge bound).

    order: the action names in file order; needs: action → the names it needs.
    A cycle is reported once, at the ``needs`` entry that closes it, naming
    every action on it (``a → b → a``).
    """
    known = set(order)
    out: list[GraphProblem] = []
    edges = sum(len(v) for v in needs.values())
    if edges > MAX_EDGES:
        return [GraphProblem(order[0] if order else "", None, f"{edges} needs in all; at most {MAX_EDGES} are allowed")]
    clean: dict[str, list[str]] = {}
    for name in order:
        kept = []
        for i, dep in enumerate(needs.get(name, ())):
            if dep == name:
                out.append(GraphProblem(name, i, f"action {name!r} cannot need itself"))
            elif dep not in known:
                out.append(GraphProblem(name, i, f"needs {dep!r}, which is not an action of this file "
                                                 f"(actions: {', '.join(order)})"[:600]))
            else:
                kept.append(dep)
        clean[name] = kept
    out.extend(_cycles(order, clean, needs))
    return out


def _cycles(order: Sequence[str], clean: Mapping[str, list[str]],
            needs: Mapping[str, Sequence[str]]) -> list[GraphProblem]:
    """Depth-first search (iterative: 200 actions may chain deeply); one problem per back edge."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(order, WHITE)
    out: list[GraphProblem] = []
    for root in order:
        if colour[root] != WHITE:
            continue
        path: list[str] = [root]
        stack = [iter(clean[root])]
        colour[root] = GREY
        while stack:
            dep = next(stack[-1], None)
            if dep is None:
                colour[path.pop()] = BLACK
                stack.pop()
                continue
            if colour[dep] == GREY:
                at = path[-1]
                loop = path[path.index(dep):] + [dep]
                out.append(GraphProblem(at, list(needs[at]).index(dep),
                                        "needs form a cycle: " + " → ".join(reversed(loop)) + " (each runs before the next)"))
            elif colour[dep] == WHITE:
                colour[dep] = GREY
                path.append(dep)
                stack.append(iter(clean[dep]))
    return out

