"""Merging owners' audit pages into one page, oldest first, with per-owner cursors."""

from __future__ import annotations

import pytest

from metallo.audit.merge import BadCursor, MergedCursor, merge_pages
from metallo.common.v1 import common_pb2

OWNERS = ("execution_core", "pipeline_coordination", "site_coordination")


def record(service: str, seq: int, second: int) -> common_pb2.AuditRecord:
    return common_pb2.AuditRecord(record_id=f"{service}:{seq}", service=service,
                                  recorded_at=f"2026-12-02T03:00:{second:02d}+00:00",
                                  cursor=f"{service}-after-{seq}")


def page(*records, more: bool = False) -> common_pb2.AuditRecords:
    reply = common_pb2.AuditRecords(records=list(records))
    if more:
        reply.page.next_page_token = records[-1].cursor
    return reply


def test_records_merge_by_time_and_each_owner_resumes_after_its_last_kept():
    start = MergedCursor.start(OWNERS)
    pages = {
        "execution_core": page(record("execution_core", 1, 1), record("execution_core", 2, 5),
                               more=True),
        "pipeline_coordination": page(record("pipeline_coordination", 7, 2)),
        "site_coordination": page(),
    }
    kept, following = merge_pages(start, pages, 2)
    assert [r.record_id for r in kept] == ["execution_core:1", "pipeline_coordination:7"]
    # execution_core resumes after :1; pipeline gave everything; site had nothing.
    assert following.positions == {"execution_core": "execution_core-after-1"}
    assert MergedCursor.decode(following.encode(), OWNERS) == following


def test_an_owner_with_records_left_over_keeps_its_old_position():
    cursor = MergedCursor({"execution_core": "e-at-9", "site_coordination": ""})
    pages = {"execution_core": page(record("execution_core", 10, 9)),
             "site_coordination": page(record("site_coordination", 1, 1),
                                       record("site_coordination", 2, 2))}
    kept, following = merge_pages(cursor, pages, 2)
    assert [r.service for r in kept] == ["site_coordination"] * 2
    assert following.positions == {"execution_core": "e-at-9"}


def test_ties_in_time_order_by_service_then_sequence():
    same = [record("site_coordination", 1, 3), record("execution_core", 12, 3),
            record("execution_core", 3, 3)]
    kept, following = merge_pages(MergedCursor.start(OWNERS[:1] + OWNERS[2:]), {
        "execution_core": page(same[2], same[1]), "site_coordination": page(same[0])}, 10)
    assert [r.record_id for r in kept] == ["execution_core:3", "execution_core:12",
                                           "site_coordination:1"]
    assert following.encode() == ""


@pytest.mark.parametrize("token", ["", "not base64!", "e30", "eyJ4IjogIiJ9"])
def test_foreign_tokens_are_refused(token):
    with pytest.raises(BadCursor):
        MergedCursor.decode(token, OWNERS)
