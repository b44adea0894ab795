"""Native-end notices (ADR 0016): the notifier's once-per-Attempt memory and its bounds,
``EdgeClient.notice_native_end`` against the edge's answers (httpx.MockTransport plays
the edge; the real route is tested with Site Coordination), and the wiring of
``python -m site_runtime``."""

from __future__ import annotations

import argparse
import asyncio
import logging

import httpx
import pytest

from site_runtime.__main__ import build_executor
from site_runtime.adaptors.edge.client import EdgeClient, EdgeSettings
from site_runtime.application.delivery import EdgeRefused, EdgeUnavailable
from site_runtime.application.native_ends import NativeEndNotices
from tests.unit.edge_client_support import client_with


class Sent:
    def __init__(self, answer=True, error: Exception | None = None, hang: bool = False):
        self.calls: list[str] = []
        self.answer, self.error, self.hang = answer, error, hang

    async def __call__(self, attempt_id: str):
        self.calls.append(attempt_id)
        if self.hang:
            await asyncio.sleep(3600)
        if self.error is not None:
            raise self.error
        return self.answer


async def settle(notices: NativeEndNotices) -> None:
    for _ in range(200):
        if notices.in_flight == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("notices still in flight")


async def test_each_attempt_is_noticed_once():
    sent = Sent()
    notices = NativeEndNotices(sent)
    for attempt in ("a-1", "a-2", "a-1", "a-2", "a-1"):
        notices.notice(attempt)
    await settle(notices)
    assert sent.calls == ["a-1", "a-2"]
    notices.notice("a-1")
    await settle(notices)
    assert sent.calls == ["a-1", "a-2"]


async def test_the_memory_is_bounded_and_forgets_the_oldest():
    sent = Sent()
    notices = NativeEndNotices(sent, memory=3)
    for attempt in ("a-1", "a-2", "a-3", "a-4"):
        notices.notice(attempt)
    await settle(notices)
    assert len(notices._noticed) == 3
    assert not notices.noticed("a-1") and all(notices.noticed(a) for a in ("a-2", "a-3", "a-4"))
    notices.notice("a-4")  # still remembered: not sent again
    notices.notice("a-1")  # forgotten: sent again (a hint twice is harmless)
    await settle(notices)
    assert sent.calls == ["a-1", "a-2", "a-3", "a-4", "a-1"]


async def test_at_most_concurrency_requests_are_open_and_the_rest_wait_their_turn():
    sent = Sent(hang=True)
    notices = NativeEndNotices(sent, concurrency=2, timeout_seconds=0.2)
    for attempt in ("a-1", "a-2", "a-3"):
        notices.notice(attempt)
    await asyncio.sleep(0.05)
    assert sent.calls == ["a-1", "a-2"] and notices.in_flight == 3
    await settle(notices)  # the first two time out, then the third gets its turn
    assert sent.calls == ["a-1", "a-2", "a-3"]


async def test_no_callback_does_nothing():
    notices = NativeEndNotices(None)
    notices.notice("a-1")
    assert notices.in_flight == 0 and not notices.noticed("a-1")
    await notices.close()


def test_outside_an_event_loop_nothing_is_sent():
    sent = Sent()
    notices = NativeEndNotices(sent)
    notices.notice("a-1")  # never raises
    assert sent.calls == [] and notices.in_flight == 0


async def test_failures_are_logged_without_raising(caplog):
    caplog.set_level(logging.INFO, logger="site_runtime.application.native_ends")
    failing = NativeEndNotices(
        Sent(error=EdgeRefused(404, "attempt-not-in-stream", "psb_secret", None))
    )
    failing.notice("a-1")
    await settle(failing)
    unavailable = NativeEndNotices(Sent(error=EdgeUnavailable("down", "site-edge-unreachable")))
    unavailable.notice("a-2")
    await settle(unavailable)
    text = caplog.text
    assert "a-1: native-end notice failed (EdgeRefused attempt-not-in-stream)" in text
    assert "a-2: native-end notice failed (EdgeUnavailable site-edge-unreachable)" in text
    assert "psb_" not in text  # messages (which may carry anything) are not logged


