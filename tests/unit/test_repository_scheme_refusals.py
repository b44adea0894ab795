"""A repository URL with a transport other than ``https://`` (or ``file://`` where
enabled) is refused as ``repository-scheme-not-allowed`` with a message naming the
transport, at every entry point that takes one (docs/actions.md, "Repositories Metallo
can read"): the policy, the CLI's REPO argument (``action run``, ``pipeline run``,
``repo branches``, ``dev clone``) and an action's ``inputs[].url``."""

from __future__ import annotations

import json

import pytest

from metallo.repository_policy import RepositoryPolicy, RepositoryRefused, scheme_refusal
from tests.unit.cli_support import cli_environment, run_cli  # noqa: F401 - autouse fixture
from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file

CODE = "repository-scheme-not-allowed"
REFUSED = ("http://127.0.0.1:8443/git/demo.git", "ssh://git@127.0.0.1/demo.git",
           "git://127.0.0.1/demo.git", "git@127.0.0.1:demo.git")


@pytest.mark.parametrize("url", REFUSED)
def test_the_policy_names_the_refused_transport(url):
    with pytest.raises(RepositoryRefused) as refused:
        RepositoryPolicy.of(["127.0.0.1:8443"], allow_local=True).check(url)
    assert refused.value.code == CODE
    assert "is not allowed" in refused.value.message and "https://" in refused.value.message


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443/git/demo.git", "file:///srv/demo.git",
                                 "/srv/demo.git", "var/myrepo", "./demo"])
def test_https_file_and_local_paths_are_not_judged_by_scheme(url):
    assert scheme_refusal(url) is None


@pytest.mark.parametrize("args", [("action", "run", "{url}", "train"),
                                  ("pipeline", "run", "{url}"),
                                  ("repo", "branches", "{url}"),
                                  ("dev", "clone", "{url}")])
def test_every_cli_entry_point_gives_the_documented_code(args):
    url = "http://127.0.0.1:8443/git/demo.git"
    done = run_cli(*(a.format(url=url) for a in args), "--output", "json")
    assert done.code == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == CODE
    assert error["message"].startswith(f"{url}: http:// is not allowed")
    assert "https://" in error["hint"]


ACTIONS = """version: 1
actions:
  train:
    type: k8s-job
    command: [python, train.py]
    inputs:
      - name: data
        url: http://127.0.0.1:8443/git/data.git
        branch: main
"""


@pytest.mark.parametrize("policy", [RepositoryPolicy.of(["127.0.0.1:8443"]), None])
def test_an_input_repository_says_the_code_once_at_its_line(policy):
    with pytest.raises(ActionsFileError) as refused:
        parse_actions_file(ACTIONS, repositories=policy)
    problems = [str(p) for p in refused.value.problems]
    assert len(problems) == 1, problems
    assert problems[0].startswith("actions.yaml:8:14: actions.train.inputs[0].url: "
                                  "http:// is not allowed")
    assert problems[0].endswith(f"({CODE})")
