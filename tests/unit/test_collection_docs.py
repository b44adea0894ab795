"""The matrix / parameters / array examples of docs/actions.md and docs/pipelines.md are what the
platform accepts and makes the children the text describes; the collection command lines parse;
each of those pages has a parsed example of needs, when, matrix, parameters, array and rerun."""

from __future__ import annotations

import shlex

import pytest

from metallo import parameters
from pipeline_coordination.domain import collection
from tests.unit.test_pipeline_docs import blocks, cli_lines, graph_of, parse
from workload_portfolio.adaptors.command_handlers import collection_shape
from workload_portfolio.application.actions_file import parse_actions_file


def children(text: str, action: str) -> tuple[dict[str, str], ...]:
    """The children a Pipeline would create for ``action`` of ``text`` (through the contract's shape)."""
    shape = collection_shape(parse_actions_file(text, source="docs").collection(action))
    s = collection.shape([(a.name, list(a.values)) for a in shape.matrix], [dict(r.values) for r in shape.parameters],
                         shape.max_active, shape.fail_fast, shape.array)
    return tuple(i.parameters for i in collection.items_of(s)), s


def example(doc: str, word: str) -> str:
    return next(b for b in blocks(doc, "yaml") if word in b and b.startswith("version: 1"))


def test_the_matrix_example_makes_six_children_three_at_a_time():
    text = example("actions.md", "matrix:\n      lr:")
    items, shape = children(text, "sweep")
    assert items[:3] == ({"lr": "0.1", "seed": "1"}, {"lr": "0.1", "seed": "2"}, {"lr": "0.01", "seed": "1"})
    assert len(items) == 6 and shape.max_active == 3 and shape.fail_fast
    assert parameters.environment(items[0]) == {"METALLO_PARAM_LR": "0.1", "METALLO_PARAM_SEED": "1"}
    assert "$METALLO_PARAM_LR" in parse_actions_file(text).action("sweep")["command"]["shell"]


def test_the_parameters_example_makes_one_child_per_record():
    items, _ = children(example("actions.md", "parameters:"), "cases")
    assert items == ({"dataset": "small", "split": "0.1"}, {"dataset": "large", "split": "0.2"})


def test_the_array_example_is_one_slurm_array_and_individual_elsewhere():
    items, shape = children(example("actions.md", "array: prefer"), "seeds")
    assert len(items) == 10 and shape.array == "prefer"
    decision, refusal = collection.array_decision(shape, "slurm")
    assert decision.startswith("array: prefer") and not refusal
    decision, refusal = collection.array_decision(shape, "k8s")
    assert decision.startswith("individual:") and not refusal


def test_the_pipelines_collection_example_is_one_step_between_its_needs():
    text = example("pipelines.md", "maxActive: 2")
    assert graph_of(text) == [("prepare", (), "success"), ("sweep", (1,), "success"), ("compare", (2,), "success")]
    items, shape = children(text, "sweep")
    assert len(items) == 4 and shape.max_active == 2 and shape.fail_fast


def test_the_collection_command_lines_are_ones_the_cli_takes():
    lines = [a for a in cli_lines() if a[:2] == ["metallo", "collection"]]
    assert {a[2] for a in lines} == {"list", "show", "cancel"}
    for args in lines:
        parse(args)


FEATURES = ("needs", "when", "matrix", "parameters", "array")


def documented_features(doc: str) -> dict[str, list[str]]:
    """The actions of ``doc``'s examples using each of FEATURES, every example parsed by the real parser.

    An example that stops parsing (or whose collection cannot be expanded, or
    whose graph a Pipeline cannot run) fails here.
    """
    found: dict[str, list[str]] = {f: [] for f in FEATURES}
    for text in blocks(doc, "yaml"):
        if not text.startswith("version: 1"):
            continue
        f = parse_actions_file(text, source=f"docs/{doc}")
        graph_of(text)
        for name in f.names:
            fields = f.collection(name) or {}
            if fields:
                children(text, name)
            uses = {"needs": bool(f.needs(name)), "when": f.when(name) != "success",
                    **{k: k in fields for k in ("matrix", "parameters", "array")}}
            for feature, used in uses.items():
                if used:
                    found[feature].append(name)
    return found


def console_lines(doc: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for block in blocks(doc, "console") for line in block.splitlines()
            if line.startswith("$ metallo ")]


@pytest.mark.parametrize("doc", ["actions.md", "pipelines.md"])
def test_each_page_has_a_parsed_example_of_every_graph_and_collection_field_and_of_rerun(doc):
    found = documented_features(doc)
    assert all(found.values()), f"{doc} has no parsed example of {[k for k, v in found.items() if not v]}"
    reruns = [a for a in console_lines(doc) if a[:3] == ["metallo", "pipeline", "rerun"] and "--failed" in a]
    assert reruns, f"{doc} has no `metallo pipeline rerun … --failed` example"
    for args in reruns:
        parse(args)


def test_the_pipelines_parameters_and_array_examples_make_the_children_they_describe():
    items, _ = children(example("pipelines.md", "summary:"), "cases")
    assert items == ({"dataset": "small", "split": "0.1"}, {"dataset": "large", "split": "0.2"})
    assert graph_of(example("pipelines.md", "summary:")) == [("cases", (), "success"), ("summary", (1,), "always")]
    items, shape = children(example("pipelines.md", "array: require"), "seeds")
    assert len(items) == 3 and shape.array == "require"
