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


def test_a_clone_shows_what_was_pushed_and_an_empty_directory_is_not_published(
    local_stack, tmp_path
):
    name = f"clone-{uuid.uuid4().hex[:8]}"
    source = tmp_path / "source"
    source.mkdir()
    (source / "actions.yaml").write_text("version: 1\nactions: {}\n")
    published = _publish(source, name)
    done = metallo("dev", "clone", name, str(tmp_path / "copy"), "--output", "json")
    assert done.code == 0, done.stderr
    assert done.json()["commit"] == published["commit"]
    assert (tmp_path / "copy" / "actions.yaml").read_text() == "version: 1\nactions: {}\n"
    # The operator token is not kept in the clone.
    token = (Layout.default().secrets / "git-operator-token").read_text().strip()
    kept = "".join(p.read_text(errors="replace") for p in (tmp_path / "copy" / ".git").rglob("*")
                   if p.is_file() and p.stat().st_size < 1_000_000)
    assert token not in kept
    again = metallo("dev", "clone", published["repository_url"], str(tmp_path / "copy"))
    assert again.code == 1 and "exists already" in again.stderr

    empty = tmp_path / "empty"
    (empty / "__pycache__").mkdir(parents=True)  # left out: nothing to publish
    refused = metallo("dev", "publish", str(empty), "--name", f"{name}-empty")
    assert refused.code == 1 and "holds no file to publish" in refused.stderr
    missing = metallo("dev", "clone", f"{name}-empty", str(tmp_path / "none"))
    assert missing.code == 1  # nothing was created on the server
