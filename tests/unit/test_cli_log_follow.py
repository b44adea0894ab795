"""``metallo run logs RUN --follow`` against a stand-in Execution Core whose Site log
grows between reads (docs/runs.md, Following a log): every byte is printed once, in
order; a retry's new Attempt is followed from its first byte; the exit is the Run's."""

from __future__ import annotations

import json

import pytest

from metallo.cli import log_follow
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
)

RUN_ID = "9b1c7f7e-5d43-4d55-9f0e-000000000002"


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(log_follow, "POLL_MIN_SECONDS", 0.01)
    monkeypatch.setattr(log_follow, "POLL_MAX_SECONDS", 0.02)


class Site:
    """A Run whose Attempts' compute logs grow by one piece per read; each answer is
    cut at ``max_bytes`` from the offset asked for, as the Runtime cuts it."""

    def __init__(self, pieces: dict[int, list[bytes]], outcome: str = "succeeded") -> None:
        self.pieces = pieces  # attempt number -> what it writes, one piece per read
        self.logs = {n: b"" for n in pieces}
        self.outcome = outcome
        self.asked: list[tuple[int, int | None]] = []
        self.reads: dict[str, ec.RunLogRead] = {}
        self.expire_next = False
        self.started = 1  # attempts visible so far

    def run(self, _query) -> ec.Run:
        done = all(not p for p in self.pieces.values()) and self.started == len(self.pieces)
        run = ec.Run(run_id=RUN_ID, project="demo", action="train", phase="terminal" if done
                     else "running", outcome=self.outcome if done else "", max_attempts=3)
        for n in range(1, self.started + 1):
            ended = done or n < self.started or not self.pieces[n]
            run.attempts.add(number=n, state=("failed" if n < len(self.pieces) else self.outcome)
                             if ended else "active")
        return run

    def read(self, cmd: ec.ReadRunLog) -> ec.ReadRunLogReply:
        number = cmd.attempt_number or self.started
        offset = cmd.offset if cmd.HasField("offset") else None
        self.asked.append((number, offset))
        log = self.logs[number]
        if offset is None:
            data = log[-cmd.max_bytes:]
            start = len(log) - len(data)
        else:
            data = log[offset:][: cmd.max_bytes]
            start = offset
        read_id = f"r-{len(self.asked)}"
        state = "expired" if self.expire_next else "ready"
        self.expire_next = False
        fields = {} if state != "ready" else {
            "text": data.decode(), "offset": start, "next_offset": start + len(data),
            "size": len(log), "truncated": (start + len(data) < len(log)) if offset is not None
            else start > 0}
        if offset is not None:
            fields["requested_offset"] = offset
        self.reads[read_id] = ec.RunLogRead(
            read_id=read_id, run_id=RUN_ID, attempt_number=number, stage="compute", state=state,
            reason_code="log-read-expired" if state == "expired" else "", **fields)
        # The log grows after each read; the first Attempt ends, then a retry begins.
        if self.pieces[number]:
            self.logs[number] += self.pieces[number].pop(0)
        elif number == self.started and self.started < len(self.pieces):
            self.started += 1
        return ec.ReadRunLogReply(read_id=read_id, state="pending")

    def handlers(self):
        return {"GetRun": self.run, "ReadRunLog": self.read,
                "GetRunLogRead": lambda q: self.reads[q.read_id]}


async def test_follow_prints_every_byte_once_through_a_retry(amqp_url, topology):
    site = Site({1: [b"epoch 1\n", b"crash: out of mem", b"ory\n"],
                 2: ["épo".encode(), "ch 1 ✓\n".encode(), b"done\n"]})
    site.expire_next = True  # the first read is not answered in time: tried again
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        result = await cli("run", "logs", RUN_ID, "--follow", "--max-bytes", "4")
    assert result.code == 0, result.stderr
    # Like `tail -f -c 4`: the last 4 bytes first, then everything that follows.
    assert result.stdout == "h 1\ncrash: out of memory\népoch 1 ✓\ndone\n"
    assert "Attempt 2 started" in result.stderr and f"Run {RUN_ID} succeeded" in result.stderr
    assert "trying again" in result.stderr
    # The first read is a tail read; every later one starts where the last answer ended.
    assert site.asked[0] == (1, None) and site.asked[1][0] == 1
    assert (2, 0) in site.asked


async def test_follow_exits_as_run_wait_does_and_speaks_json(amqp_url, topology):
    site = Site({1: [b"loss 0.9\n", b"Traceback\n"]}, outcome="failed")
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        result = await cli("run", "logs", RUN_ID, "-f", "-o", "json")
    assert result.code == 1, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert "".join(line.get("text", "") for line in lines) == "loss 0.9\nTraceback\n"
    assert lines[-1]["run"]["outcome"] == "failed"


