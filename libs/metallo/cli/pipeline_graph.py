"""Drawing a Pipeline's step graph with Rich (``metallo pipeline show``).

The graph is a DAG: each step hangs under the first step it needs (its lowest
index), with its dependents under it; under every other step it needs it
appears once more as a reference (``↳ 4 eval (also here)``), so each edge is
drawn and each subtree only once. Steps without needs hang under the Pipeline.
A graph deeper than :data:`MAX_TREE_DEPTH` (a long chain) is drawn as its
levels instead, one line per level, so it stays readable in a terminal.
"""

from __future__ import annotations

from rich.text import Text
from rich.tree import Tree

MAX_TREE_DEPTH = 12

STATE_STYLE = {
    "succeeded": "green", "ready": "green", "failed": "bold red", "cancelled": "red",
    "skipped": "dim", "waiting": "dim", "launched": "yellow", "launching": "yellow",
    "pinned": "yellow", "cancelling": "yellow",
}


def _label(step) -> Text:
    text = Text(f"{step.index} {step.action} ")
    text.append(step.state, style=STATE_STYLE.get(step.state, ""))
    extra = []
    if step.when and step.when != "success":
        extra.append(f"when {step.when}")
    if step.carried_from:
        extra.append(f"kept from {step.carried_from[:8]}")
    elif step.collection_id and step.collection_counts.carried:
        c = step.collection_counts
        extra.append(f"{c.carried} of {c.total} children kept, {c.total - c.carried} rerun")
    if step.run_id:
        extra.append(f"run {step.run_id[:8]}")
    if step.reason_code:
        extra.append(step.reason_code)
    if extra:
        text.append(" · " + " · ".join(extra), style="dim")
    return text


def levels(pipeline) -> list[list]:
    """The steps by level: level 0 needs nothing, level k needs at least one step of level k-1."""
    by_index = {s.index: s for s in pipeline.steps}
    level: dict[int, int] = {}

    def of(step) -> int:
        if step.index not in level:
            level[step.index] = 0  # a cycle (never sent, but never a hang either) stops here
            needs = [by_index[n] for n in step.needs if n in by_index]
            level[step.index] = 1 + max((of(n) for n in needs), default=-1)
        return level[step.index]

    out: list[list] = []
    for s in pipeline.steps:
        k = of(s)
        out.extend([] for _ in range(k + 1 - len(out)))
        out[k].append(s)
    return out


def graph_tree(pipeline) -> Tree:
    """A Rich Tree of the Pipeline's steps and needs (see module doc)."""
    root = Tree(Text(f"Pipeline {pipeline.pipeline_id} ", style="bold").append(pipeline.state,
                style=STATE_STYLE.get(pipeline.state, "")))
    by_index = {s.index: s for s in pipeline.steps}
    dependents: dict[int, list] = {i: [] for i in by_index}
    for s in pipeline.steps:
        for n in s.needs:
            if n in dependents:
                dependents[n].append(s)

    def add(node: Tree, step, parent: int | None) -> None:
        home = min(step.needs) if step.needs else None
        if parent != home:
            node.add(Text(f"↳ {step.index} {step.action} (also here)", style="dim"))
            return
        branch = node.add(_label(step))
        for child in dependents[step.index]:
            add(branch, child, step.index)

    layered = levels(pipeline)
    if len(layered) > MAX_TREE_DEPTH:
        for k, steps in enumerate(layered):
            line = Text(f"level {k + 1}: ", style="dim")
            for i, s in enumerate(steps):
                line.append(("; " if i else "") + f"{s.index} {s.action} ")
                line.append(s.state, style=STATE_STYLE.get(s.state, ""))
            root.add(line)
        return root
    for s in pipeline.steps:
        if not s.needs:
            add(root, s, None)
    return root


def counts_text(pipeline) -> str:
    """``4 steps: 2 succeeded, 1 failed, 1 skipped`` (zero counts left out)."""
    c = pipeline.counts
    names = ("succeeded", "active", "waiting", "failed", "cancelled", "skipped")
    if c.total:
        total, counted = c.total, {name: getattr(c, name) for name in names}
    else:  # an owner that sends no counts: count the steps themselves
        total = len(pipeline.steps)
        counted = {name: 0 for name in names}
        for s in pipeline.steps:
            name = s.state if s.state in counted else ("waiting" if s.state in ("", "pending")
                                                       else "active")
            counted[name] += 1
    parts = [f"{counted[name]} {name}" for name in names if counted[name]]
    text = f"{total} steps: " + ", ".join(parts) if total else "no steps yet"
    if pipeline.partial:
        text += " — partial failure"
    return text
