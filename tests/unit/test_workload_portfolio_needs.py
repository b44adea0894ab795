"""``needs`` and ``when`` in actions.yaml: refused with the file's line when they cannot be run."""

from __future__ import annotations

import pytest

from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file


def problems(text: str) -> list[str]:
    with pytest.raises(ActionsFileError) as e:
        parse_actions_file(text)
    return [str(p) for p in e.value.problems]


def job(name: str, extra: str = "") -> str:
    return f"  {name}:\n    type: slurm-job\n    command: [python, {name}.py]\n{extra}"


def test_a_cycle_is_refused_with_the_line_that_closes_it():
    text = "version: 1\nactions:\n" + job("a", "    needs: [c]\n") + job("b", "    needs: [a]\n") + job("c", "    needs: [b]\n")
    (only,) = problems(text)
    # Searching from a (a needs c needs b needs a), the entry that closes it is b's (line 10).
    assert only.startswith("actions.yaml:10:") and "actions.b.needs[0]" in only
    assert "a → b → c → a" in only


def test_unknown_names_and_self_references_are_each_refused_at_their_entry():
    text = "version: 1\nactions:\n" + job("a") + job("b", "    needs:\n      - a\n      - b\n      - nope\n")
    found = problems(text)
    assert any(p.startswith("actions.yaml:11:") and "cannot need itself" in p for p in found), found
    assert any(p.startswith("actions.yaml:12:") and "'nope', which is not an action" in p for p in found), found


def test_when_takes_three_words_and_needs_is_bounded():
    text = "version: 1\nactions:\n" + job("a", "    when: sometimes\n")
    assert any("actions.yaml:6:" in p and "when" in p for p in problems(text))
    many = ", ".join(f"x{i}" for i in range(51))
    text = "version: 1\nactions:\n" + job("a", f"    needs: [{many}]\n")
    assert any("needs" in p for p in problems(text))


def test_a_valid_graph_keeps_needs_and_when_as_written():
    text = "version: 1\nactions:\n" + job("a") + job("b", "    needs: [a]\n    when: always\n")
    f = parse_actions_file(text)
    assert f.needs("a") == () and f.when("a") == "success"
    assert f.needs("b") == ("a",) and f.when("b") == "always"
