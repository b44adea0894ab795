"""Commit points of the kubernetes executor's ``jobs.sqlite`` (docs/site-runtime.md,
Kubernetes: Journal commits).

Every write commits before it returns (one ``synchronous=FULL`` fsync), except inside
:meth:`GroupCommitJournal.grouped` (the ``start`` command). There a write marked
``progress`` (an active Attempt state, a stage's end, a create's uid, a Secret's or
the Job's intent, the command's result) waits in one open transaction for the next
commit point:

- :meth:`GroupCommitJournal.durable` (awaited before every create, delete and grant
  call, and before the answer): commits of tasks arriving together share one fsync;
- any write that is not progress (a grant id, a deletion mark, a tombstone, an end or
  refusal) commits at once, everything pending with it;
- the block's end by an exception commits what is left.

The rule kept: the intent is durable before every create and the result before the
answer. A crash loses at most progress after the last commit point, which handling the
command again derives anew (a lost uid leaves an intent, adopted by name and
identity); a result not yet durable is never replayed (:meth:`result` answers None).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from site_runtime.adaptors.sqlite_journal import ResultJournal, now_iso

#: True inside :meth:`GroupCommitJournal.grouped` (per asyncio task).
_GROUPED: ContextVar[bool] = ContextVar("kubernetes_journal_grouped", default=False)


class GroupCommitJournal(ResultJournal):
    """A :class:`ResultJournal` with the commit points of the module doc."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self._flush: asyncio.Future[None] | None = None
        self._pending_results: set[str] = set()
        self.commits = 0  # fsynced commits so far (the tests pin them per start)

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Within the block (this asyncio task), progress writes wait for the next
        commit point (module doc)."""
        token = _GROUPED.set(True)
        try:
            yield
        except BaseException:
            self.commit()
            raise
        finally:
            _GROUPED.reset(token)

    def commit(self) -> None:
        """Make every write so far durable now (no-op when none is pending)."""
        if self._conn.in_transaction:
            self._conn.execute("COMMIT")
            self.commits += 1
            self._pending_results.clear()

    async def durable(self) -> None:
        """Every write so far is durable when this returns; tasks awaiting together
        share one commit (raises what the commit raises)."""
        if not self._conn.in_transaction:
            return
        if self._flush is None:
            loop = asyncio.get_running_loop()
            self._flush = loop.create_future()
            loop.call_soon(self._commit_batch)
        await asyncio.shield(self._flush)

    def _commit_batch(self) -> None:
        flush, self._flush = self._flush, None
        assert flush is not None
        try:
            self.commit()
        except Exception as error:  # noqa: BLE001 - every waiter gets it
            flush.set_exception(error)
            return
        flush.set_result(None)

    def _write(self, sql: str, params: tuple[Any, ...], *, progress: bool = False) -> None:
        """Run one change: committed now unless it is ``progress`` inside a grouped
        block (module doc)."""
        if progress and _GROUPED.get():
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(sql, params)
            return
        pending = self._conn.in_transaction
        self._conn.execute(sql, params)
        if pending:
            self.commit()
        else:
            self.commits += 1  # committed by itself (autocommit)

    def result(self, command_id: str) -> dict[str, Any] | None:
        """The durable saved result of ``command_id``, or None."""
        if command_id in self._pending_results:
            return None
        return super().result(command_id)

    def save_result(self, command_id: str, result: dict[str, Any]) -> dict[str, Any]:
        """Save the first result for ``command_id`` (progress: :meth:`durable` before the
        answer); return the saved one."""
        self._write(
            "INSERT OR IGNORE INTO results (command_id, result_json, saved_at) VALUES (?, ?, ?)",
            (command_id, json.dumps(result, sort_keys=True), now_iso()),
            progress=True,
        )
        if self._conn.in_transaction:
            self._pending_results.add(command_id)
        saved = ResultJournal.result(self, command_id)
        assert saved is not None
        return saved