async def test_a_runtime_without_offsets_cannot_be_followed(amqp_url, topology):
    def old_read(q):
        return ec.RunLogRead(read_id=q.read_id, run_id=RUN_ID, attempt_number=1,
                             stage="compute", state="ready", text="tail\n")

    site = Site({1: [b"x"]})
    handlers = {**site.handlers(), "GetRunLogRead": old_read}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        result = await cli("run", "logs", RUN_ID, "--follow")
    assert result.code == 2 and "predates log offsets" in result.stderr


async def test_follow_refuses_a_command_id_and_a_missing_run_is_exit_3(amqp_url, topology):
    def missing(_q):
        raise Rejected("not-found", f"no Run {RUN_ID} in Project demo")

    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": missing}):
        gone = await cli("run", "logs", RUN_ID, "--follow")
        both = await cli("run", "logs", RUN_ID, "--follow", "--command-id", "c-1")
    assert gone.code == 3
    assert both.code == 2 and "--command-id" in both.stderr


async def test_a_log_that_starts_over_is_read_again_from_its_first_byte(amqp_url, topology):
    # Attempt 1 writes "first try\n", its log is then written anew ("again\n", shorter).
    site = Site({1: [b"first try\n", b"", b"", b"tail\n"]})
    real_read = site.read

    def read(cmd):
        reply = real_read(cmd)
        if site.logs[1] == b"first try\n" and len(site.asked) == 2:
            site.logs[1] = b"again\n"  # the stage's output file was truncated
        return reply

    handlers = {**site.handlers(), "ReadRunLog": read}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        result = await cli("run", "logs", RUN_ID, "--follow")
    assert result.code == 0, result.stderr
    assert "started over" in result.stderr
    assert result.stdout == "first try\nagain\ntail\n"


async def test_an_attempt_that_never_ran_at_its_site_has_no_log(amqp_url, topology):
    """A reviewer's case: Attempt 1 refused before its Site prepared it, Attempt 2 ran."""
    site = Site({1: [], 2: [b"second\n"]}, outcome="succeeded")
    site.started = 2
    real_read = site.read

    def read(cmd):
        if (cmd.attempt_number or site.started) == 1:
            site.asked.append((1, None))
            site.reads["r-none"] = ec.RunLogRead(read_id="r-none", run_id=RUN_ID, attempt_number=1,
                                                 stage="compute", state="refused",
                                                 reason_code="attempt-not-prepared")
            return ec.ReadRunLogReply(read_id="r-none", state="pending")
        return real_read(cmd)

    handlers = {**site.handlers(), "ReadRunLog": read}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        whole = await cli("run", "logs", RUN_ID, "--follow")
        first = await cli("run", "logs", RUN_ID, "--follow", "--attempt", "1")
    assert whole.code == 0, whole.stderr
    assert whole.stdout == "second\n"
    assert first.code == 1 and "has no log" in first.stderr and first.stdout == ""  # it failed


async def test_an_attempt_that_cannot_exist_is_not_found_and_an_ended_one_exits_by_its_state(
    amqp_url, topology
):
    site = Site({1: [b"boom\n"], 2: [b"x\n", b"y\n", b"z\n"]}, outcome="succeeded")
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        first = await cli("run", "logs", RUN_ID, "--follow", "--attempt", "1")
        beyond = await cli("run", "logs", RUN_ID, "--follow", "--attempt", "7")
    # Attempt 1 failed while the Run goes on (a retry): exit 1, as its state says.
    assert first.code == 1, first.stderr
    assert first.stdout == "boom\n" and "Attempt 1 failed" in first.stderr
    # The Run allows at most three Attempts: there never will be a seventh.
    assert beyond.code == 3 and "has no Attempt 7" in beyond.stderr


def test_a_cut_tail_says_how_much_of_the_log_is_shown():
    read = ec.RunLogRead(text="x" * 10, truncated=True, offset=90, next_offset=100, size=100)
    assert log_follow.cut_remark(read) == "only the last 10 of the log's 100 bytes are shown"


