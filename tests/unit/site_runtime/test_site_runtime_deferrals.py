"""Every deferral code the Site Runtime can raise is catalogued (seed 001), and the
Runtime's catalogue agrees with the edge's ``contracts/deferrals.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from site_runtime.domain.deferrals import DEFERRALS, is_catalogued

ROOT = Path(__file__).resolve().parents[3]
SOURCES = ROOT / "services" / "site_runtime"
CONTRACT = ROOT / "contracts" / "deferrals.json"
# Calls whose string arguments may carry a deferral code: Deferred(...) and the
# Unavailable errors whose ``code`` the executors turn into a Deferred; plus the
# ``unavailable_code=`` the edge client hands to them.
_CALL = re.compile(
    r"\b(?:Deferred|EdgeUnavailable)\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.DOTALL
)
_KWARG = re.compile(r"\bunavailable_code\s*=\s*[\"']([^\"']+)[\"']")
_STRING = re.compile(r"[\"']([^\"'\n]*)[\"']")
_CODE = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")


def codes_in(text: str) -> set[str]:
    """Deferral-code literals of one source text."""
    literals = [
        m.group(1) for call in _CALL.finditer(text) for m in _STRING.finditer(call.group("args"))
    ]
    literals += [m.group(1) for m in _KWARG.finditer(text)]
    return {literal for literal in literals if _CODE.match(literal)}


def used_codes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SOURCES.rglob("*.py")):
        for code in codes_in(path.read_text(encoding="utf-8")):
            found.setdefault(code, []).append(str(path.relative_to(ROOT)))
    return found


def test_the_scanner_flags_an_uncatalogued_code_however_the_call_is_written():
    source = 'raise Deferred(\n    "made-up-wait", "text with spaces")\nDeferred(code="other-wait")'
    assert codes_in(source) == {"made-up-wait", "other-wait"}
    assert not is_catalogued("made-up-wait")


def test_the_scanner_sees_the_runtime_deferrals():
    codes = used_codes()
    # The local executor's own deferrals must be found, or the scan proves nothing.
    for code in (
        "authority-unavailable",
        "repository-unavailable",
        "workspace-unavailable",
    ):
        assert code in codes, code


def test_every_deferral_used_in_site_runtime_is_catalogued():
    missing = {code: where for code, where in used_codes().items() if not is_catalogued(code)}
    assert missing == {}, f"uncatalogued deferral codes: {missing}"


def test_the_catalogue_agrees_with_the_edge_contract():
    contract = json.loads(CONTRACT.read_text(encoding="utf-8"))
    edge_codes = {entry["code"] for entry in contract["deferrals"]}
    assert set(DEFERRALS) == edge_codes
    assert all(text.strip() for text in DEFERRALS.values())
