"""The Kubernetes lab bounds each container run's log: past the limit, output is read
and dropped after one line saying so (64 MiB of real output would take a shared
machine too long, so the copier gets a small budget)."""

from __future__ import annotations

import asyncio

from metallo.labs.kubernetes.pod_logs import MAX_LOG_BYTES, copy_stream


class Out(list):
    def write(self, text: str) -> None:
        self.append(text)

    def flush(self) -> None:
        pass


async def test_output_past_the_budget_is_dropped_after_one_notice():
    reader = asyncio.StreamReader()
    reader.feed_data(b"a" * 10 + b"\n" + b"b" * 10 + b"\n" + b"c\n")
    reader.feed_eof()
    out = Out()
    await copy_stream(reader, "stdout", out, [15])
    stamps, streams, texts = zip(*(line.split(" ", 2) for line in out), strict=True)
    assert streams == ("stdout", "stdout") and all(s.endswith("Z") for s in stamps)
    assert texts == ("a" * 10 + "\n",
                     f"[metallo lab: log limit of {MAX_LOG_BYTES} bytes reached; further output is dropped]\n")


async def test_a_last_line_without_newline_is_kept():
    reader = asyncio.StreamReader()
    reader.feed_data(b"one\ntwo")
    reader.feed_eof()
    out = Out()
    await copy_stream(reader, "stderr", out, [MAX_LOG_BYTES])
    assert [line.split(" ", 2)[1:] for line in out] == [["stderr", "one\n"], ["stderr", "two\n"]]
