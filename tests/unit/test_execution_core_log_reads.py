"""The pure rules of private Run log reads (execution_core.domain.log_reads; seed 001)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from execution_core.domain import log_reads as lr


def test_ids_are_deterministic_per_project_command_and_read():
    read_id = lr.read_id_for("demo", "cmd-1")
    assert read_id == lr.read_id_for("demo", "cmd-1") != lr.read_id_for("other", "cmd-1")
    assert lr.site_command_id_for(read_id) == lr.site_command_id_for(read_id) != read_id


def test_max_bytes_is_bounded_and_zero_means_the_cap():
    assert lr.effective_max_bytes(0) == lr.MAX_LOG_BYTES == 5 * 1024 * 1024
    assert lr.effective_max_bytes(1) == 1
    for bad in (-1, lr.MAX_LOG_BYTES + 1):
        with pytest.raises(ValueError):
            lr.effective_max_bytes(bad)


def test_the_latest_or_the_named_attempt():
    attempts = [{"number": 1}, {"number": 3}, {"number": 2}]
    assert lr.pick_attempt(attempts, 0) == {"number": 3}
    assert lr.pick_attempt(attempts, 2) == {"number": 2}
    assert lr.pick_attempt(attempts, 4) is None
    assert lr.pick_attempt([], 0) is None


def test_a_pending_read_past_its_deadline_is_expired():
    now = datetime(2026, 11, 29, 12, tzinfo=UTC)
    assert lr.visible_state("pending", now + timedelta(seconds=1), now) == ("pending", "")
    assert lr.visible_state("pending", now, now) == ("expired", "log-read-expired")
    assert lr.visible_state("ready", now - timedelta(hours=1), now) == ("ready", "")


def test_answers_from_results():
    ok = {"outcome": "succeeded", "observation": {"log": {"text": "aé\x00z", "truncated": False}}}
    assert lr.answer_from_result(ok, 100) == lr.LogAnswer("ready", "aé\ufffdz", False)
    tail = lr.answer_from_result(ok, 2)  # bytes "\x00z": the tail, marked truncated
    assert (tail.state, tail.text, tail.truncated) == ("ready", "\ufffdz", True)
    refused = {"outcome": "refused", "code": "authorisation-refused", "message": "viewer"}
    assert lr.answer_from_result(refused, 10).reason_code == "authorisation-refused"
    empty = lr.answer_from_result({"outcome": "succeeded", "observation": None}, 10)
    assert (empty.state, empty.reason_code) == ("refused", "log-result-malformed")


def test_a_read_from_an_offset_is_bounded_by_the_log_bytes_it_covers_not_by_its_text():
    # Undecodable bytes come back as U+FFFD (3 bytes each): 10 bytes of Latin-1 log
    # become 16 bytes of text, and still cover only 10 of the log.
    text = "Caf\ufffd cr\ufffdme"
    log = {"stage": "compute", "text": text, "truncated": False,
           "offset": 40, "next_offset": 50, "size": 50}
    ok = {"outcome": "succeeded", "observation": {"log": log}}
    got = lr.answer_from_result(ok, 10, requested_offset=40)
    assert (got.state, got.text, got.text_offset, got.next_offset) == ("ready", text, 40, 50)
    # Covering more than asked, from another offset, or without offsets: malformed.
    for change in ({"next_offset": 51}, {"offset": 39}, {"offset": None, "next_offset": None}):
        bad = {"outcome": "succeeded", "observation": {"log": {**log, **change}}}
        assert lr.answer_from_result(bad, 10, requested_offset=40).reason_code == lr.MALFORMED_CODE