async def test_a_hanging_send_is_cut_off_by_the_timeout(caplog):
    caplog.set_level(logging.INFO, logger="site_runtime.application.native_ends")
    sent = Sent(hang=True)
    notices = NativeEndNotices(sent, timeout_seconds=0.1)
    notices.notice("a-1")
    assert notices.in_flight == 1
    await settle(notices)
    assert "a-1: native-end notice timed out" in caplog.text


async def test_too_many_in_flight_are_dropped():
    sent = Sent(hang=True)
    notices = NativeEndNotices(sent, max_in_flight=2)
    for attempt in ("a-1", "a-2", "a-3"):
        notices.notice(attempt)
    assert notices.in_flight == 2 and not notices.noticed("a-3")
    await notices.close()
    assert notices.in_flight == 0


async def test_close_cancels_what_is_in_flight():
    sent = Sent(hang=True)
    notices = NativeEndNotices(sent)
    notices.notice("a-1")
    notices.notice("a-2")
    await asyncio.sleep(0)
    await asyncio.wait_for(notices.close(), 1)
    assert notices.in_flight == 0 and sent.calls == ["a-1", "a-2"]


# ------------------------------------------------------------------ the edge client
async def test_the_notice_posts_no_body_and_returns_the_flag():
    seen: list[httpx.Request] = []
    answers = iter([True, False])

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(202, json={"noticed": next(answers)})

    client = client_with(handler)
    assert await client.notice_native_end("att-1") is True
    assert await client.notice_native_end("att-1") is False  # noticed already
    assert [(r.method, r.url.path) for r in seen] == [("POST", "/v1/attempts/att-1/native-end")] * 2
    assert seen[0].content == b"" and seen[0].headers["authorization"] == "Bearer psb_test"


async def test_an_attempt_the_stream_does_not_know_is_refused():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            404, json={"error": {"code": "attempt-not-in-stream", "message": "unknown"}}
        )

    client = client_with(handler)
    with pytest.raises(EdgeRefused) as refused:
        await client.notice_native_end("att-9")
    assert (refused.value.status, refused.value.code) == (404, "attempt-not-in-stream")
    with pytest.raises(EdgeRefused):  # a refusal of one Attempt is not remembered
        await client.notice_native_end("att-9")


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"error": {"code": "credential-unknown"}}, EdgeRefused),
        (503, {"error": {"code": "database-unavailable"}}, EdgeUnavailable),
    ],
)
async def test_other_answers_raise_the_clients_errors(status, body, error):
    client = client_with(lambda request: httpx.Response(status, json=body))
    with pytest.raises(error):
        await client.notice_native_end("att-1")


async def test_an_older_edge_without_the_route_is_asked_once():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(404, json={"detail": "Not Found"})

    client = client_with(handler)
    assert await client.notice_native_end("att-1") is False
    assert await client.notice_native_end("att-2") is False
    assert seen == ["/v1/attempts/att-1/native-end"]


# ------------------------------------------------------------------ wiring
async def test_the_local_executor_sends_notices_through_the_edge_client(tmp_path):
    edge = EdgeClient(EdgeSettings(base_url="https://edge.test", credential="psb_test"))
    args = argparse.Namespace(
        executor="local", state_dir=str(tmp_path), workspace_root=None, ca=None
    )
    executor = build_executor(args, {}, edge)
    try:
        assert executor.native_ends.send == edge.notice_native_end
        assert executor.native_ends.timeout_seconds == 5.0
    finally:
        executor.close()
        executor.journal.close()
        await edge.close()


async def test_an_edge_without_the_route_is_asked_again_after_a_while(monkeypatch):
    # An older edge (or a proxy mid-rollout) answers a bare 404: the client stops asking
    # for NATIVE_END_RETRY_SECONDS, then asks again.
    from site_runtime.adaptors.edge import client as ec

    answers = [httpx.Response(404, text="Not Found"), httpx.Response(202, json={"noticed": True})]
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return answers.pop(0)

    client = client_with(handler)
    now = [1000.0]
    monkeypatch.setattr(ec.time, "monotonic", lambda: now[0])
    try:
        assert await client.notice_native_end("att-1") is False
        assert await client.notice_native_end("att-2") is False  # not asked meanwhile
        assert asked == ["/v1/attempts/att-1/native-end"]
        now[0] += ec.NATIVE_END_RETRY_SECONDS
        assert await client.notice_native_end("att-3") is True
        assert asked[-1] == "/v1/attempts/att-3/native-end"
    finally:
        await client.close()
