"""The stage runner's Git LFS handling on a real git repository (seed 004 §8C: model
files through Git/LFS): filters without hooks, and LFS detection by attribute."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from site_runtime.adaptors.local.stage_runner import Runner


def runner(tmp_path: Path) -> Runner:
    repo, control = tmp_path / "repo", tmp_path / "control"
    repo.mkdir()
    control.mkdir()
    spec = {"repo_dir": str(repo), "log_file": str(tmp_path / "stage.log"),
            "author": {"name": "Metallo", "email": "metallo@localhost"}}
    return Runner(control, spec, credentials={})


def test_git_lfs_is_installed():
    # scripts/slurm-lab up installs it (Debian git-lfs); without it LFS outputs are lost.
    assert shutil.which("git-lfs") is not None


def test_lfs_is_detected_by_attribute_and_filters_come_without_hooks(tmp_path):
    r = runner(tmp_path)
    repo = Path(r.spec["repo_dir"])
    assert r.repo.git("init", "-q", f"--template={r.repo.checkout_template()}")[0] == 0
    # The filters as `git lfs install --local --skip-repo` writes them, no hooks at all
    # (not even git's samples), no automatic maintenance after a fetch.
    assert not (repo / ".git" / "hooks").exists() or not any((repo / ".git" / "hooks").iterdir())
    config = subprocess.run(["git", "-C", str(repo), "config", "--local", "--list"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert {"filter.lfs.clean=git-lfs clean -- %f", "filter.lfs.smudge=git-lfs smudge -- %f",
            "filter.lfs.process=git-lfs filter-process", "filter.lfs.required=true",
            "maintenance.auto=false", "gc.auto=0", "core.bare=false"} <= set(config)
    (repo / "notes.txt").write_text("plain\n")
    r.repo.git("add", "-A")
    assert r.repo.lfs_files() is False  # no file under an LFS filter

    (repo / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    (repo / "model.bin").write_bytes(b"\x00\x01weights" * 100)
    r.repo.git("add", "-A")
    assert r.repo.lfs_files() is True
    assert r.repo.git("commit", "-q", "--no-verify", "-m", "model")[0] == 0
    # The filter ran: the commit holds an LFS pointer, not the bytes.
    blob = subprocess.run(["git", "-C", str(repo), "show", "HEAD:model.bin"], capture_output=True,
                          check=True).stdout
    assert blob.startswith(b"version https://git-lfs.github.com/spec/v1")


def test_the_runner_starts_without_site_packages(tmp_path):
    # The local executor starts it with -I -S: it must need the standard library only.
    import subprocess

    from site_runtime.adaptors.local.processes import RUNNER_ARGV

    assert "-S" in RUNNER_ARGV
    done = subprocess.run([*RUNNER_ARGV], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage:" in done.stderr  # imported fine, then asked for CONTROL_DIR
    done = subprocess.run([*RUNNER_ARGV, str(tmp_path / "missing")], capture_output=True, text=True, timeout=30)
    assert "ModuleNotFoundError" not in done.stderr


def test_a_repository_ca_file_is_the_only_ca_git_trusts(tmp_path):
    r = runner(tmp_path)
    assert "GIT_SSL_CAINFO" not in r.repo.git_env() and "GIT_SSL_CAPATH" not in r.repo.git_env()
    r.spec["repository_ca_file"] = str(tmp_path / "ca.pem")
    env = r.repo.git_env()
    assert env["GIT_SSL_CAINFO"] == str(tmp_path / "ca.pem")
    # An empty private directory instead of the system's certificate directory.
    ca_path = Path(env["GIT_SSL_CAPATH"])
    assert ca_path.is_dir() and not any(ca_path.iterdir())
    assert ca_path.stat().st_mode & 0o777 == 0o700


def test_stage_out_pushes_after_stage_in_of_an_lfs_history(tmp_path):
    """A Pipeline hand-off: the input commit holds model.bin v2 on top of v1 (both LFS).
    Stage-in pulls only v2; stage-out must still push the step's new commit (`git lfs
    push` walks the whole history when no remote-tracking ref exists)."""
    import os
    import time

    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@a",
           "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@a"}
    lfs = ["-c", "filter.lfs.clean=git-lfs clean -- %f",
           "-c", "filter.lfs.process=git-lfs filter-process", "-c", "filter.lfs.required=true"]

    def sh(*args: str, cwd: Path) -> str:
        return subprocess.run(args, cwd=cwd, check=True, env=env, capture_output=True,
                              text=True).stdout.strip()

    remote, src = tmp_path / "remote.git", tmp_path / "src"
    sh("git", "init", "-q", "--bare", str(remote), cwd=tmp_path)
    sh("git", "init", "-q", str(src), cwd=tmp_path)
    (src / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    for version in (1, 2):
        (src / "model.bin").write_bytes(os.urandom(5000))
        sh("git", *lfs, "add", "-A", cwd=src)
        sh("git", "commit", "-qm", f"model v{version}", cwd=src)
    url = f"file://{remote}"
    sh("git", "lfs", "push", "--all", url, cwd=src)
    sh("git", "push", "-q", "--no-verify", url, "HEAD:refs/heads/main", cwd=src)
    commit = sh("git", "rev-parse", "HEAD", cwd=src)

    r = runner(tmp_path)
    r.spec.update(stage="stage-in", message="outputs",
                  repository={"url": url, "commit": commit, "branch": "main"})
    r.deadline = time.monotonic() + 120
    assert r.stage_in() == {"exit_code": 0}, (tmp_path / "stage.log").read_text()
    repo = Path(r.spec["repo_dir"])
    assert (repo / "model.bin").read_bytes() == (src / "model.bin").read_bytes()  # v2, smudged
    (repo / "metrics.txt").write_text("0.9\n")
    out = r.stage_out()
    assert out["exit_code"] == 0, (out, (tmp_path / "stage.log").read_text()[-800:])
    assert sh("git", "rev-parse", "refs/heads/main", cwd=remote) == out["output_commit"]
