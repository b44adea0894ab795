"""The local executor's whole lifecycle through the real worker, the real HTTPS Site
edge (Site Coordination's app, TLS, PostgreSQL) and real git (DESIGN.md, Site
Runtime; seed 000 phases; seed 001 failure records)."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from site_coordination.adaptors.tables import progress_reports, repository_grants
from tests.integration.site_runtime_support import (
    bare_git,
    bare_head,
    batch_payload,
    edge_result,
    group_gone,
    live_group_members,
    new_runtime,
    observe_until,
    released_grants,
    seed_repository,
    stage_rows,
)


@pytest.fixture
async def runtime(edge, tmp_path):
    rt = await new_runtime(edge, tmp_path)
    yield rt
    await rt.close()


async def test_whole_lifecycle_clones_runs_commits_and_pushes(edge, runtime, tmp_path):
    url, commit = await seed_repository(edge, tmp_path)
    payload = batch_payload(
        url,
        commit,
        {"argv": ["python3", "make_output.py", "a b", "$HOME"]},
        environment={"GREETING": "hello world"},
        pre=[{"shell": "echo pre > pre.txt"}],
    )
    seq = await edge.append("prepare", payload=payload)
    prepared = await runtime.handle(seq)
    assert prepared["outcome"] == "succeeded"
    assert prepared["observation"]["phase"] == "prepared"
    workspace = runtime.state / "workspaces" / "att-1"
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700

    started = await runtime.handle(await edge.append("start"))
    assert started["outcome"] == "succeeded"
    assert started["observation"]["phase"] in ("queued", "running", "succeeded")

    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    obs = done["observation"]
    assert obs["phase"] == "succeeded", obs
    assert obs["exit_code"] == 0 and obs["failure"] is None
    assert [j["stage"] for j in done["native_jobs"]] == ["stage-in", "compute", "stage-out"]

    # The output commit is on the Run's branch of the bare repository, by the fixed author,
    # with the pinned commit as parent and the compute's files in it.
    assert obs["output_commit"] == bare_head(edge)
    show = bare_git(edge, "log", "-1", "--format=%an <%ae>|%P", obs["output_commit"])
    assert show.strip() == f"Metallo <metallo@localhost>|{commit}"
    output = bare_git(edge, "show", f"{obs['output_commit']}:output.txt")
    assert "args=['a b', '$HOME']" in output  # exact argv: no shell expansion
    assert "GREETING=hello world" in output
    assert "HAS_TOKEN=False" in output  # repository credentials never reach compute
    pre = bare_git(edge, "show", f"{obs['output_commit']}:pre.txt")
    assert pre == "pre\n"

    # Every repository grant was released; every stage ran exactly once.
    grants = await released_grants(edge)
    assert sorted(g.direction for g in grants) == ["stage-in", "stage-out"]
    assert all(g.revoked_at is not None for g in grants)
    rows = stage_rows(runtime.state, "att-1")
    assert {s: (r["state"], r["launches"]) for s, r in rows.items()} == {
        "stage-in": ("succeeded", 1),
        "compute": ("succeeded", 1),
        "stage-out": ("succeeded", 1),
    }

    # Logs are readable through read-log, bounded by max_bytes; no token in any of them.
    log = await runtime.handle(
        await edge.append(
            "read-log", payload={"stage": "compute", "max_bytes": 4096, "viewer": "m-alice"}
        )
    )
    assert "compute ran" in log["observation"]["log"]["text"]
    small = await runtime.handle(
        await edge.append(
            "read-log", payload={"stage": "compute", "max_bytes": 10, "viewer": "m-alice"}
        )
    )
    assert len(small["observation"]["log"]["text"].encode()) <= 10
    assert small["observation"]["log"]["truncated"] is True
    for path in [
        *workspace.rglob("*.log"),
        runtime.state / "jobs.sqlite",
        runtime.state / "delivery.sqlite",
        *(workspace / "control").rglob("*"),
    ]:
        if path.is_file():
            assert b"prt_" not in path.read_bytes(), path
    assert await edge_result(edge, seq) == prepared


async def test_a_commit_on_no_branch_is_fetched_by_its_id(edge, runtime, tmp_path):
    """The branches' fetch does not bring it, so the checkout fails once; the runner then
    fetches the object itself and checks it out (seed 004, Pinned Run inputs)."""
    url, commit = await seed_repository(edge, tmp_path)
    identity = ("-c", "user.name=seed", "-c", "user.email=seed@example.org")
    off_branch = bare_git(
        edge, *identity, "commit-tree", f"{commit}^{{tree}}", "-p", commit, "-m", "off"
    ).strip()
    bare_git(edge, "update-ref", "refs/keep/off", off_branch)
    payload = batch_payload(url, off_branch, {"argv": ["git", "rev-parse", "HEAD"]})
    await runtime.handle(await edge.append("prepare", payload=payload))
    await runtime.handle(await edge.append("start"))
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    assert done["observation"]["phase"] == "succeeded", done["observation"]
    log = (runtime.state / "workspaces" / "att-1" / "logs" / "compute.log").read_text()
    assert off_branch in log


async def test_missing_commit_fails_stage_in_with_repository_commit_missing(
    edge, runtime, tmp_path
):
    url, _ = await seed_repository(edge, tmp_path)
    payload = batch_payload(url, "f" * 40, {"argv": ["true"]})
    await runtime.handle(await edge.append("prepare", payload=payload))
    await runtime.handle(await edge.append("start"))
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    failure = done["observation"]["failure"]
    assert done["observation"]["phase"] == "failed"
    assert failure["stage"] == "stage-in" and failure["code"] == "repository-commit-missing"
    assert "compute" not in stage_rows(runtime.state, "att-1")
    # A reconciled-service command is refused, so the stream moves on.
    apply = await runtime.handle(await edge.append("apply", payload={}))
    assert (apply["outcome"], apply["code"]) == ("refused", "unsupported-command-kind")


async def test_wall_time_is_enforced_with_term_then_kill(edge, runtime, tmp_path):
    url, commit = await seed_repository(edge, tmp_path)
    # The shell ignores TERM, so only the KILL after the grace period stops it.
    payload = batch_payload(url, commit, {"shell": "trap '' TERM; sleep 60"}, wall=1)
    await runtime.handle(await edge.append("prepare", payload=payload))
    await runtime.handle(await edge.append("start"))
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    failure = done["observation"]["failure"]
    assert failure["stage"] == "compute" and failure["code"] == "wall-time-exceeded"
    assert failure["scheduler_state"] == "TIMEOUT" and failure["signal"] == 9
    child = int((runtime.state / "workspaces/att-1/control/compute/child").read_text())
    assert await group_gone(child)
    assert "stage-out" not in stage_rows(runtime.state, "att-1")


async def _computing_shell_with_a_background_sleep(edge, runtime, tmp_path) -> tuple[Path, int]:
    """Start att-1 whose compute step is a shell with a background sleep; return the
    compute control directory and the step's process group once both processes run."""
    url, commit = await seed_repository(edge, tmp_path)
    payload = batch_payload(url, commit, {"shell": "sleep 60 & sleep 60; wait"})
    await runtime.handle(await edge.append("prepare", payload=payload))
    await runtime.handle(await edge.append("start"))
    await observe_until(runtime, edge, "att-1", {"running"})
    control = runtime.state / "workspaces/att-1/control/compute"
    for _ in range(100):
        if (control / "child").exists():
            break
        await asyncio.sleep(0.05)
    child = int((control / "child").read_text())
    for _ in range(100):  # the shell forks its background sleep a moment after it starts
        if len(live_group_members(child)) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(live_group_members(child)) >= 2  # the shell and its background sleep
    return control, child


