"""Publish a directory as a repository on the dev stack's lab Git server
(``metallo dev publish``): create the bare repository through the operator route
(``PUT /git-admin/repositories/<name>.git``), commit the directory's files on
``main`` in a throw-away clone and push them.

The operator token reaches git only through ``GIT_ASKPASS`` reading this
process's environment — never a URL, a command line or a log.

Symbolic links are never followed out of the directory: a link whose target
stays inside it is published as a link (git stores the link, not what it points
at); a link that is absolute or leads outside (``/etc``, ``../secrets``, or a
chain through other links) refuses the whole publication, before anything is
created on the server.
"""

from __future__ import annotations

import os
import re
import shutil
import ssl
import stat
import subprocess
import tempfile
from pathlib import Path

import httpx

from metallo.devstack.layout import Layout

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NAME_RULE = ("a letter or digit, then up to 99 letters, digits, '.', '_' or '-' "
             "(pattern ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$)")
IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.pyc", "model.json", "metrics.json")
GIT_TIMEOUT_SECONDS = 120
ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$METALLO_PUBLISH_USERNAME" ;;
  *) printf '%s\\n' "$METALLO_PUBLISH_TOKEN" ;;
esac
"""


class PublishError(Exception):
    """Publishing failed; the message says why (never the token)."""


def valid_name(name: str) -> bool:
    """True when ``name`` may name a lab repository (``NAME.git``): see :data:`NAME_RULE`."""
    return NAME.fullmatch(name) is not None  # fullmatch: "$" alone lets a trailing newline in


def _git_env(tmp: str, ca: Path, token: str) -> dict[str, str]:
    askpass = Path(tmp) / "askpass.sh"
    askpass.write_text(ASKPASS)
    askpass.chmod(stat.S_IRWXU)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tmp,
            "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": str(askpass),
            "METALLO_PUBLISH_USERNAME": "operator", "METALLO_PUBLISH_TOKEN": token,
            "GIT_AUTHOR_NAME": "Metallo demo", "GIT_AUTHOR_EMAIL": "demo@metallo.invalid",
            "GIT_COMMITTER_NAME": "Metallo demo", "GIT_COMMITTER_EMAIL": "demo@metallo.invalid",
            "GIT_SSL_CAINFO": str(ca)}


def _runner(work: Path, env: dict[str, str]):
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip())[-500:]
            raise PublishError(f"git {args[0]} failed: {said or f'exit status {done.returncode}'}")
        return done.stdout
    return git


def read_file(url: str, branch: str, commit: str, path: str, *,
              layout: Layout | None = None) -> bytes:
    """The bytes of ``path`` at ``commit`` (reachable from ``branch``) of a lab repository.

    Raises PublishError when the fetch fails or the file is not in that commit.
    """
    layout = layout or Layout.default()
    ca = layout.certs / "ca.pem"
    token = (layout.secrets / "git-operator-token").read_text(encoding="utf-8").strip()
    with tempfile.TemporaryDirectory(prefix="metallo-read-") as tmp:
        work = Path(tmp) / "repo"
        work.mkdir()
        git = _runner(work, _git_env(tmp, ca, token))
        git("init", "-q")
        git("fetch", "-q", "--no-tags", url, f"refs/heads/{branch}")
        return git("show", f"{commit}:{path}").encode("utf-8")


def publish(source: Path, name: str, *, edge_url: str, layout: Layout | None = None,
            branch: str = "main") -> tuple[str, str]:
    """Publish ``source`` as ``<name>.git``; returns (repository URL, commit on ``branch``).

    The commit holds exactly the directory's files. A repository that exists already
    gets it as a new commit on top of ``branch`` (files gone from the directory are
    deleted); when nothing changed, no commit is made and the branch's commit is
    returned. Raises PublishError for a bad name, a missing directory, a refused
    creation or a failed push (another publisher moving the branch meanwhile).
    """
    layout = layout or Layout.default()
    if not valid_name(name):
        raise PublishError(f"repository name {name!r}: use {NAME_RULE}")
    if not source.is_dir():
        raise PublishError(f"{source} is not a directory")
    if not _has_files(source):
        raise PublishError(f"{source} holds no file to publish (.git, caches and the demo's "
                           "outputs are left out); nothing was created")
    ca = layout.certs / "ca.pem"
    token = (layout.secrets / "git-operator-token").read_text(encoding="utf-8").strip()
    repo = f"{name}.git"
    url = f"{edge_url}/git/{repo}"
    with tempfile.TemporaryDirectory(prefix="metallo-publish-") as tmp:
        work = Path(tmp) / "repo"
        # Links are copied as links, then judged in this private copy (what is committed).
        shutil.copytree(source, work, ignore=IGNORED, symlinks=True)
        if leaving := links_leaving(work):
            shown = "; ".join(leaving[:5]) + (f"; … ({len(leaving)} in all)" if len(leaving) > 5 else "")
            raise PublishError(f"{source} has symbolic links leading outside it ({shown}): "
                               "they are never published; copy the files in or make each "
                               "link point inside the directory. Nothing was created")
        context = ssl.create_default_context(cafile=str(ca))
        with httpx.Client(verify=context, timeout=30, trust_env=False) as client:
            answer = client.put(f"{edge_url}/git-admin/repositories/{repo}",
                                auth=("operator", token))
        if answer.status_code not in (200, 201):
            raise PublishError(f"the lab Git server refused to create {repo}: HTTP "
                               f"{answer.status_code} {answer.text[:200]}")
        env = _git_env(tmp, ca, token)
        git = _runner(work, env)
        git("init", "-q", "-b", branch)
        existing = _fetch_branch(work, env, url, branch)
        if existing:
            git("reset", "-q", "--soft", existing)  # parent = the branch; the index stays empty
        git("add", "-A")
        if existing and not _staged_changes(work, env):
            return url, existing
        git("commit", "-q", "-m", f"{name}: {'update' if existing else 'initial import'}")
        git("push", "-q", url, f"HEAD:refs/heads/{branch}")
        return url, git("rev-parse", "HEAD").strip()


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def links_leaving(root: Path) -> list[str]:
    """The symbolic links under ``root`` (never followed) that are absolute or lead
    outside ``root`` — by their text or once resolved through other links — as
    ``"relative/path -> target"``, sorted."""
    top = os.path.abspath(root)
    real_top = os.path.realpath(root)
    leaving = []
    for directory, dirs, files in os.walk(top):
        for entry in (*dirs, *files):
            path = os.path.join(directory, entry)
            if not os.path.islink(path):
                continue
            target = os.readlink(path)
            lexical = os.path.normpath(os.path.join(directory, target))
            if (os.path.isabs(target) or not _inside(lexical, top)
                    or not _inside(os.path.realpath(path), real_top)):
                leaving.append(f"{os.path.relpath(path, top)} -> {target}")
    return sorted(leaving)


def _has_files(source: Path) -> bool:
    """Whether ``source`` holds a file that :data:`IGNORED` does not leave out."""
    for root, dirs, files in os.walk(source):
        ignored = IGNORED(root, [*dirs, *files])
        dirs[:] = [d for d in dirs if d not in ignored]
        if any(f not in ignored for f in files):
            return True
    return False


def clone(url: str, destination: Path, *, branch: str | None = None,
          layout: Layout | None = None) -> str:
    """Clone a lab repository (``url``) into ``destination`` — a member reading what a
    Run pushed — with the operator token through ``GIT_ASKPASS`` (never stored in the
    clone); the clone keeps the dev stack's CA for later fetches. Returns the checked-out
    commit. Raises PublishError when the destination exists or git fails."""
    layout = layout or Layout.default()
    if destination.exists():
        raise PublishError(f"{destination} exists already; pass another directory")
    ca = layout.certs / "ca.pem"
    token = (layout.secrets / "git-operator-token").read_text(encoding="utf-8").strip()
    with tempfile.TemporaryDirectory(prefix="metallo-clone-") as tmp:
        env = _git_env(tmp, ca, token)
        try:
            _runner(Path(tmp), env)(  # git makes the destination and its parents
                "clone", "-q", *(("-b", branch) if branch else ()), "--", url, str(destination))
            here = _runner(destination, env)
            here("config", "http.sslCAInfo", str(ca))
            if not here("branch", "--list").strip():
                raise PublishError("the repository is empty: nothing has been pushed to it")
            return here("rev-parse", "HEAD").strip()
        except BaseException:
            shutil.rmtree(destination, ignore_errors=True)  # no half clone left behind
            raise


def _fetch_branch(work: Path, env: dict[str, str], url: str, branch: str) -> str | None:
    """The commit ``branch`` points at on ``url`` (fetched into ``work``), or None
    when the repository has no such branch yet."""
    done = subprocess.run(["git", "fetch", "-q", "--no-tags", url, f"refs/heads/{branch}"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
    if done.returncode != 0:
        if "couldn't find remote ref" in done.stderr:
            return None
        raise PublishError(f"git fetch failed: {done.stderr.strip()[-500:]}")
    return _runner(work, env)("rev-parse", "FETCH_HEAD").strip()


def _staged_changes(work: Path, env: dict[str, str]) -> bool:
    done = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=work, env=env,
                          capture_output=True, timeout=GIT_TIMEOUT_SECONDS, check=False)
    return done.returncode != 0
