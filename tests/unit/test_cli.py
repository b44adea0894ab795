"""``metallo`` CLI: arguments, exit codes (0/1/2/3/4), output and the requests it
sends, against the real RabbitMQ with a stand-in for the other services
(tests/unit/cli_support.py)."""

from __future__ import annotations

import json
import subprocess

import aio_pika
import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Rejected, Topology
from metallo.pipeline_coordination.v1 import pipeline_coordination_pb2 as pc
from tests.unit.cli_support import (
    StandIn,
    cli,
    cli_environment,  # noqa: F401 - autouse fixture
    run_cli,
)

RUN_ID = "9b1c7f7e-5d43-4d55-9f0e-000000000001"


def a_run(phase: str = "terminal", outcome: str = "succeeded", run_id: str = RUN_ID) -> ec.Run:
    run = ec.Run(run_id=run_id, project="demo", action="train", action_type="slurm-job",
                 site_id="lab-slurm", phase=phase, outcome=outcome if phase == "terminal" else "",
                 native_state="COMPLETED" if phase == "terminal" else "RUNNING",
                 output_commit="a" * 40 if outcome == "succeeded" else "")
    attempt = run.attempts.add(number=1, state=outcome if phase == "terminal" else "active",
                               native_state=run.native_state)
    attempt.native_jobs.add(stage="stage-in", job_id="101")
    attempt.native_jobs.add(stage="compute", job_id="102")
    return run


def a_pipeline(state: str) -> pc.Pipeline:
    p = pc.Pipeline(pipeline_id="p-1", project="demo", state=state, branch="main",
                    repository_url="https://git.example/demo.git")
    p.steps.add(index=1, action="train", state="succeeded", run_id=RUN_ID, output_commit="c" * 40)
    p.steps.add(index=2, action="evaluate", state="failed" if state == "failed" else
                ("succeeded" if state == "succeeded" else "launched"), run_id=RUN_ID)
    if state == "failed":
        p.failed_step = 2
    return p


