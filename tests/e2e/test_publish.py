"""`metallo dev publish` on the real lab Git server: publishing again adds a commit."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest

from metallo.devstack.gitrepo import PublishError, _git_env, _runner, read_file
from metallo.devstack.layout import Layout
from tests.e2e.conftest import metallo

pytestmark = pytest.mark.e2e


def _publish(directory: Path, name: str) -> dict:
    done = metallo("dev", "publish", str(directory), "--name", name, "--output", "json", timeout=120)
    assert done.code == 0, done.stderr
    return done.json()


def _parent(url: str, commit: str) -> str:
    layout = Layout.default()
    token = (layout.secrets / "git-operator-token").read_text().strip()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        work.mkdir()
        git = _runner(work, _git_env(tmp, layout.certs / "ca.pem", token))
        git("init", "-q")
        git("fetch", "-q", url, "refs/heads/main")
        return git("rev-parse", f"{commit}^").strip()


def test_publishing_again_adds_a_commit_with_exactly_the_directorys_files(local_stack, tmp_path):
    name = f"republish-{uuid.uuid4().hex[:8]}"
    (tmp_path / "actions.yaml").write_text("version: 1\nactions: {}\n")
    (tmp_path / "old.txt").write_text("old\n")
    first = _publish(tmp_path, name)

    (tmp_path / "old.txt").unlink()
    (tmp_path / "new.txt").write_text("new\n")
    second = _publish(tmp_path, name)
    assert second["commit"] != first["commit"]
    assert _parent(second["repository_url"], second["commit"]) == first["commit"]
    url = second["repository_url"]
    assert read_file(url, "main", second["commit"], "new.txt") == b"new\n"
    with pytest.raises(PublishError):
        read_file(url, "main", second["commit"], "old.txt")  # gone from the directory: deleted

    assert _publish(tmp_path, name)["commit"] == second["commit"]  # nothing changed: no commit
