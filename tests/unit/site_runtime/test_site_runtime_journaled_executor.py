"""The shared command prologue (application/journaled.py) and the worker's typed
dispatch (application/ports.py ``command_handlers``), without any native system."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from site_runtime.application.journaled import COMMAND_RULES, JournaledExecutor
from site_runtime.application.ports import (
    CommandResult,
    QueuedBatchExecutor,
    ReconciledServiceExecutor,
    SiteCommand,
    command_handlers,
)


def command(kind: str, command_id: str = "c-1", attempt_id: str = "a-1") -> SiteCommand:
    return SiteCommand(1, command_id, kind, "site", "slurm", "r-1", attempt_id, 1)


class Journal:
    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}
        self.attempts: set[str] = set()

    def result(self, command_id: str) -> dict[str, Any] | None:
        return self.results.get(command_id)

    def attempt(self, attempt_id: str) -> object | None:
        return attempt_id if attempt_id in self.attempts else None


class Recorder:
    """Handlers that record each call and whether the Attempt's lock was held."""

    def __init__(self, wrapper_box: list[JournaledExecutor]) -> None:
        self.calls: list[tuple[str, bool]] = []
        self._box = wrapper_box

    def handler(self, kind: str):
        async def handle(cmd: SiteCommand) -> CommandResult:
            held = self._box[0].lock(cmd.attempt_id).locked()
            self.calls.append((kind, held))
            return CommandResult(cmd.command_id, "succeeded", message=kind)

        return handle


def build(unlocked: tuple[str, ...] = ()) -> tuple[JournaledExecutor, Journal, Recorder]:
    journal, box = Journal(), []
    recorder = Recorder(box)
    wrapper = JournaledExecutor(
        journal, {k: recorder.handler(k) for k in COMMAND_RULES}, unlocked=unlocked
    )
    box.append(wrapper)
    return wrapper, journal, recorder


@pytest.mark.parametrize(
    ("kind", "replays", "locks", "needs_attempt"),
    [
        ("prepare", True, True, False),
        ("start", True, True, True),
        ("observe", False, True, True),
        ("cancel", True, True, True),
        ("read-log", False, False, True),
        ("apply", True, True, False),
        ("terminate", True, True, True),
    ],
)
async def test_each_kind_gets_its_prologue(kind, replays, locks, needs_attempt):
    wrapper, journal, recorder = build()
    saved = CommandResult("c-1", "refused", "saved-code", "saved").to_json()
    journal.results["c-1"] = saved

    first = await wrapper.run(kind, command(kind))
    if replays:
        assert first.to_json() == saved and recorder.calls == []
    elif needs_attempt:
        assert (first.outcome, first.code) == ("refused", "attempt-not-prepared")
        assert recorder.calls == []
    else:
        assert recorder.calls == [(kind, locks)]

    journal.results.clear()
    journal.attempts.add("a-1")
    recorder.calls.clear()
    answered = await wrapper.run(kind, command(kind))
    assert (answered.outcome, answered.message) == ("succeeded", kind)
    assert recorder.calls == [(kind, locks)]


@pytest.mark.parametrize("kind", ["cancel", "terminate"])
async def test_a_stop_of_an_attempt_this_runtime_does_not_know_is_never_closed(kind):
    # It cannot vouch that the native work stopped: refused, so it is asked again.
    wrapper, _journal, recorder = build()
    answer = await wrapper.run(kind, command(kind))
    assert (answer.outcome, answer.code) == ("refused", "attempt-not-prepared")
    assert recorder.calls == []


async def test_recover_is_the_same_path_by_kind():
    wrapper, journal, recorder = build()
    journal.attempts.add("a-1")
    for kind in ("prepare", "start", "cancel"):
        assert (await wrapper.recover(command(kind))).message == kind
    assert [k for k, _ in recorder.calls] == ["prepare", "start", "cancel"]
    odd = await wrapper.recover(command("rollback"))
    assert (odd.outcome, odd.code) == ("refused", "unsupported-command-kind")


async def test_an_unlocked_kind_runs_without_the_lock():
    wrapper, journal, recorder = build(unlocked=("observe",))
    journal.attempts.add("a-1")
    await wrapper.run("observe", command("observe"))
    assert recorder.calls == [("observe", False)]


async def test_commands_of_one_attempt_never_interleave():
    journal, order = Journal(), []

    async def slow(cmd: SiteCommand) -> CommandResult:
        order.append(f"begin {cmd.command_id}")
        await asyncio.sleep(0.01)
        order.append(f"end {cmd.command_id}")
        return CommandResult(cmd.command_id, "succeeded")

    wrapper = JournaledExecutor(journal, {"prepare": slow})
    await asyncio.gather(
        wrapper.run("prepare", command("prepare", "c-1")),
        wrapper.run("prepare", command("prepare", "c-2")),
        wrapper.run("prepare", command("prepare", "c-3", attempt_id="a-2")),
    )
    assert order.index("end c-1") < order.index("begin c-2")
    assert order.index("begin c-3") < order.index("end c-1")  # another Attempt: no wait


class Batch:
    async def prepare(self, c): ...
    async def start(self, c): ...
    async def observe(self, c): ...
    async def cancel(self, c): ...
    async def recover(self, c): ...
    async def read_log(self, c): ...


class Service:
    async def apply(self, c): ...
    async def observe(self, c): ...
    async def terminate(self, c): ...
    async def recover(self, c): ...
    async def read_log(self, c): ...


class Both(Batch, Service):
    pass


def test_dispatch_follows_the_protocols_an_executor_implements():
    assert isinstance(Batch(), QueuedBatchExecutor)
    assert not isinstance(Batch(), ReconciledServiceExecutor)
    assert sorted(command_handlers(Batch())) == [
        "cancel",
        "observe",
        "prepare",
        "read-log",
        "start",
        "start-array",
    ]
    assert sorted(command_handlers(Service())) == ["apply", "observe", "read-log", "terminate"]
    both = command_handlers(Both())
    assert sorted(both) == sorted(
        {"prepare", "start", "start-array", "cancel", "apply", "terminate", "observe", "read-log"}
    )
    with pytest.raises(TypeError):
        command_handlers(object())  # type: ignore[arg-type]


class Arrays(Batch):
    async def start_array(self, c):
        return CommandResult(c.command_id, "succeeded")


async def test_start_array_is_refused_array_unsupported_by_an_executor_without_arrays():
    cmd = command("start-array", "c-9")
    refused = await command_handlers(Batch())["start-array"](cmd)
    assert (refused.outcome, refused.code) == ("refused", "array-unsupported")
    assert "start-array" not in command_handlers(Service())
    started = await command_handlers(Arrays())["start-array"](cmd)
    assert started.outcome == "succeeded"