async def test_cancel_kills_the_process_group_and_records_cancelled(edge, runtime, tmp_path):
    _, child = await _computing_shell_with_a_background_sleep(edge, runtime, tmp_path)

    cancel_seq = await edge.append("cancel", payload={"reason": "member-request"})
    cancelled = await runtime.handle(cancel_seq)
    assert cancelled["outcome"] == "succeeded" and cancelled["message"] == "accepted"
    assert cancelled["observation"]["phase"] == "cancelled"
    assert await group_gone(child)
    rows = stage_rows(runtime.state, "att-1")
    assert rows["compute"]["state"] == "cancelled" and "stage-out" not in rows
    again = await observe_until(runtime, edge, "att-1", {"cancelled"})
    assert again["observation"]["phase"] == "cancelled"
    revoked = [g.revoked_at for g in await released_grants(edge)]
    assert revoked and all(r is not None for r in revoked)


async def test_deferral_is_reported_once_and_the_command_stays_pending(edge, tmp_path):
    url, commit = await seed_repository(edge, tmp_path)
    runtime = await new_runtime(edge, tmp_path)
    # The Attempt's workspace path is taken by a file: prepare cannot create it (yet).
    blocker = runtime.state / "workspaces" / "att-1"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory\n")
    try:
        seq = await edge.append("prepare", payload=batch_payload(url, commit, ["true"]))
        for _ in range(4):
            await runtime.worker.step()
        entry = runtime.delivery.entry(seq)
        assert entry.state == "dispatched" and entry.result_json is None
        assert entry.reported_codes == {"workspace-unavailable"}
        async with edge.engine.connect() as conn:
            reports = (await conn.execute(select(progress_reports.c.code))).scalars().all()
        assert reports == ["workspace-unavailable"]  # once per command and code
        assert await edge_result(edge, seq) is None
        blocker.unlink()  # the condition clears: the same command goes ahead
        assert (await runtime.handle(seq))["outcome"] == "succeeded"
    finally:
        await runtime.close()


