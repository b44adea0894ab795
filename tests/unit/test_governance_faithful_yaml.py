"""The faithful YAML loader shared by the governance file and actions.yaml."""

from __future__ import annotations

import pytest

from metallo.governance.faithful_yaml import DocumentError, Limits, load

SCHEMA = {
    "type": "object",
    "properties": {
        "commit": {"type": "string"},
        "python": {"type": "string"},
        "count": {"type": "integer"},
        "flag": {"type": "boolean"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "any": {},
    },
    "additionalProperties": False,
}


def test_strings_are_kept_exactly_as_typed():
    doc = load(
        "commit: 1234567890123456789012345678901234567890\n"
        "python: 3.10\n"
        "count: 7\n"
        "flag: true\n"
        "env: {on: yes, no: off, ZERO: 007, V: 1e3, N: 0x1F}\n",
        source="t.yaml", schema=SCHEMA,
    )
    assert doc.data == {
        "commit": "1234567890123456789012345678901234567890",
        "python": "3.10",
        "count": 7,
        "flag": True,
        "env": {"on": "yes", "no": "off", "ZERO": "007", "V": "1e3", "N": "0x1F"},
    }


def test_yes_is_not_a_boolean_and_text_is_not_a_number():
    with pytest.raises(DocumentError) as exc:
        load("flag: yes\ncount: '7'\n", source="t.yaml", schema=SCHEMA)
    fields = {p.field: p.line for p in exc.value.problems}
    assert fields == {"flag": 1, "count": 2}


def test_a_float_is_not_an_integer_even_when_whole():
    with pytest.raises(DocumentError) as exc:
        load("count: 4.0\n", source="t.yaml", schema=SCHEMA)
    assert exc.value.problems[0].field == "count"
    assert "'4.0'" in exc.value.problems[0].message


def test_size_limit():
    with pytest.raises(DocumentError, match="limit is 100 bytes"):
        load("a: " + "x" * 200, source="t.yaml", limits=Limits(max_bytes=100))


def test_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i-1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    with pytest.raises(DocumentError, match="expands beyond"):
        load("\n".join(lines) + "\n", source="bomb.yaml", limits=Limits(max_nodes=10_000))


def test_recursive_alias_is_refused():
    with pytest.raises(DocumentError):
        load("a: &x [1, *x]\n", source="r.yaml")


def test_deep_nesting_is_refused():
    text = "a: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(DocumentError, match="nesting deeper than 32"):
        load(text, source="deep.yaml")


def test_custom_tags_multiple_documents_and_non_utf8_are_refused():
    with pytest.raises(DocumentError, match="unsupported YAML tag"):
        load("a: !python/object x\n", source="t.yaml")
    with pytest.raises(DocumentError, match="only one YAML document"):
        load("a: 1\n---\nb: 2\n", source="t.yaml")
    with pytest.raises(DocumentError, match="not UTF-8"):
        load(b"a: \xff\n", source="t.yaml")


def test_merge_keys_and_aliases_work_within_bounds():
    doc = load("base: &b {x: 1, y: 2}\nany:\n  <<: *b\n  y: 3\n", source="m.yaml")
    assert doc.data["any"] == {"x": 1, "y": 3}