def bare_repository(path) -> None:
    """Make ``path`` an (empty) bare Git repository: REPO must be one (the CLI checks)."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)


def not_found(_message):
    raise Rejected("not-found", "no such Run in Project demo")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


# ------------------------------------------------------------------ usage (no broker)

def test_missing_project_is_a_usage_error_with_next_step(monkeypatch):
    monkeypatch.delenv("METALLO_PROJECT")
    result = run_cli("run", "show", RUN_ID)
    assert result.code == 2
    assert "no Project" in result.stderr and "next:" in result.stderr
    assert "METALLO_PROJECT" in result.stderr


def test_member_and_project_come_from_the_config_file(monkeypatch, tmp_path, namespace):
    monkeypatch.delenv("METALLO_MEMBER")
    monkeypatch.delenv("METALLO_PROJECT")
    config = tmp_path / "config.toml"
    config.write_text('member = "m-bob"\nproject = "demo"\n')
    monkeypatch.setenv("METALLO_CONFIG", str(config))
    from metallo.cli.settings import actor

    assert actor(None, None).member == "m-bob"
    assert actor("m-carol", None).member == "m-carol"  # the option wins


def test_unknown_command_and_bad_options_exit_2():
    assert run_cli("run", "lst").code == 2
    bad_limit = run_cli("run", "list", "--limit", "0")
    assert bad_limit.code == 2 and "next:" in bad_limit.stderr
    bad_outcome = run_cli("run", "list", "--outcome", "maybe")
    assert bad_outcome.code == 2 and "succeeded, failed, cancelled, lost, timed-out" in bad_outcome.stderr


def test_bad_command_id_is_refused_before_anything_is_sent(tmp_path):
    result = run_cli("action", "run", str(tmp_path), "train", "--command-id", "not-a-uuid")
    assert result.code == 2 and "not a UUID" in result.stderr


def test_missing_local_repository_is_not_found(tmp_path):
    result = run_cli("action", "run", str(tmp_path / "nope"), "train")
    assert result.code == 3 and "no such local repository" in result.stderr


def test_help_documents_exit_codes():
    result = run_cli("--help")
    assert result.code == 0
    assert "4 outcome uncertain" in result.stdout.replace("\n", " ")


# ------------------------------------------------------------------ over the broker

async def test_run_show_table_and_json(amqp_url, topology):
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: a_run()}) as s:
        table = await cli("run", "show", RUN_ID)
        as_json = await cli("run", "show", RUN_ID, "--output", "json")
    assert table.code == 0 and "stage-in=101 compute=102" in table.stdout
    assert as_json.code == 0
    document = json.loads(as_json.stdout)
    assert document["run_id"] == RUN_ID and document["outcome"] == "succeeded"
    assert document["attempts"][0]["native_jobs"][1] == {"stage": "compute", "job_id": "102"}
    query = s.received[0]
    assert query.metadata.acting_member == "m-alice" and query.metadata.project == "demo"
    assert query.run_id == RUN_ID


async def test_a_refused_run_says_why_in_show_and_wait(amqp_url, topology):
    refused = a_run(outcome="failed")
    refused.reason_code = "invalid-material"
    refused.reason_message = "repository.url must be https://, file:/// or an absolute path"
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: refused}):
        shown = await cli("run", "show", RUN_ID)
        waited = await cli("run", "wait", RUN_ID)
    assert "invalid-material" in shown.stdout and "file:/// or an absolute path" in shown.stdout
    assert waited.code == 1
    assert "invalid-material: repository.url must be" in waited.stdout + waited.stderr


async def test_not_found_exits_3_and_permission_denied_exits_2(amqp_url, topology):
    def denied(_q):
        raise Rejected("permission-denied", "m-alice lacks runs.read in demo")

    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": not_found,
                                                                 "ListRuns": denied}):
        missing = await cli("run", "show", RUN_ID)
        refused = await cli("run", "list")
        as_json = await cli("run", "show", RUN_ID, "-o", "json")
    assert missing.code == 3 and "not-found" in missing.stderr and "next:" in missing.stderr
    assert missing.stdout == ""  # text output: the error goes to stderr only
    assert refused.code == 2 and "permission-denied" in refused.stderr
    assert "governance file" in refused.stderr
    # --output json: the same error is also one JSON object on stdout, for scripts.
    error = json.loads(as_json.stdout)["error"]
    assert as_json.code == 3 and error["code"] == "not-found" and error["exit_code"] == 3
    assert "no such Run" in error["message"] and error["hint"]


def test_wants_json_reads_every_spelling_of_the_output_option():
    from metallo.cli.__main__ import wants_json

    assert wants_json(["run", "show", "r", "-o", "json"])
    assert wants_json(["run", "list", "--output=json"]) and wants_json(["run", "list", "-ojson"])
    assert not wants_json(["run", "show", "r"]) and not wants_json(["run", "show", "-o", "table"])
    assert not wants_json(["action", "run", "repo", "--", "-o", "json"])


async def test_service_not_running_exits_4_and_says_to_start_it():
    result = await cli("run", "show", RUN_ID)
    assert result.code == 4
    assert "metallo dev up" in result.stderr


async def test_a_command_is_not_left_queued_for_a_service_that_is_down(amqp_url, topology):
    # The owner's durable queue exists but nothing consumes it (the service is stopped):
    # the CLI says so at once and sends nothing, so no command runs later by surprise.
    conn = await aio_pika.connect(amqp_url)
    async with conn:
        channel = await conn.channel()
        queue = await channel.declare_queue(topology.command_queue("execution_core"), auto_delete=False)
        try:
            result = await cli("run", "cancel", RUN_ID, "-o", "json")
            waiting = (await channel.declare_queue(queue.name, passive=True)).declaration_result
        finally:
            await queue.delete(if_unused=False, if_empty=False)
    assert result.code == 4 and waiting.message_count == 0
    assert json.loads(result.stdout)["error"]["code"] == "service-not-running"
    assert "nothing was sent" in result.stderr and "metallo dev up" in result.stderr


async def test_no_reply_in_time_is_uncertain_with_the_command_id(amqp_url, topology, monkeypatch):
    monkeypatch.setenv("METALLO_CLI_TIMEOUT", "1")
    async with StandIn(amqp_url, topology, ("execution_core",), {"CancelRun": None}) as s:
        result = await cli("run", "cancel", RUN_ID)
    assert result.code == 4
    sent = s.received[0]
    assert f"--command-id {sent.metadata.command_id}" in result.stderr
    assert "metallo dev status" in result.stderr  # most often: the stack is not running


async def test_a_read_with_no_answer_says_the_service_may_not_be_running(amqp_url, topology,
                                                                        monkeypatch):
    monkeypatch.setenv("METALLO_CLI_TIMEOUT", "1")
    handlers: dict = {"GetRun": None}

    def first_then_silence(_query):
        handlers["GetRun"] = None  # the stack stops while the CLI waits: no more answers
        return a_run("running")

    async with StandIn(amqp_url, topology, ("execution_core",), handlers):
        shown = await cli("run", "show", RUN_ID, "-o", "json")
        handlers["GetRun"] = first_then_silence
        waited = await cli("run", "wait", RUN_ID, "--quiet")
    assert shown.code == 4
    error = json.loads(shown.stdout)["error"]
    assert error["code"] == "outcome-uncertain" and "execution_core" in error["message"]
    assert "may not be running" in error["hint"] and "`metallo dev status`" in error["hint"]
    assert error["hint"].endswith("run the same read again")
    assert waited.code == 4
    assert f"`metallo run wait {RUN_ID}`" in waited.stderr and "metallo dev status" in waited.stderr
    assert "run the same read again" not in waited.stderr


def test_an_unreachable_broker_prints_only_the_clis_own_error(tmp_path):
    # aiormq logs "error when creating transport: <AMQPConnectionError …>" at ERROR; with no
    # logging configured Python printed it raw on stderr before the CLI's error.
    import logging
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    env = {k: v for k, v in os.environ.items() if k != "METALLO_DEBUG"}
    env.update(METALLO_AMQP_URL=f"amqp://guest:guest@127.0.0.1:{port}/", METALLO_MEMBER="m-alice",
               METALLO_PROJECT="demo", METALLO_CONFIG=str(tmp_path / "absent.toml"))
    done = subprocess.run([sys.executable, "-m", "metallo.cli", "run", "list"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stderr
    assert "error when creating transport" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines and lines[0].startswith("error: cannot reach RabbitMQ"), done.stderr
    assert all(line.startswith(("error:", "next:")) or line.startswith(" ") for line in lines)

    before = logging.getLogger("aiormq").level
    run_cli("run", "show", "not-a-run-id")
    assert logging.getLogger("aiormq").level == before  # the CLI restores what it raised


async def test_wait_exit_code_follows_the_outcome(amqp_url, topology):
    answers = {"ok": iter([a_run("running"), a_run()]),
               "bad": iter([a_run("queued"), a_run(outcome="failed")])}
    current = {"key": "ok"}

    def get(_q):
        return next(answers[current["key"]])

    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": get}):
        succeeded = await cli("run", "wait", RUN_ID, "--output", "json")
        current["key"] = "bad"
        failed = await cli("run", "wait", RUN_ID)
    assert succeeded.code == 0 and json.loads(succeeded.stdout)["outcome"] == "succeeded"
    assert "phase running" in succeeded.stderr  # progress went to stderr
    assert failed.code == 1


async def test_wait_timeout_is_uncertain(amqp_url, topology):
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: a_run("running")}):
        result = await cli("run", "wait", RUN_ID, "--timeout", "1", "--quiet")
    assert result.code == 4 and "goes on" in result.stderr


def test_error_text_is_never_read_as_markup(capsys):
    """A server or user text like "[/x]" is printed as typed, not parsed by Rich."""
    from metallo.cli.exits import CliError, Exit
    from metallo.cli.render import print_error

    print_error(CliError("unknown action '[/x]' in ^[a-z0-9]([a-z0-9_.-]{0,61})?$", "see [/bold]docs", Exit.USAGE))
    err = capsys.readouterr().err
    assert "'[/x]'" in err and "^[a-z0-9]([a-z0-9_.-]{0,61})?$" in err and "[/bold]docs" in err


def test_tables_print_server_text_as_written(capsys):
    from metallo.cli.render import key_value_table, out

    pattern = "does not match '^[a-z0-9]([a-z0-9_.-]{0,61}[a-z0-9])?$'"
    out.print(key_value_table("Pipeline p-1", [("message", pattern)]))
    assert pattern in capsys.readouterr().out  # not read as Rich markup


async def test_list_tables_show_whole_ids_on_a_narrow_console(amqp_url, topology, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    handlers = {"ListRuns": lambda q: ec.ListRunsReply(runs=[a_run()]),
                "ListPipelines": lambda q: pc.ListPipelinesReply(pipelines=[a_pipeline("succeeded")])}
    async with StandIn(amqp_url, topology, ("execution_core", "pipeline_coordination"), handlers):
        runs = await cli("run", "list")
        pipelines = await cli("pipeline", "list")
    assert runs.code == 0 and RUN_ID in runs.stdout  # copyable into `metallo run show`
    assert pipelines.code == 0 and "p-1" in pipelines.stdout


def test_a_local_repository_with_a_work_tree_gets_a_stage_out_warning(tmp_path, capsys):
    import subprocess

    from metallo.cli.repository import repository_url

    work, bare = tmp_path / "work", tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    assert repository_url(str(work)) == str(work.resolve())
    assert "git clone --bare" in capsys.readouterr().err
    assert repository_url(f"file://{bare}") == f"file://{bare}"
    assert repository_url(str(bare)) == str(bare.resolve())
    assert capsys.readouterr().err == ""  # a bare repository takes pushes: no warning


def test_a_directory_that_is_not_itself_a_repository_is_not_found(tmp_path):
    # A plain directory inside another repository's work tree used to get that
    # repository's stage-out warning, then repository-not-found from the platform:
    # it is named for what it is, before anything is sent.
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "plain").mkdir()
    (tmp_path / "alone").mkdir()
    for path in (work / "plain", tmp_path / "alone"):
        result = run_cli("action", "run", str(path), "train")
        assert result.code == 3, result.stderr
        assert f"{path} is not a Git repository" in result.stderr
        assert "metallo dev publish" in result.stderr and "work tree" not in result.stderr
    result = run_cli("action", "run", f"file://{tmp_path / 'alone'}", "train")
    assert result.code == 3 and "is not a Git repository" in result.stderr


async def test_empty_lists_say_so_and_pipeline_steps_keep_whole_run_ids(amqp_url, topology, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    handlers = {"ListRuns": lambda q: ec.ListRunsReply(runs=[]),
                "ListPipelines": lambda q: pc.ListPipelinesReply(pipelines=[]),
                "GetPipeline": lambda q: a_pipeline("succeeded")}
    async with StandIn(amqp_url, topology, ("execution_core", "pipeline_coordination"), handlers):
        active = await cli("run", "list", "--active")
        pipelines = await cli("pipeline", "list")
        shown = await cli("pipeline", "show", "p-1")
    assert active.code == 0 and "no active Runs in Project" in active.stdout
    assert pipelines.code == 0 and "no Pipelines in Project" in pipelines.stdout
    steps = a_pipeline("succeeded").steps
    assert shown.code == 0 and all(s.run_id in shown.stdout for s in steps if s.run_id)


def test_a_bad_timeout_in_the_config_file_names_the_files_key(monkeypatch, tmp_path):
    monkeypatch.delenv("METALLO_CLI_TIMEOUT", raising=False)
    config = tmp_path / "config.toml"
    config.write_text('timeout_seconds = "abc"\n')
    monkeypatch.setenv("METALLO_CONFIG", str(config))
    result = run_cli("run", "show", RUN_ID)
    assert result.code == 2
    assert f"timeout_seconds in {config}" in result.stderr and "METALLO_CLI_TIMEOUT" not in result.stderr


def test_a_dot_git_directory_is_a_repository_and_the_callers_git_dir_does_not_count(
        tmp_path, monkeypatch, capsys):
    from metallo.cli.repository import repository_url

    work, bare = tmp_path / "work", tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    (tmp_path / "plain").mkdir()
    monkeypatch.setenv("GIT_DIR", str(bare))  # would make git answer for bare.git
    assert repository_url(str(work / ".git")) == str((work / ".git").resolve())
    assert "git clone --bare" in capsys.readouterr().err  # its branch is checked out
    assert repository_url(str(bare)) == str(bare.resolve())
    assert capsys.readouterr().err == ""  # a bare repository takes pushes
    result = run_cli("action", "run", str(tmp_path / "plain"), "train")
    assert result.code == 3 and "is not a Git repository" in result.stderr
    for missing in (f"file://{tmp_path / 'nope'}", f"file://{work / '.git' / 'HEAD'}"):
        result = run_cli("action", "run", missing, "train")
        assert result.code == 3 and "no such local repository" in result.stderr
