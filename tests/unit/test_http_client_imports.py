"""httpx (the Site Runtime's edge client, the CLI's HTTPS) must not search sys.path on
every request: httpcore imports sniffio per call and Python does not cache a failed
import (encode/httpcore discussion #1102). pyproject.toml installs sniffio for that."""

from __future__ import annotations

import asyncio
import importlib.machinery

from httpcore._synchronization import current_async_library


def test_httpcore_asks_for_its_async_library_without_an_import_search(monkeypatch):
    searches: list[str] = []
    original = importlib.machinery.PathFinder.find_spec.__func__

    def counting(cls, name, path=None, target=None):
        searches.append(name)
        return original(cls, name, path, target)

    async def ask() -> str:
        return current_async_library()

    assert asyncio.run(ask()) == "asyncio"  # first call: imports whatever it needs
    monkeypatch.setattr(importlib.machinery.PathFinder, "find_spec", classmethod(counting))
    for _ in range(3):
        assert asyncio.run(ask()) == "asyncio"
    assert searches == []
