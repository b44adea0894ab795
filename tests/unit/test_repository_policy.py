"""Repository URLs are policy (metallo.repository_policy): https only to the
configured Git hosts, local repositories only where enabled and never inside the
platform's own state, symbolic links resolved."""

from __future__ import annotations

import os

import pytest

from metallo.repository_policy import RepositoryPolicy, RepositoryRefused

LAB = "127.0.0.1:8443"


def _code(policy: RepositoryPolicy, url: str) -> str:
    with pytest.raises(RepositoryRefused) as exc:
        policy.check(url)
    assert exc.value.message
    return exc.value.code


def test_https_hosts_must_be_listed():
    policy = RepositoryPolicy.of([LAB, "GitLab.Example.org"])
    assert policy.check("https://127.0.0.1:8443/git/demo.git")
    assert policy.check("https://gitlab.example.org/group/demo.git")
    assert policy.check("https://gitlab.example.org:443/group/demo.git")
    assert policy.check("https://GITLAB.example.org./group/demo.git")
    for url in ("https://169.254.169.254/latest/meta-data/", "https://127.0.0.1/git/demo.git",
                "https://127.0.0.1:8444/git/demo.git", "https://gitlab.example.org:8443/x.git",
                "https://metadata.google.internal/x", "https://[::1]:8443/git/demo.git",
                "https://gitlab.example.org.evil.test/x.git", "https:///nohost.git"):
        assert _code(policy, url) == "repository-host-not-allowed", url


def test_credentials_other_schemes_and_junk_are_refused():
    policy = RepositoryPolicy.of([LAB], allow_local=True)
    assert _code(policy, "https://x:y@127.0.0.1:8443/git/demo.git") == "repository-url-invalid"
    assert _code(policy, "https://127.0.0.1:8443@169.254.169.254/x") == "repository-url-invalid"
    assert _code(policy, "https://127.0.0.1:99999/x") == "repository-url-invalid"
    for url in ("http://127.0.0.1:8443/git/demo.git", "ssh://git@127.0.0.1/demo.git",
                "git://127.0.0.1/demo.git", "ext::sh -c evil", "demo.git"):
        assert _code(policy, url) in ("repository-scheme-not-allowed", "repository-url-invalid"), url
    for url in ("", "https://127.0.0.1:8443/a b", "/tmp/a\x00b", "x" * 3000):
        assert _code(policy, url) == "repository-url-invalid"


def test_local_repositories_only_when_enabled(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    production = RepositoryPolicy.of([LAB])
    assert _code(production, str(repo)) == "repository-local-not-allowed"
    assert _code(production, f"file://{repo}") == "repository-local-not-allowed"
    development = RepositoryPolicy.of([LAB], allow_local=True)
    assert development.check(str(repo)) == str(repo)
    assert development.check(f"file://{repo}") == f"file://{repo}"
    assert _code(development, f"file://otherhost{repo}") == "repository-url-invalid"


def test_never_under_the_platforms_state_even_through_links(tmp_path):
    state = tmp_path / "var" / "dev"
    (state / "git" / "demo.git").mkdir(parents=True)
    (state / "secrets").mkdir()
    link = tmp_path / "innocent"
    os.symlink(state / "git", link)
    policy = RepositoryPolicy.of([LAB], allow_local=True, state_dirs=[str(state)])
    for url in (str(state / "git" / "demo.git"), f"file://{state}/secrets",
                f"{tmp_path}/elsewhere/../var/dev/git/demo.git", f"{link}/demo.git",
                f"file://{link}/demo.git", str(state), "/var/lib/metallo/issuer"):
        assert _code(policy, url) == "repository-in-platform-state", url
    beside = tmp_path / "var" / "dev-other"
    beside.mkdir()
    assert policy.check(str(beside)) == str(beside)


def test_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("METALLO_GIT_HOSTS", f"{LAB}, gitlab.example.org")
    monkeypatch.setenv("METALLO_LOCAL_REPOSITORIES", "allow")
    monkeypatch.setenv("METALLO_STATE_DIRS", f"{tmp_path}/a{os.pathsep}{tmp_path}/b")
    policy = RepositoryPolicy.from_environment()
    assert policy.git_hosts == {"127.0.0.1:8443", "gitlab.example.org:443"}
    assert policy.allow_local
    assert _code(policy, f"{tmp_path}/b/x") == "repository-in-platform-state"
    monkeypatch.delenv("METALLO_LOCAL_REPOSITORIES")
    monkeypatch.delenv("METALLO_GIT_HOSTS")
    default = RepositoryPolicy.from_environment()
    assert not default.allow_local and not default.git_hosts
    assert _code(default, "https://gitlab.example.org/x.git") == "repository-host-not-allowed"
    monkeypatch.setenv("METALLO_GIT_HOSTS", "https://gitlab.example.org/path")
    with pytest.raises(ValueError):
        RepositoryPolicy.from_environment()
    monkeypatch.setenv("METALLO_GIT_HOSTS", "")
    monkeypatch.setenv("METALLO_LOCAL_REPOSITORIES", "yes")
    with pytest.raises(ValueError):
        RepositoryPolicy.from_environment()
