"""The needs / when / rerun examples of docs/pipelines.md, docs/actions.md and docs/runs.md
are what the platform accepts: each file parses, gives the graph the text describes, and
each command line is one the CLI takes."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from metallo.cli.app import app
from pipeline_coordination.domain import pipeline as d
from workload_portfolio.application.actions_file import parse_actions_file

DOCS = Path(__file__).resolve().parents[2] / "docs"


def blocks(doc: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / doc).read_text(), flags=re.DOTALL)


def graph_of(text: str) -> list[tuple[str, tuple[int, ...], str]]:
    """(action, needs as step indices, when) of each step of a Pipeline over ``text``."""
    f = parse_actions_file(text, source="docs")
    prepared = [
        d.PreparedAction(n, f"w-{n}", 1, "a" * 40, d.BATCH, "slurm", needs=f.needs(n), when=f.when(n))
        for n in f.names
    ]
    return [(s.action, s.needs, s.when) for s in d.steps_from_prepared(prepared, ())]


def test_the_pipelines_example_is_the_graph_the_page_describes():
    example = next(b for b in blocks("pipelines.md", "yaml") if b.startswith("version: 1") and "clean-up" in b)
    assert graph_of(example) == [
        ("prepare", (), "success"),
        ("train-small", (1,), "success"),
        ("train-large", (1,), "success"),
        ("compare", (2, 3), "success"),
        ("clean-up", (4,), "failure"),
    ]


def test_the_actions_example_uses_needs_and_when():
    example = next(b for b in blocks("actions.md", "yaml") if "needs:" in b)
    assert graph_of(example) == [
        ("fetch", (), "success"), ("train", (1,), "success"), ("evaluate", (2,), "success"),
        ("report", (3,), "always"),
    ]


def cli_lines() -> list[list[str]]:
    lines = []
    for doc in ("pipelines.md", "actions.md", "runs.md"):
        for block in blocks(doc, "console"):
            lines += [shlex.split(line[2:]) for line in block.splitlines() if line.startswith("$ metallo ")]
    return lines


def parse(args: list[str]):
    """Parse ``metallo …`` down to its command without running it (raises on a bad option)."""
    command = typer.main.get_command(app)
    rest = args[1:]
    while hasattr(command, "get_command"):  # a group (Typer carries its own click)
        name, rest = rest[0], rest[1:]
        command = command.get_command(command.context_class(command), name)
        assert command is not None, f"no command {name!r} in {args}"
    command.make_context(args[-1], list(rest))
    return command


def test_documented_rerun_command_lines_are_ones_the_cli_takes():
    lines = cli_lines()
    names = {" ".join(a[:3]) for a in lines}
    assert {"metallo pipeline rerun", "metallo run rerun"} <= names
    for args in lines:
        parse(args)
    assert any("--failed" in a for a in lines)
    with pytest.raises(Exception, match="No such option"):
        parse(["metallo", "pipeline", "rerun", "p", "--bogus"])
