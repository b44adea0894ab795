"""Permit-checked log reads (site_runtime.application.log_reads; seed 001, Private Run
log commands): the ten-second cap, an unreachable edge, the message budget."""

from __future__ import annotations

import asyncio
import json

from site_runtime.application.log_reads import (
    PermitUnavailable,
    ReadPermits,
    fit_text,
    permitted_read,
)
from site_runtime.application.ports import SiteCommand


def command(**payload) -> SiteCommand:
    return SiteCommand(
        sequence=3,
        command_id="c-1",
        kind="read-log",
        site_id="lab-slurm",
        environment="slurm",
        run_id="run-1",
        attempt_id="att-1",
        attempt_number=1,
        payload={"stage": "compute", "max_bytes": 100, "viewer": "m-alice", **payload},
    )


class Permits:
    """A ReadPermits port answering from memory (the edge is tested for real elsewhere)."""

    def __init__(self, delay: float = 0.0, unavailable: bool = False) -> None:
        self.delay = delay
        self.unavailable = unavailable
        self.calls: list[str] = []

    async def authorise_read(self, request):
        self.calls.append("authorise")
        if self.unavailable:
            raise PermitUnavailable("edge down")
        await asyncio.sleep(self.delay)
        return {"permit_id": "rp-1", **request}

    async def check_read_permit(self, permit_id):
        self.calls.append(f"check {permit_id}")
        return {"permit_id": permit_id}


async def tail(stage: str, max_bytes: int) -> tuple[bytes, int]:
    data = b"0123456789" * 20
    return data[-max_bytes:], len(data)


def test_the_fake_is_a_read_permits_port():
    assert isinstance(Permits(), ReadPermits)


async def test_a_read_is_permitted_confirmed_read_and_confirmed_again():
    permits = Permits()
    got = await permitted_read(command(), permits, tail)
    assert got.outcome == "succeeded"
    assert got.observation == {
        "log": {"stage": "compute", "text": ("0123456789" * 10), "truncated": True}
    }
    assert permits.calls == ["authorise", "check rp-1", "check rp-1"]


async def test_a_read_longer_than_its_cap_is_refused_without_text():
    got = await permitted_read(command(), Permits(delay=5), tail, seconds=0.05)
    assert (got.outcome, got.code, got.observation) == ("refused", "log-read-timeout", None)


async def test_an_unreachable_edge_or_no_permit_source_refuses_at_once():
    got = await permitted_read(command(), Permits(unavailable=True), tail)
    assert (got.outcome, got.code) == ("refused", "authority-unavailable")
    got = await permitted_read(command(), None, tail)
    assert (got.outcome, got.code) == ("refused", "read-permit-unavailable")


def test_text_is_kept_inside_the_message_budget():
    data = ("\n" * 3000).encode()  # each newline doubles in JSON
    text, truncated = fit_text(data, len(data), budget=1000)
    assert truncated is True
    assert len(json.dumps(text, ensure_ascii=False).encode()) <= 1000
    assert fit_text(b"short", 5) == ("short", False)
