"""actions.yaml text that PostgreSQL or UTF-8 cannot carry (NUL, lone surrogates) is
refused in every field, key or value, at its line; the error itself stays valid text."""

from __future__ import annotations

import pytest

from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file

HEAD = "version: 1\nactions:\n  a:\n    type: slurm-job\n"


def refused(text: str) -> list[tuple[int, int, str, str]]:
    with pytest.raises(ActionsFileError) as e:
        parse_actions_file(text, source="actions.yaml")
    shown = str(e.value)
    assert "\0" not in shown
    shown.encode("utf-8")  # no lone surrogate either: the reply and the database take it
    return [(p.line, p.column, p.field, p.message.split(" (")[0]) for p in e.value.problems]


NUL = "text holds a NUL character"
SURROGATE = "text holds a lone surrogate"


@pytest.mark.parametrize(("body", "where"), [
    ('    command: [run]\n    matrix: {x: ["a\\0b"]}\n', (6, 18, "actions.a.matrix.x[0]")),
    ('    command: [run]\n    runtime: {environment: {A: "a\\0b"}}\n', (6, 32, "actions.a.runtime.environment.A")),
    ('    command: [run]\n    parameters: [{"x\\0": "1"}]\n', (6, 19, "actions.a.parameters[0].x\\0")),
    ('    command: [run, "--x=\\0"]\n', (5, 20, "actions.a.command[1]")),
    ('    command: [run]\n    description: "d\\0"\n', (6, 18, "actions.a.description")),
    ('    command: {shell: "echo \\0"}\n', (5, 22, "actions.a.command.shell")),
])
def test_nul_is_refused_in_any_field_at_its_line(body, where):
    assert refused(HEAD + body) == [where + (NUL,)]


@pytest.mark.parametrize(("body", "where"), [
    ('    command: [run]\n    matrix: {x: ["\\ud800"]}\n', (6, 18, "actions.a.matrix.x[0]")),
    ('    command: [run]\n    runtime: {environment: {"B\\udc00": "1"}}\n',
     (6, 29, "actions.a.runtime.environment.B\\udc00")),
    ('    command: [run]\n    inputs: [{name: d, url: "https://h/\\ud800", commit: x}]\n',
     (6, 29, "actions.a.inputs[0].url")),
    ('    "\\ud800": 1\n    command: [run]\n', (5, 5, "actions.a.\\ud800")),
])
def test_a_lone_surrogate_is_refused_in_any_field_or_key_at_its_line(body, where):
    assert refused(HEAD + body) == [where + (SURROGATE,)]


def test_a_surrogate_pair_written_as_two_escapes_is_refused_and_the_8_digit_escape_reads():
    got = refused(HEAD + '    command: [run]\n    description: "\\ud83d\\ude00"\n')
    assert got == [(6, 18, "actions.a.description", SURROGATE)]
    f = parse_actions_file(HEAD + '    command: [run]\n    description: "\\U0001F600"\n')
    assert f.action("a")["description"] == "\U0001f600"