def follower(args, env):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "metallo.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def test_interrupting_a_follow_says_how_to_resume_and_a_closed_pipe_ends_it_quietly(
    amqp_url, topology
):
    import asyncio
    import os
    import signal

    site = Site({1: [f"line {i}\n".encode() for i in range(10_000)]})
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        proc = follower(["run", "logs", RUN_ID, "--follow"], dict(os.environ))
        first = await asyncio.to_thread(proc.stdout.readline)
        assert first.startswith("line")
        proc.send_signal(signal.SIGINT)
        _, errors = await asyncio.to_thread(proc.communicate, timeout=30)
        assert proc.returncode == 4, errors  # outcome uncertain: the Run goes on
        assert "stopped following" in errors and f"metallo run logs {RUN_ID} --follow" in errors

        closed = follower(["run", "logs", RUN_ID, "--follow"], dict(os.environ))
        await asyncio.to_thread(closed.stdout.readline)
        closed.stdout.close()  # the reader goes away, as `| head -1` does
        await asyncio.to_thread(closed.wait, 30)
        errors = closed.stderr.read()
        assert closed.returncode == 0, errors
        assert "Traceback" not in errors and "BrokenPipe" not in errors


async def test_attempt_n_of_an_ended_run_exits_by_that_attempt(amqp_url, topology):
    """A reviewer's case: Attempt 1 failed, Attempt 2 succeeded, the Run has ended."""
    site = Site({1: [b"boom\n"], 2: [b"fine\n"]}, outcome="succeeded")
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        whole = await cli("run", "logs", RUN_ID, "--follow")  # drives the Run to its end
        first = await cli("run", "logs", RUN_ID, "--follow", "--attempt", "1")
    assert whole.code == 0, whole.stderr
    assert first.code == 1 and "Attempt 1 failed" in first.stderr, first.stderr


async def test_a_closed_pipe_after_the_last_text_still_exits_0_with_json(amqp_url, topology):
    import asyncio
    import os

    site = Site({1: [b"a\n"]})
    async with StandIn(amqp_url, topology, ("execution_core",), site.handlers()):
        proc = follower(["run", "logs", RUN_ID, "--follow", "-o", "json"], dict(os.environ))
        await asyncio.to_thread(proc.stdout.readline)
        proc.stdout.close()
        await asyncio.to_thread(proc.wait, 30)
        assert proc.returncode == 0, proc.stderr.read()


@pytest.fixture
def dev_stack_running(tmp_path, monkeypatch):
    """A dev stack state as ``metallo dev up`` leaves it (METALLO_DEV_STATE), with a live
    process standing for its supervisor; call it with the executor it runs."""
    import subprocess
    import sys

    state = tmp_path / "dev"
    state.mkdir()
    monkeypatch.setenv("METALLO_DEV_STATE", str(state))
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                   "metallo.devstack"])

    def running(executor: str) -> None:
        (state / "state.json").write_text(json.dumps({"pid": supervisor.pid,
                                                      "executor": executor}))

    yield running
    supervisor.kill()
    supervisor.wait()


@pytest.mark.parametrize(("running", "other"), [("slurm", "local"), ("local", "slurm"),
                                                (None, None)])
async def test_a_log_another_executor_keeps_names_the_command_to_switch(
    amqp_url, topology, dev_stack_running, running, other
):
    if running:
        dev_stack_running(running)
    run = ec.Run(run_id=RUN_ID, project="demo", phase="terminal", outcome="succeeded")
    attempt = run.attempts.add(number=1, state="succeeded")
    attempt.native_jobs.add(stage="compute", job_id="4242")  # it ran, elsewhere
    refused = ec.RunLogRead(read_id="r-1", run_id=RUN_ID, attempt_number=1, stage="compute",
                            state="refused", reason_code="attempt-not-prepared")
    handlers = {"GetRun": lambda q: run,
                "ReadRunLog": lambda c: ec.ReadRunLogReply(read_id="r-1", state="pending"),
                "GetRunLogRead": lambda q: refused}
    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        once = await cli("run", "logs", RUN_ID, "-o", "json")
        followed = await cli("run", "logs", RUN_ID, "--follow")
    assert once.code == 3 and followed.code == 3
    hint = json.loads(once.stdout)["error"]["hint"]
    assert json.loads(once.stdout)["error"]["code"] == "attempt-not-prepared"
    if running:
        assert f"runs the {running} executor" in hint
        assert f"`metallo dev down && metallo dev up --executor {other}`" in hint
        assert f"`metallo run logs {RUN_ID}` again" in hint
    else:  # no dev stack here: both commands, the reader knows which executor ran it
        assert "`metallo dev up --executor local` or `--executor slurm`" in hint
    # --follow says the same, not "ended before its Site ran it"
    assert "has no log" not in followed.stderr
    assert " ".join(followed.stderr.split()).count("--executor") >= 1
