"""Every byte fixture under contracts/fixtures decodes to its JSON twin.

A renumbered or retyped field makes the committed bytes decode differently,
so this test fails on an incompatible contract change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from metallo.messaging.registry import message_class

FIXTURES = Path(__file__).resolve().parents[2] / "contracts" / "fixtures"
HEX_FILES = sorted(FIXTURES.glob("*.hex"))


def test_there_are_fixtures():
    assert len(HEX_FILES) >= 6


@pytest.mark.parametrize("path", HEX_FILES, ids=lambda p: p.stem)
def test_fixture_decodes(path: Path):
    type_name = path.name.rsplit(".", 2)[0]  # <full.Name>.<case>.hex
    cls = message_class(type_name)
    assert cls is not None, f"{type_name} is not a known message type"
    data = bytes.fromhex(path.read_text().strip())
    message = cls.FromString(data)
    assert message.SerializeToString(deterministic=True) == data
    expected = json.loads(path.with_name(path.name[: -len(".hex")] + ".json").read_text())
    assert MessageToDict(message, preserving_proto_field_name=True) == expected
