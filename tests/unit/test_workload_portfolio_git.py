"""The git Source Control adapter against real repositories made by the test."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from metallo.repository_policy import RepositoryPolicy
from tests.unit.workload_portfolio_repos import ACTIONS, commit, git, make_repo
from workload_portfolio.adaptors.git_source import Credential, GitSourceControl, HostCredentials
from workload_portfolio.domain.errors import InvalidArgument, SourceError

LOCAL = RepositoryPolicy.of(allow_local=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "repo"
    make_repo(path, {"actions.yaml": ACTIONS, "train.py": "print('hi')\n"})
    return path


async def read(url, **kw):
    kw.setdefault("branch", None)
    kw.setdefault("commit", None)
    kw.setdefault("path", "actions.yaml")
    kw.setdefault("max_bytes", 1024 * 1024)
    return await GitSourceControl(policy=LOCAL, timeout_seconds=20).read_file(url, **kw)


async def test_branch_resolves_to_its_commit_and_the_file_is_read_there(repo):
    first = git(repo, "rev-parse", "HEAD")
    f = await read(str(repo), branch="main")
    assert (f.commit, f.content.decode()) == (first, ACTIONS)
    second = commit(repo, {"actions.yaml": ACTIONS + "# moved\n"})
    moved = await read(f"file://{repo}", branch="main")
    assert moved.commit == second and moved.content.decode().endswith("# moved\n")
    pinned = await read(str(repo), commit=first)  # the exact old commit, not the branch tip
    assert (pinned.commit, pinned.content.decode()) == (first, ACTIONS)


async def test_distinct_errors(repo, tmp_path):
    cases = [
        ({"url": str(tmp_path / "missing")}, {"branch": "main"}, "repository-not-found"),
        ({"url": str(tmp_path)}, {"branch": "main"}, "repository-not-found"),  # a directory, not a repo
        ({"url": f"file://{tmp_path}/missing"}, {"branch": "main"}, "repository-not-found"),
        ({"url": str(repo)}, {"branch": "nope"}, "branch-not-found"),
        ({"url": str(repo)}, {"commit": "0" * 40}, "commit-not-found"),
        ({"url": str(repo)}, {"branch": "main", "path": "missing.yaml"}, "file-not-found"),
        ({"url": str(repo)}, {"branch": "main", "path": "train.py", "max_bytes": 4}, "file-too-large"),
    ]
    for target, kw, code in cases:
        with pytest.raises(SourceError) as exc:
            await read(target["url"], **kw)
        assert exc.value.code == code, (target, kw, exc.value)


async def test_a_directory_in_place_of_the_file_is_file_not_found(repo):
    commit(repo, {"sub/actions.yaml/x": "x"})
    with pytest.raises(SourceError) as exc:
        await read(str(repo), branch="main", path="sub/actions.yaml")
    assert exc.value.code == "file-not-found"


@pytest.mark.parametrize("url", ["relative/path", "ssh://host/repo.git", "ext::sh -c evil", "-uhack",
                                 "https://user:pw@example.org/r.git", "http://example.org/r.git",
                                 "file://remote-host/r.git", "https://example.org/a b"])
async def test_unsafe_or_unsupported_urls_are_refused(url):
    with pytest.raises(InvalidArgument):
        await read(url, branch="main")


@pytest.mark.parametrize("kw", [{"branch": "-x"}, {"branch": "a..b"}, {"branch": "a b"},
                                {"commit": "abc"}, {"commit": "A" * 40}, {},
                                {"branch": "main", "path": "../etc/passwd"}])
async def test_bad_names_are_refused(repo, kw):
    with pytest.raises(InvalidArgument):
        await read(str(repo), **kw)


async def test_credentials_travel_in_the_environment_never_argv_and_prompts_are_off(repo, tmp_path):
    # A wrapper records each git call's argv and the environment it got, then runs git.
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "git-wrapper"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'printf "ARGV %s\\n" "$*" >> {log}\n'
        f'env | sort | sed "s/^/ENV /" >> {log}\n'
        'exec git "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    secret = "glpat-very-secret-token"
    creds = HostCredentials({"example.org": Credential("deploy", secret)})
    assert secret not in repr(creds)
    # The https host cannot be reached here, so drive a local read with a provider
    # that hands out the credential for every URL: the wrapper sees how git gets it.
    class Everyone:
        def credential_for(self, url):
            return Credential("deploy", secret)

    source = GitSourceControl(policy=LOCAL, timeout_seconds=20, credentials=Everyone(),
                              git=str(wrapper))
    f = await source.read_file(str(repo), branch="main", commit=None, path="actions.yaml", max_bytes=10**6)
    assert f.content.decode() == ACTIONS
    lines = log.read_text().splitlines()
    argv = [ln for ln in lines if ln.startswith("ARGV ")]
    env = [ln for ln in lines if ln.startswith("ENV ")]
    assert argv and not any(secret in ln for ln in argv)
    assert "ENV GIT_TERMINAL_PROMPT=0" in env
    assert any(ln.startswith("ENV GIT_CONFIG_VALUE_") and "Authorization: Basic" in ln for ln in env)
    assert not any(ln.startswith("ENV SSH_AUTH_SOCK") for ln in env)
    assert creds.credential_for("https://example.org/x.git").username == "deploy"
    assert creds.credential_for("https://other.example.org/x.git") is None
    assert creds.credential_for("file:///x") is None


async def test_a_hanging_git_is_killed_after_the_timeout(tmp_path, repo):
    wrapper = tmp_path / "slow-git"
    wrapper.write_text("#!/bin/sh\nexec sleep 30\n")
    wrapper.chmod(0o755)
    with pytest.raises(SourceError) as exc:
        await GitSourceControl(policy=LOCAL, timeout_seconds=0.5, git=str(wrapper)).read_file(
            str(repo), branch="main", commit=None, path="actions.yaml", max_bytes=100)
    assert exc.value.code == "source-unavailable"
    assert "longer than 0.5 s" in exc.value.message
    assert os.path.exists(repo)


async def test_the_repository_policy_is_applied_before_any_fetch(repo, tmp_path):
    production = GitSourceControl(policy=RepositoryPolicy.of(["gitlab.example.org"]),
                                  timeout_seconds=5, git=str(tmp_path / "no-git-is-run"))
    cases = {
        "https://169.254.169.254/latest/meta-data/iam": "repository-host-not-allowed",
        "https://10.0.0.1/x.git": "repository-host-not-allowed",
        str(repo): "repository-local-not-allowed",
        f"file://{repo}": "repository-local-not-allowed",
    }
    for url, code in cases.items():
        with pytest.raises(InvalidArgument) as exc:
            await production.read_file(url, branch="main", commit=None, path="actions.yaml",
                                       max_bytes=100)
        assert exc.value.code == code, url
    state = GitSourceControl(policy=RepositoryPolicy.of(allow_local=True, state_dirs=[str(repo)]),
                             timeout_seconds=5)
    with pytest.raises(InvalidArgument) as exc:
        await state.read_file(str(repo), branch="main", commit=None, path="actions.yaml",
                              max_bytes=100)
    assert exc.value.code == "repository-in-platform-state"


def test_ls_remote_output_becomes_the_bounded_sorted_branch_list():
    from workload_portfolio.adaptors.git_source import parse_ls_remote

    a, b = "a" * 40, "b" * 40
    text = (f"ref: refs/heads/trunk\tHEAD\n{a}\tHEAD\n{b}\trefs/heads/zeta\n"
            f"{a}\trefs/heads/trunk\n{a}\trefs/heads/alpha\nnot-a-commit\trefs/heads/odd\n")
    found = parse_ls_remote(text, limit=2)
    assert found.branches == (("alpha", a), ("trunk", a)) and found.truncated
    assert found.default_branch == "trunk"
    whole = parse_ls_remote(text)
    assert [n for n, _ in whole.branches] == ["alpha", "trunk", "zeta"] and not whole.truncated
    assert parse_ls_remote("").branches == () and parse_ls_remote("").default_branch == ""


def _git_requests(method: str) -> tuple[float, float]:
    from metallo.operations.metrics import NATIVE_REQUEST_ERRORS, NATIVE_REQUEST_SECONDS

    count = sum(s.value for m in NATIVE_REQUEST_SECONDS.collect() for s in m.samples
                if s.name.endswith("_count") and s.labels == {"target": "git", "method": method})
    return count, NATIVE_REQUEST_ERRORS.labels("git", method)._value.get()


async def test_fetches_are_measured_as_git_native_requests(repo, tmp_path):
    fetched, failed = _git_requests("fetch")
    await read(str(repo), branch="main")
    after, after_failed = _git_requests("fetch")
    assert after >= fetched + 1 and after_failed == failed  # local git work is not counted
    with pytest.raises(SourceError):  # the server has no such branch: the fetch fails
        await read(str(repo), branch="nope")
    assert _git_requests("fetch")[1] >= failed + 1
