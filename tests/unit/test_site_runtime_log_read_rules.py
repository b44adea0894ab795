"""Permit-checked log reads (site_runtime.application.log_reads; seed 001, Private Run
log commands): the ten-second cap, an unreachable edge, the message budget, and reads
from an offset (following a log as it grows) on real files."""

from __future__ import annotations

import asyncio
import json

from site_runtime.application.log_reads import (
    PermitUnavailable,
    ReadPermits,
    complete_utf8,
    fit_head,
    fit_tail,
    permitted_read,
    read_span,
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


async def tail(stage: str, max_bytes: int, offset: int | None) -> tuple[bytes, int, int]:
    data = b"0123456789" * 20
    return data[-max_bytes:], len(data) - max_bytes, len(data)


def test_the_fake_is_a_read_permits_port():
    assert isinstance(Permits(), ReadPermits)


async def test_a_read_is_permitted_confirmed_read_and_confirmed_again():
    permits = Permits()
    got = await permitted_read(command(), permits, tail)
    assert got.outcome == "succeeded"
    assert got.observation == {
        "log": {
            "stage": "compute",
            "text": ("0123456789" * 10),
            "truncated": True,
            "offset": 100,
            "next_offset": 200,
            "size": 200,
        }
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
    text, kept = fit_tail(data, budget=1000)
    assert 0 < kept < len(data) and text == "\n" * kept  # the newest bytes, cut to fit
    assert len(json.dumps(text, ensure_ascii=False).encode()) <= 1000
    assert fit_tail(b"short") == ("short", 5)


def on_file(path):
    async def read(stage: str, max_bytes: int, offset: int | None):
        return read_span(path, max_bytes, offset)

    return read


async def test_a_log_is_followed_from_offset_to_offset_without_loss_or_repeat(tmp_path):
    log = tmp_path / "compute.log"
    read = on_file(log)
    got = await permitted_read(command(offset=0), Permits(), read)
    assert got.observation["log"] == {"stage": "compute", "text": "", "truncated": False,
                                      "offset": 0, "next_offset": 0, "size": 0}
    seen, offset = "", 0
    written = ""
    for chunk in ("epoch 1 loss 0.9\n", "épo", "ch 2 ✓\n", "x" * 250):
        with log.open("ab") as f:
            # A character split across two writes: its first byte alone, then the rest.
            data = chunk.encode()
            f.write(data[:1])
            f.flush()
            part = (await permitted_read(command(offset=offset), Permits(), read)).observation
            f.write(data[1:])
        written += chunk
        while True:
            got = (await permitted_read(command(offset=offset), Permits(), read)).observation
            assert got["log"]["offset"] == offset and "\ufffd" not in got["log"]["text"]
            seen += got["log"]["text"]
            offset = got["log"]["next_offset"]
            if not got["log"]["truncated"]:
                break
        assert part["log"]["next_offset"] <= offset
    assert seen == written and offset == len(written.encode())


async def test_an_offset_past_the_end_reads_nothing_and_a_bad_offset_is_refused(tmp_path):
    log = tmp_path / "compute.log"
    log.write_bytes(b"abc")
    got = await permitted_read(command(offset=10), Permits(), on_file(log))
    # Where it was asked, nothing read; the size below it says the log started over.
    assert {k: got.observation["log"][k] for k in ("text", "offset", "next_offset", "size")} == {
        "text": "", "offset": 10, "next_offset": 10, "size": 3}
    for bad in (-1, "3", 1.5, True, 2**63):
        got = await permitted_read(command(offset=bad), Permits(), on_file(log))
        assert (got.outcome, got.code) == ("refused", "invalid-request"), bad


async def test_a_tail_read_says_where_to_follow_from(tmp_path):
    log = tmp_path / "compute.log"
    log.write_bytes(("line\n" * 100).encode() + "é".encode()[:1])  # é half written
    got = (await permitted_read(command(), Permits(), on_file(log))).observation["log"]
    # The last 100 bytes, less the half character (left for the read from next_offset).
    assert got["text"] == "ine\n" + "line\n" * 19 and got["truncated"] is True
    assert (got["offset"], got["next_offset"], got["size"]) == (401, 500, 501)


def test_utf8_completion_keeps_whole_characters_only():
    assert complete_utf8("aé".encode()[:2]) == b"a"
    assert complete_utf8("a€".encode()[:3]) == b"a"
    assert complete_utf8("a€".encode()) == "a€".encode()
    assert complete_utf8(b"a\xff") == b"a\xff"  # never valid: kept, shown as U+FFFD
    assert complete_utf8(b"") == b""


def test_a_read_from_an_offset_keeps_its_head_inside_the_budget():
    data = ("é\n" * 2000).encode()
    text, covered = fit_head(data, budget=1000)
    assert len(json.dumps(text, ensure_ascii=False).encode()) <= 1000
    assert data[:covered].decode() == text and 0 < covered < len(data)


async def test_a_log_ending_inside_a_character_is_not_read_again_at_once(tmp_path):
    # A reviewer's case: the job died after the first two bytes of "€"; an answer saying
    # "more follows" made a follower ask again without pause, forever.
    log = tmp_path / "compute.log"
    log.write_bytes(b"loss " + "€".encode()[:2])
    got = (await permitted_read(command(offset=0), Permits(), on_file(log))).observation["log"]
    assert (got["text"], got["next_offset"], got["size"], got["truncated"]) == ("loss ", 5, 7, False)
    again = (await permitted_read(command(offset=5), Permits(), on_file(log))).observation["log"]
    assert (again["text"], again["next_offset"], again["truncated"]) == ("", 5, False)


async def test_a_read_limit_inside_a_character_still_makes_progress(tmp_path):
    log = tmp_path / "compute.log"
    log.write_bytes("a✓b".encode())
    offset, texts = 0, []
    for _ in range(5):
        got = await permitted_read(command(offset=offset, max_bytes=2), Permits(), on_file(log))
        texts.append(got.observation["log"]["text"])
        assert got.observation["log"]["next_offset"] > offset or offset == 5
        offset = got.observation["log"]["next_offset"]
        if offset == 5:
            break
    assert offset == 5 and texts[0] == "a"  # "✓" (3 bytes) cannot fit 2: shown as U+FFFD
