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


def test_nul_and_lone_surrogates_are_refused_in_keys_and_values_even_where_unconstrained():
    text = ('env: {"K\\0": "1", OK: "a\\ud800"}\n'
            'any: [x, {deep: ["\\0"]}]\n'
            'python: &p "\\udfff"\n'
            'commit: *p\n')
    with pytest.raises(DocumentError) as e:
        load(text, source="t.yaml", schema=SCHEMA)
    got = [(p.line, p.column, p.field, p.message.split(" (")[0]) for p in e.value.problems]
    assert got == [
        (1, 7, "env.K\\0", "text holds a NUL character"),
        (1, 23, "env.OK", "text holds a lone surrogate"),
        (2, 18, "any[1].deep[0]", "text holds a NUL character"),
        (3, 9, "python", "text holds a lone surrogate"),  # the alias repeats it: said once
    ]
    assert "\\ud800" in e.value.problems[1].message
    str(e.value).encode("utf-8")  # the error itself is valid UTF-8 text with no NUL
    assert "\0" not in str(e.value)


def test_schema_messages_never_dump_a_large_instance():
    schema = {"type": "object", "properties": {
        "many": {"type": "array", "maxItems": 3, "uniqueItems": True},
        "few": {"type": "array", "minItems": 2},
        "map": {"type": "object", "maxProperties": 2},
        "text": {"type": "string", "maxLength": 10, "pattern": "^[a-z]*$"},
        "count": {"type": "integer"},
    }}
    big = ", ".join(f"v{i}" for i in range(200))
    text = (f"many: [{big}]\n"
            "few: [a]\n"
            "map: {a: 1, b: 2, c: 3}\n"
            f"text: {'X' * 500}\n"
            f"count: [{big}]\n")
    with pytest.raises(DocumentError) as e:
        load(text, source="t.yaml", schema=schema)
    got = {(p.field, p.message) for p in e.value.problems}
    assert ("many", "200 items; at most 3 are allowed") in got
    assert ("few", "1 item; at least 2 are needed") in got
    assert ("map", "3 keys; at most 2 are allowed") in got
    assert ("text", "500 characters; at most 10 are allowed") in got
    assert all(len(p.message) < 200 for p in e.value.problems), e.value
    pattern = next(m for f, m in got if f == "text" and "match" in m)
    assert "(500 characters) does not match" in pattern
    assert next(m for f, m in got if f == "count").endswith("… (200 items)")


def test_a_duplicate_item_is_named_at_the_second_ones_line():
    schema = {"type": "object", "properties": {"items": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(DocumentError) as e:
        load("items:\n  - {x: a}\n  - {x: b}\n  - {x: a}\n", source="t.yaml", schema=schema)
    [p] = e.value.problems
    assert (p.line, p.field, p.message) == (4, "items[2]", "the same as items[0] (line 2); no two may be alike")
