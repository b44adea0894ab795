"""Loads the deferral catalogue ``contracts/deferrals.json`` (seed 001)."""

from __future__ import annotations

import json
from pathlib import Path

from site_coordination.domain.deferrals import DeferralCatalogue

DEFAULT_PATH = Path(__file__).resolve().parents[3] / "contracts" / "deferrals.json"


def load_catalogue(path: Path = DEFAULT_PATH) -> DeferralCatalogue:
    """Read ``{"deferrals": [{"code", "description"}, ...]}``; raise ValueError when malformed."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    entries = data.get("deferrals") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected an object with a 'deferrals' list")
    descriptions: dict[str, str] = {}
    for entry in entries:
        code, text = entry.get("code"), entry.get("description")
        if not isinstance(code, str) or not isinstance(text, str) or code in descriptions:
            raise ValueError(f"{path}: every deferral needs a unique code and a description")
        descriptions[code] = text
    return DeferralCatalogue(descriptions)
