"""``metallo dev publish`` picks and checks the repository name before anything is
pushed, and ``metallo dev status --output json`` prints one JSON document even for a
stopped stack. The lab Git server is not involved: the stack state and the push are
replaced; the CLI's parsing, validation, exit codes and output are the real ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metallo.devstack import control, gitrepo
from tests.unit.cli_support import run_cli

LIVE = {"pid": 4242, "status": "ready", "executor": "local", "edge_url": "https://127.0.0.1:8443",
        "components": {}}


@pytest.fixture
def pushed(monkeypatch) -> list[str]:
    """A running stack whose lab Git server records the names published to it."""
    names: list[str] = []

    def publish(source: Path, name: str, *, edge_url: str, **_kw) -> tuple[str, str]:
        assert source.is_dir() and edge_url == LIVE["edge_url"]
        names.append(name)
        return f"{edge_url}/git/{name}.git", "c" * 40

    monkeypatch.setattr(control, "running_supervisor", lambda layout: LIVE)
    monkeypatch.setattr(gitrepo, "publish", publish)
    return names


def test_publish_defaults_to_the_directorys_own_name(pushed, tmp_path, monkeypatch):
    (tmp_path / "var" / "myrepo").mkdir(parents=True)
    done = run_cli("dev", "publish", str(tmp_path / "var" / "myrepo"), "--output", "json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["repository_url"].endswith("/git/myrepo.git")

    monkeypatch.chdir(tmp_path / "var" / "myrepo")
    assert run_cli("dev", "publish", ".").code == 0  # "." is the current directory's name
    assert pushed == ["myrepo", "myrepo"]


def test_a_missing_directory_is_not_found_but_a_bad_name_is_refused_first(pushed, tmp_path):
    missing = run_cli("dev", "publish", str(tmp_path / "absent"), "--name", "demo")
    assert missing.code == 3 and "no such directory" in missing.stderr
    assert run_cli("dev", "publish", str(tmp_path / "absent"), "--name", "a b").code == 2
    assert pushed == []


def test_publish_passes_an_explicit_name(pushed, tmp_path):
    done = run_cli("dev", "publish", str(tmp_path), "--name", "demo")
    assert done.code == 0, done.stderr
    assert done.stdout.startswith("https://127.0.0.1:8443/git/demo.git main ")
    assert pushed == ["demo"]


@pytest.mark.parametrize("name", ["bad name/../x", "..", "-x", "a/b", "x" * 101, "demo\n"])
def test_a_bad_name_is_a_usage_error_naming_the_pattern(pushed, tmp_path, name):
    done = run_cli("dev", "publish", str(tmp_path), "--name", name, "--output", "json")
    assert done.code == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid-argument" and error["exit_code"] == 2
    assert "--name" in error["hint"] and "[A-Za-z0-9._-]" in error["hint"]
    assert pushed == []  # nothing was pushed


def test_a_directory_whose_name_is_not_a_valid_name_asks_for_name(pushed, tmp_path):
    (tmp_path / "my repo").mkdir()
    done = run_cli("dev", "publish", str(tmp_path / "my repo"))
    assert done.code == 2
    assert "'my repo'" in done.stderr and "pass --name NAME" in done.stderr
    assert pushed == []


def test_status_of_a_stopped_stack_is_one_json_document(monkeypatch):
    monkeypatch.setattr(control, "running_supervisor", lambda layout: None)
    done = run_cli("dev", "status", "--output", "json")
    assert done.code == 3
    document = json.loads(done.stdout)  # exactly one document: a second would not parse
    assert document["status"] == "stopped"
    assert document["error"]["code"] == "stack-not-running" and document["error"]["exit_code"] == 3
    assert "metallo dev up" in done.stderr

    table = run_cli("dev", "status")
    assert table.code == 3 and table.stdout == "" and "not running" in table.stderr


def test_progress_into_a_closed_pipe_does_not_cut_dev_down_short():
    # `metallo dev down 2>&1 | head -1`: Rich ends the process when its reader has gone,
    # which stopped `dev down` halfway (grant not revoked, state file stale). The
    # progress must go quiet and the work go on.
    probe = (
        "import os\n"
        "r, w = os.pipe(); os.close(r)\n"
        "os.dup2(w, 2)\n"
        "from metallo.cli import dev\n"
        "dev._say('stopping the dev stack'); dev._say('the dev stack is stopped')\n"
        "open(os.environ['DONE'], 'w').write('went on')\n"
    )
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = os.path.join(tmp, "done")
        finished = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "DONE": done},
                                  capture_output=True, timeout=60)
        assert finished.returncode == 0
        assert open(done).read() == "went on"


def test_an_unknown_executor_is_refused_with_the_valid_ones(monkeypatch):
    monkeypatch.setattr(control, "running_supervisor", lambda layout: None)
    refused = run_cli("dev", "up", "--executor", "nope")
    assert refused.code == 2
    assert "unknown executor 'nope': the executors are auto, local, slurm" in refused.stderr
    assert "`metallo dev up --executor local`" in refused.stderr
    assert "use the command the message gives" not in refused.stderr


def test_another_executor_already_running_names_the_commands(monkeypatch):
    monkeypatch.setattr(control, "running_supervisor", lambda layout: LIVE)
    refused = run_cli("dev", "up", "--executor", "slurm")
    assert refused.code == 2
    assert "already runs with the local executor" in refused.stderr
    assert "run `metallo dev down`, then `metallo dev up --executor slurm`" in refused.stderr