async def test_a_start_beyond_the_limit_waits_without_holding_the_stream(edge, tmp_path):
    """A new user's case: with every slot taken, a deferred start held the Site's ordered
    stream, so every other Run's observe, cancel and log read waited behind it. The
    start is now accepted and the Attempt waits (queued / PENDING) for a free slot."""
    url, commit = await seed_repository(edge, tmp_path)
    busy = await new_runtime(edge, tmp_path, max_active=0)
    try:
        for attempt in ("att-1", "att-2"):
            seq = await edge.append("prepare", payload=batch_payload(url, commit, ["true"]),
                                    attempt_id=attempt)
            assert (await busy.handle(seq))["outcome"] == "succeeded"
            started = await busy.handle(await edge.append("start", attempt_id=attempt))
            assert started["outcome"] == "succeeded", started
            assert (started["observation"]["phase"], started["observation"]["native_state"]) == (
                "queued", "PENDING")
        assert busy.jobs.waiting_attempts() == ["att-1", "att-2"]  # first come, first served
        # The stream goes on: an observe and a cancel of the waiting Attempts are answered.
        seen = await busy.handle(await edge.append("observe", attempt_id="att-1"))
        assert seen["observation"]["phase"] == "queued" and seen["native_jobs"] == []
        cancelled = await busy.handle(await edge.append("cancel", attempt_id="att-2",
                                                        payload={"reason": "member-request"}))
        assert cancelled["message"] == "accepted"
        assert cancelled["observation"]["phase"] == "cancelled"
    finally:
        await busy.close()
    # A Runtime with a free slot starts the one still waiting (a restart keeps the queue).
    free = await new_runtime(edge, tmp_path)
    try:
        done = await observe_until(free, edge, "att-1", {"succeeded", "failed"})
        assert done["observation"]["phase"] == "succeeded", done
        assert free.jobs.attempt("att-2").state == "cancelled"
        assert stage_rows(free.state, "att-2") == {}  # nothing of it ever ran
    finally:
        await free.close()


async def test_start_after_the_deadline_is_refused_before_anything_runs(edge, runtime, tmp_path):
    url, commit = await seed_repository(edge, tmp_path)
    payload = batch_payload(url, commit, ["true"])
    payload["deadline"] = "2020-01-01T00:00:00Z"
    prepared = await runtime.handle(await edge.append("prepare", payload=payload))
    assert prepared["outcome"] == "succeeded"
    started = await runtime.handle(await edge.append("start"))
    assert (started["outcome"], started["code"]) == ("refused", "attempt-deadline-passed")
    assert stage_rows(runtime.state, "att-1") == {}


async def test_a_killed_runner_does_not_leave_its_step_running(edge, runtime, tmp_path):
    # A runner killed from outside (OOM killer, an operator's kill -9) cannot record
    # its exit: the stage fails local-process-lost, and its step must not run on unseen.
    control, child = await _computing_shell_with_a_background_sleep(edge, runtime, tmp_path)
    runner = int((control / "claim").read_text().split()[0])
    os.kill(runner, signal.SIGKILL)

    failed = await observe_until(runtime, edge, "att-1", {"failed"})
    assert failed["observation"]["phase"] == "failed"
    assert stage_rows(runtime.state, "att-1")["compute"]["code"] == "local-process-lost"
    assert await group_gone(child)


class _CountingAuthority:
    """The edge client, counting the calls the local executor makes."""

    def __init__(self, real) -> None:
        self.real = real
        self.calls: list[str] = []

    async def authorise_execution(self, request):
        self.calls.append("authorise")
        return await self.real.authorise_execution(request)

    async def authorise_with_grant(self, request, direction):
        self.calls.append(f"authorise+{direction}")
        return await self.real.authorise_with_grant(request, direction)

    async def issue(self, attempt_id, direction):
        self.calls.append(f"issue {direction}")
        return await self.real.issue(attempt_id, direction)

    async def release(self, grant_id):
        self.calls.append("release")
        return await self.real.release(grant_id)


