"""Collections in actions.yaml: matrix, parameters, maxActive, failFast, array — checked with their lines."""

from __future__ import annotations

import pytest

from metallo.workload_portfolio.v1 import workload_portfolio_pb2 as wp
from workload_portfolio.adaptors.command_handlers import collection_shape
from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file
from workload_portfolio.domain.specification import normalise

REPO = "https://git.example.org/lab/models.git"
SHA = "1" * 40

GOOD = """\
version: 1
actions:
  sweep:
    type: slurm-job
    command: {shell: "python train.py --lr \\"$METALLO_PARAM_LR\\""}
    matrix:
      lr: [0.1, 0.01]
      seed: ["1", "2", "3"]
    maxActive: 3
    failFast: true
    array: prefer
  cases:
    type: k8s-job
    command: [python, case.py]
    parameters:
      - {name: small, size: "10"}
      - {name: large, size: "1000"}
"""


def problems(text: str) -> dict[tuple[int, str], str]:
    with pytest.raises(ActionsFileError) as e:
        parse_actions_file(text, source="actions.yaml")
    return {(p.line, p.field): p.message for p in e.value.problems}


def test_a_collection_parses_keeps_the_authors_text_and_stays_out_of_the_revision():
    f = parse_actions_file(GOOD)
    assert f.collection("sweep") == {"matrix": {"lr": ["0.1", "0.01"], "seed": ["1", "2", "3"]},
                                     "maxActive": 3, "failFast": True, "array": "prefer"}
    assert f.collection("cases")["parameters"][1] == {"name": "large", "size": "1000"}
    spec = normalise("sweep", f.action("sweep"), repository_url=REPO, commit=SHA)
    assert not {"matrix", "parameters", "maxActive", "failFast", "array"} & set(spec)
    shape = collection_shape(f.collection("sweep"))
    assert [(a.name, list(a.values)) for a in shape.matrix] == [("lr", ["0.1", "0.01"]), ("seed", ["1", "2", "3"])]
    assert shape.max_active == 3 and shape.fail_fast and shape.array == "prefer"
    assert f.collection("absent") is None and collection_shape(None) is None
    assert isinstance(collection_shape(f.collection("cases")), wp.CollectionShape)


def test_a_matrix_over_a_thousand_items_is_refused_at_its_line():
    values = ", ".join(f'"{i}"' for i in range(40))
    text = f"""\
version: 1
actions:
  big:
    type: slurm-job
    command: [run]
    matrix:
      a: [{values}]
      b: [{values}]
"""
    got = problems(text)
    assert got[(6, "actions.big.matrix")].startswith("the matrix makes 1600 items"), got


def test_bad_names_clashes_records_and_misplaced_keys_are_refused_with_their_lines():
    text = """\
version: 1
actions:
  a:
    type: slurm-job
    command: [run]
    matrix:
      lr: ["1"]
      LR: ["2"]
      bad-name: ["3"]
  b:
    type: slurm-job
    command: [run]
    parameters:
      - {x: "1"}
      - {y: "2"}
    maxActive: 0
  c:
    type: slurm-job
    command: [run]
    failFast: true
  d:
    type: k8s-deployment
    command: [serve]
    matrix: {v: ["1"]}
  e:
    type: slurm-job
    command: [run]
    matrix: {v: ["1"]}
    parameters: [{v: "1"}]
    array: sometimes
"""
    got = problems(text)
    lines = {k for k in got}
    assert (6, "actions.a.matrix") in lines and "METALLO_PARAM_LR" in got[(6, "actions.a.matrix")]
    assert any(line == 9 and "bad-name" in field for line, field in lines), got
    assert (15, "actions.b.parameters[1]") in lines and "every record names x" in got[(15, "actions.b.parameters[1]")]
    assert (16, "actions.b.maxActive") in lines
    assert (20, "actions.c.failFast") in lines and "is for a collection" in got[(20, "actions.c.failFast")]
    assert (24, "actions.d.matrix") in lines and "service" in got[(24, "actions.d.matrix")]
    assert (29, "actions.e.parameters") in lines and "not both" in got[(29, "actions.e.parameters")]
    assert (30, "actions.e.array") in lines


def collection(body: str) -> str:
    return f"version: 1\nactions:\n  c:\n    type: slurm-job\n    command: [run]\n{body}"


def test_too_many_records_names_or_characters_say_count_and_limit_without_the_records():
    records = "".join(f'      - {{x: "{i}"}}\n' for i in range(1001))
    got = problems(collection("    parameters:\n" + records))
    assert got == {(7, "actions.c.parameters"): "1001 items; at most 1000 are allowed"}
    names = ", ".join(f'n{i}: "1"' for i in range(17))
    with pytest.raises(ActionsFileError) as e:
        parse_actions_file(collection(f"    parameters:\n      - {{{names}}}\n"))
    assert "actions.yaml:7:9: actions.c.parameters[0]: 17 keys; at most 16 are allowed" in map(str, e.value.problems)
    assert all(len(str(p)) < 120 for p in e.value.problems), e.value
    got = problems(collection(f'    parameters:\n      - {{x: "{"v" * 1025}"}}\n'))
    assert got == {(7, "actions.c.parameters[0].x"): "1025 characters; at most 1024 are allowed"}
    got = problems(collection(f'    matrix: {{x: ["{"v" * 1025}"]}}\n'))
    assert got == {(6, "actions.c.matrix.x[0]"): "1025 characters; at most 1024 are allowed"}


def test_a_repeated_record_or_matrix_value_is_refused_at_the_second_ones_line():
    got = problems(collection('    parameters:\n      - {x: a, y: "1"}\n      - {x: b, y: "1"}\n'
                              '      - {y: "1", x: a}\n'))
    assert got == {(9, "actions.c.parameters[2]"): "the same as parameters[0] (line 7); no two may be alike"}
    got = problems(collection('    matrix:\n      x: [a, b,\n          a]\n'))
    assert got == {(8, "actions.c.matrix.x[2]"): "the same as x[0] (line 7); no two may be alike"}


def test_unquoted_scalars_in_values_stay_the_text_written_as_documented():
    # docs/actions.md, "Values are kept as you wrote them" and Collections: text
    # fields keep the characters typed, so these are no coercion to refuse.
    f = parse_actions_file(collection("    matrix: {x: [null, true, 0.10, ~]}\n"))
    assert f.collection("c")["matrix"] == {"x": ["null", "true", "0.10", "~"]}
    f = parse_actions_file(collection("    parameters: [{x: false, y: 007}]\n"))
    assert f.collection("c")["parameters"] == [{"x": "false", "y": "007"}]
