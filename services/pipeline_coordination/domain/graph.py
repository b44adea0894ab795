"""The dependency graph of a Pipeline's steps: needs, when, and the checks on them.

Pure functions over step indices and action names (no Pipeline values: those
use these rules in ``schedule.py``). A Pipeline is an immutable DAG: each step
names the steps it ``needs`` (by 1-based index) and ``when`` it runs once they
have ended:

- ``success`` (default): every need succeeded (a ready service counts);
- ``failure``: every need ended and at least one did not succeed;
- ``always``: every need ended, however.

A need that was skipped counts as what made it skip: it did not succeed when
one of its own needs did not succeed, else it counts as succeeded. So a chain of
``when: failure`` clean-ups runs only after a real failure upstream.

A file where no action names ``needs`` keeps "Run all in order": each step
needs the one before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

SUCCESS, FAILURE, ALWAYS = "success", "failure", "always"
WHEN = frozenset({SUCCESS, FAILURE, ALWAYS})
MAX_NODES = 200  # steps of one Pipeline
MAX_EDGES = 2000  # needs of one Pipeline, in all
DEFAULT_MAX_ACTIVE = 4
MAX_ACTIVE_LIMIT = 50

R_NEEDS_NOT_SELECTED = "needs-not-selected"
R_GRAPH_INVALID = "actions-invalid"


class GraphError(ValueError):
    """The graph cannot be run: ``code`` is ``needs-not-selected`` or ``actions-invalid``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def step_needs(
    chosen: Sequence[str], needs: Mapping[str, Sequence[str]], whole_file: Sequence[str]
) -> tuple[tuple[int, ...], ...]:
    """The needs of each chosen action as 1-based step indices (``chosen`` is the step order).

    ``needs`` maps every action of the file to the names it needs as written;
    ``whole_file`` is the file's action order. When no action of the file names
    any need, each step needs the one before it (file order, also for an
    explicit list). Raises :class:`GraphError` ``needs-not-selected`` when a
    chosen action needs one not chosen, and ``actions-invalid`` for an unknown
    name, a self-reference, a cycle or more than the bounds allow.
    """
    if len(chosen) > MAX_NODES:
        raise GraphError(R_GRAPH_INVALID, f"{len(chosen)} steps; at most {MAX_NODES}")
    if not any(needs.get(n) for n in whole_file):
        return tuple(((i,) if i else ()) for i in range(len(chosen)))
    index = {name: i + 1 for i, name in enumerate(chosen)}
    out: list[tuple[int, ...]] = []
    missing: list[str] = []
    for name in chosen:
        deps = []
        for dep in needs.get(name, ()):
            if dep == name or dep not in whole_file:
                raise GraphError(R_GRAPH_INVALID, f"action {name!r}: needs {dep!r} cannot be run")
            if dep not in index:
                missing.append(f"{name} needs {dep}")
            else:
                deps.append(index[dep])
        out.append(tuple(deps))
    if missing:
        raise GraphError(
            R_NEEDS_NOT_SELECTED,
            "the list leaves out actions that listed ones need: " + "; ".join(missing)[:1500]
            + " (list them too, or start without a list)",
        )
    check_dag(out)
    return tuple(out)


def check_dag(needs: Sequence[Sequence[int]]) -> None:
    """Refuse (GraphError ``actions-invalid``) a step list whose needs are out of range, cyclic or over the bounds.

    ``needs[i]`` are the 1-based indices step ``i + 1`` needs. Kahn's algorithm:
    linear in steps + needs.
    """
    n = len(needs)
    if n > MAX_NODES:
        raise GraphError(R_GRAPH_INVALID, f"{n} steps; at most {MAX_NODES}")
    if sum(len(d) for d in needs) > MAX_EDGES:
        raise GraphError(R_GRAPH_INVALID, f"more than {MAX_EDGES} needs")
    dependents: list[list[int]] = [[] for _ in range(n + 1)]
    pending = [0] * (n + 1)
    for i, deps in enumerate(needs, start=1):
        for d in deps:
            if not 1 <= d <= n or d == i:
                raise GraphError(R_GRAPH_INVALID, f"step {i} needs step {d}, which cannot be")
            dependents[d].append(i)
            pending[i] += 1
    ready = [i for i in range(1, n + 1) if pending[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in dependents[i]:
            pending[j] -= 1
            if pending[j] == 0:
                ready.append(j)
    if seen != n:
        cyclic = [str(i) for i in range(1, n + 1) if pending[i] > 0]
        raise GraphError(R_GRAPH_INVALID, f"the needs of steps {', '.join(cyclic)} form a cycle")


def condition_met(when: str, results: Sequence[bool]) -> bool:
    """Whether a step whose needs all ended runs: ``results`` says, per need, whether it succeeded."""
    if when == ALWAYS:
        return True
    if when == FAILURE:
        return not all(results)
    return all(results)


def bounded_max_active(requested: int) -> int:
    """``max_active`` of a Pipeline: 0 → the default 4; else 1..50 (ValueError outside)."""
    if requested == 0:
        return DEFAULT_MAX_ACTIVE
    if not 1 <= requested <= MAX_ACTIVE_LIMIT:
        raise ValueError(f"max_active must be 1..{MAX_ACTIVE_LIMIT} (0 = {DEFAULT_MAX_ACTIVE})")
    return requested
