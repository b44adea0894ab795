"""Which worker a runs-due NOTIFY wakes (migration 0006)."""

from __future__ import annotations

from execution_core.adaptors.service import wake_for


class Counter:
    def __init__(self) -> None:
        self.woken = 0

    def wake(self) -> None:
        self.woken += 1


def woken(payload: str) -> tuple[int, int]:
    planning, supervision = Counter(), Counter()
    wake_for(payload, planning=planning, supervision=supervision)  # type: ignore[arg-type]
    return planning.woken, supervision.woken


def test_plan_wakes_only_the_launch_worker():
    assert woken("plan") == (1, 0)


def test_supervise_wakes_only_the_supervisor():
    assert woken("supervise") == (0, 1)


def test_anything_else_wakes_both():
    assert woken("") == (1, 1)
    assert woken("something-newer") == (1, 1)