async def test_start_authorises_and_gets_its_stage_in_grant_in_one_request(
    edge, runtime, tmp_path
):
    url, commit = await seed_repository(edge, tmp_path)
    counting = _CountingAuthority(runtime.client)
    runtime.executor.authority = runtime.executor.grants = counting
    await runtime.handle(
        await edge.append("prepare", payload=batch_payload(url, commit, {"argv": ["true"]}))
    )
    assert counting.calls == ["authorise"]
    assert (await runtime.handle(await edge.append("start")))["outcome"] == "succeeded"
    assert counting.calls[1] == "authorise+stage-in"  # no separate authorise, no issue
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    assert done["observation"]["phase"] == "succeeded"
    assert "issue stage-in" not in counting.calls and "issue stage-out" in counting.calls
    revoked = [g.revoked_at for g in await released_grants(edge)]
    assert len(revoked) == 2 and all(revoked)  # stage-in and stage-out, both released


async def test_a_repository_the_edge_does_not_serve_fails_the_start_and_issues_nothing(
    edge, runtime
):
    payload = batch_payload("https://elsewhere.example/x.git", "0" * 40, {"argv": ["true"]})
    await runtime.handle(await edge.append("prepare", payload=payload))
    started = await runtime.handle(await edge.append("start"))
    assert (started["outcome"], started["code"]) == ("refused", "authorisation-refused")
    assert "repository-not-served" in started["message"]
    assert stage_rows(runtime.state, "att-1")["stage-in"]["state"] == "failed"
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(repository_grants.c.grant_id))).all() == []


async def test_a_failure_after_the_combined_grant_leaves_no_grant_unrevoked(edge, runtime, tmp_path):
    """The grant that came with start's authorisation is journaled before the spec is
    written: a failure there cannot leave it valid until it expires."""
    url, commit = await seed_repository(edge, tmp_path)
    await runtime.handle(
        await edge.append("prepare", payload=batch_payload(url, commit, {"argv": ["true"]}))
    )
    row = runtime.jobs.attempt("att-1")
    blocker = row.workspace / "control" / "stage-in" / "spec.json"
    blocker.mkdir(parents=True)  # the spec write fails (as ENOSPC or EIO would)
    start = await edge.append("start")
    await runtime.worker.step()  # runtime-error (IsADirectoryError): the start stays pending
    assert runtime.delivery.entry(start).result_json is None
    journaled = stage_rows(runtime.state, "att-1")["stage-in"]["grant_id"]
    assert journaled and journaled.startswith("rg-")  # the combined grant is on record
    blocker.rmdir()
    assert (await runtime.handle(start))["outcome"] == "succeeded"
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    assert done["observation"]["phase"] == "succeeded"
    grants = await released_grants(edge)
    assert sorted(g.direction for g in grants) == ["stage-in", "stage-in", "stage-out"]
    assert all(g.revoked_at is not None for g in grants)


def _local_bare_repository(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository at an absolute path with one commit on main; (path, commit)."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "s", "GIT_AUTHOR_EMAIL": "s@e",
           "GIT_COMMITTER_NAME": "s", "GIT_COMMITTER_EMAIL": "s@e"}
    src, bare = tmp_path / "src", tmp_path / "local.git"
    for args in (["init", "-q", "-b", "main", str(src)], ["init", "-q", "--bare", str(bare)]):
        subprocess.run(["git", *args], check=True, env=env, capture_output=True)
    (src / "README").write_text("local\n")
    for args in (["add", "-A"], ["commit", "-qm", "one"], ["push", "-q", str(bare), "main"]):
        subprocess.run(["git", "-C", str(src), *args], check=True, env=env, capture_output=True)
    return bare, _main_of(bare)


def _main_of(bare: Path) -> str:
    return subprocess.run(["git", "-C", str(bare), "rev-parse", "main"], check=True,
                          capture_output=True, text=True).stdout.strip()


async def test_a_repository_given_as_an_absolute_path_runs_without_grants(
    edge, runtime, tmp_path
):
    """What `metallo action run ./repo` records (a new user's Run of one was refused
    ``invalid-material``): fetched and pushed with the Runtime's own file access."""
    bare, commit = _local_bare_repository(tmp_path)
    payload = batch_payload(str(bare), commit, {"shell": "echo result > out.txt"})
    assert (await runtime.handle(await edge.append("prepare", payload=payload)))["outcome"] == (
        "succeeded"
    )
    assert (await runtime.handle(await edge.append("start")))["outcome"] == "succeeded"
    done = await observe_until(runtime, edge, "att-1", {"succeeded", "failed"})
    assert done["observation"]["phase"] == "succeeded", done
    assert _main_of(bare) == done["observation"]["output_commit"]
    async with edge.engine.connect() as conn:
        assert (await conn.execute(select(repository_grants.c.grant_id))).all() == []
