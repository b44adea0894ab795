"""Request paths enter the edge's log lines escaped (site_coordination.adaptors.edge.caller)."""

from __future__ import annotations

from site_coordination.adaptors.edge.caller import printable


def test_control_characters_and_backslashes_are_escaped():
    assert printable("/v1/a\x00b\nc\r\x1b[31m\x7f\x85\u2028\\") == (
        "/v1/a\\x00b\\x0ac\\x0d\\x1b[31m\\x7f\\x85\\u2028\\x5c")
    assert printable("/v1/attempts/é-ünïcode") == "/v1/attempts/é-ünïcode"


def test_long_paths_are_cut_and_marked():
    assert printable("a" * 400) == "a" * 300 + "…"
    assert printable("a" * 300) == "a" * 300
    line = printable("\x00" * 400)
    assert line.endswith("…") and "\x00" not in line
