"""``metallo dev clone``'s git side (metallo.devstack.gitrepo.clone) on local bare
repositories: parents are made, nothing half-cloned is left behind, the operator
token never lands in the clone. The lab Git server itself: tests/e2e/test_publish.py."""

from __future__ import annotations

import subprocess

import pytest

from metallo.devstack.gitrepo import PublishError, clone
from metallo.devstack.layout import Layout


@pytest.fixture
def layout(tmp_path):
    root = tmp_path / "dev"
    (root / "certs").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "certs" / "ca.pem").write_text("unused for file:// URLs\n")
    (root / "secrets" / "git-operator-token").write_text("lgt_operator_secret\n")
    return Layout(root)


def bare(tmp_path, with_commit: bool) -> str:
    repo = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True)
    if with_commit:
        work = tmp_path / "work"
        subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
        (work / "metrics.json").write_text("{}\n")
        env = ["-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(["git", *env, "-C", str(work), "add", "-A"], check=True)
        subprocess.run(["git", *env, "-C", str(work), "commit", "-qm", "m"], check=True)
        subprocess.run(["git", "-C", str(work), "push", "-q", str(repo), "main"], check=True)
    return f"file://{repo}"


def test_a_clone_makes_its_parents_and_keeps_no_token(tmp_path, layout):
    destination = tmp_path / "no" / "such" / "parent" / "copy"
    commit = clone(bare(tmp_path, True), destination, layout=layout)
    assert len(commit) == 40 and (destination / "metrics.json").exists()
    kept = b"".join(p.read_bytes() for p in (destination / ".git").rglob("*") if p.is_file())
    assert b"lgt_operator_secret" not in kept


def test_an_empty_repository_leaves_nothing_behind(tmp_path, layout):
    destination = tmp_path / "copy"
    with pytest.raises(PublishError, match="empty"):
        clone(bare(tmp_path, False), destination, layout=layout)
    assert not destination.exists()  # so the same command can run again later
