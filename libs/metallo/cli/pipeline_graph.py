"""Drawing a Pipeline's step graph with Rich (``metallo pipeline show``).

The graph is a DAG: each step hangs under the first step it needs (its lowest
index), with its dependents under it; under every other step it needs it
appears once more as a reference (``↳ 4 eval (also here)``), so each edge is
drawn and each subtree only once. Steps without needs hang under the Pipeline.
"""

from __future__ import annotations

from rich.text import Text
from rich.tree import Tree

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
    if step.run_id:
        extra.append(f"run {step.run_id[:8]}")
    if step.reason_code:
        extra.append(step.reason_code)
    if extra:
        text.append(" · " + " · ".join(extra), style="dim")
    return text


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

    for s in pipeline.steps:
        if not s.needs:
            add(root, s, None)
    return root


def counts_text(pipeline) -> str:
    """``4 steps: 2 succeeded, 1 failed, 1 skipped`` (zero counts left out)."""
    c = pipeline.counts
    parts = [f"{getattr(c, name)} {name}" for name in ("succeeded", "active", "waiting", "failed",
                                                         "cancelled", "skipped") if getattr(c, name)]
    text = f"{c.total} steps: " + ", ".join(parts) if c.total else "no steps yet"
    if pipeline.partial:
        text += " — partial failure"
    return text
