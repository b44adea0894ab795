"""Merging several owners' audit pages into one, oldest first (no I/O).

Every owner answers ``ListAuditRecords`` for its own records only. A client
listing a Project's whole audit asks each owner for a page, merges the records by
``(recorded_at, service, sequence)``, keeps the first ``page_size``, and resumes
each owner after the last of its records it kept. The merged page token holds
those per-owner positions (:class:`MergedCursor`); an owner that has nothing more
drops out of it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from metallo.common.v1 import common_pb2


class BadCursor(ValueError):
    """A merged page token that is not one this module wrote."""


@dataclass(frozen=True)
class MergedCursor:
    """Per owner (service name), the page token to resume it from ("" = its first
    record). Owners absent from ``positions`` have nothing more to give."""

    positions: Mapping[str, str]

    @classmethod
    def start(cls, services: Sequence[str]) -> MergedCursor:
        """Every owner from its first record."""
        return cls({s: "" for s in services})

    def encode(self) -> str:
        """The opaque merged page token ("" when no owner has more)."""
        if not self.positions:
            return ""
        raw = json.dumps(dict(sorted(self.positions.items())), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, services: Sequence[str]) -> MergedCursor:
        """The cursor of a merged page token; raises :class:`BadCursor`."""
        try:
            value = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        except (ValueError, TypeError) as exc:
            raise BadCursor("the page token is not valid") from exc
        if not isinstance(value, dict) or not value or not all(
                k in services and isinstance(v, str) for k, v in value.items()):
            raise BadCursor("the page token is not valid")
        return cls(value)


def _order(record: common_pb2.AuditRecord) -> tuple[datetime, str, int]:
    sequence = record.record_id.rsplit(":", 1)[-1]
    return (datetime.fromisoformat(record.recorded_at), record.service,
            int(sequence) if sequence.isdigit() else 0)


def merge_pages(cursor: MergedCursor, pages: Mapping[str, common_pb2.AuditRecords],
                page_size: int) -> tuple[list[common_pb2.AuditRecord], MergedCursor]:
    """The first ``page_size`` records of the owners' ``pages`` (each asked from its
    position in ``cursor`` for ``page_size`` records) oldest first, and the cursor
    for the next merged page."""
    merged = sorted((r for page in pages.values() for r in page.records), key=_order)
    taken = merged[:page_size]
    positions: dict[str, str] = {}
    for service, page in pages.items():
        mine = [r for r in taken if r.service == service]
        left_over = len(mine) < len(page.records)
        if not left_over and not page.page.next_page_token:
            continue  # the owner gave everything it has
        positions[service] = mine[-1].cursor if mine else cursor.positions[service]
    return taken, MergedCursor(positions)
