"""docs/contracts.md lists every command, query and event, and each has a byte fixture."""

from __future__ import annotations

import re
from pathlib import Path

from metallo.messaging.registry import _all_messages
from metallo.messaging.topology import is_query

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = (ROOT / "docs" / "contracts.md").read_text()
FIXTURES = {p.name.rsplit(".", 2)[0] for p in (ROOT / "contracts" / "fixtures").glob("*.hex")}


def _platform_messages():
    for name, cls in _all_messages().items():
        if name.startswith(("metallo.common.", "metallo.testkit.")):
            continue
        yield name, cls


def _is_command(cls) -> bool:
    field = cls.DESCRIPTOR.fields_by_number.get(1)
    return bool(field and field.message_type and field.message_type.name == "CommandMetadata")


def _events_in_catalogue() -> set[str]:
    section = CATALOGUE.split("## Events", 1)[1].split("\n## ", 1)[0]
    return {f"metallo.{ctx}.v1.{name}" for ctx, name in re.findall(r"^\| (\w+) \| `(\w+)`", section, re.MULTILINE)}


def test_every_command_and_query_is_catalogued():
    missing = [
        name for name, cls in _platform_messages()
        if (_is_command(cls) or is_query(cls)) and f"`{name.rsplit('.', 1)[1]}`" not in CATALOGUE
    ]
    assert not missing, f"add these to docs/contracts.md: {missing}"


def test_catalogued_events_exist():
    events = _events_in_catalogue()
    assert len(events) >= 8
    unknown = sorted(e for e in events if e not in _all_messages())
    assert not unknown, unknown


def test_every_command_and_event_has_a_fixture():
    commands = {name for name, cls in _platform_messages() if _is_command(cls)}
    missing = sorted((commands | _events_in_catalogue()) - FIXTURES)
    assert not missing, f"add samples to contracts/fixtures/samples.py and run scripts/gen-fixtures: {missing}"
