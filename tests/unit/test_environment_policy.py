"""Environment names a Site forbids are refused when actions.yaml is validated,
with the line (metallo.environment_policy; docs/actions.md, Environment)."""

from __future__ import annotations

import pytest

from metallo.environment_policy import EnvironmentPolicy
from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file

FILE = """\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py]
    runtime:
      environment:
        LD_PRELOAD: /tmp/evil.so
        GIT_SSH_COMMAND: sh -c evil
        METALLO_SITE_API_TOKEN: x
        PYTHONSTARTUP: /tmp/evil.py
        ld_library_path: /tmp
        OMP_NUM_THREADS: "4"
        PYTHONPATH: src
        GITHUB_USER: me
        MY_LD_FLAGS: -O2
"""


def _problems(text: str, policy: EnvironmentPolicy | None = None) -> dict[str, int]:
    with pytest.raises(ActionsFileError) as exc:
        parse_actions_file(text, source="actions.yaml", environment=policy)
    return {p.field.rsplit(".", 1)[-1]: p.line for p in exc.value.problems}


def test_the_default_forbidden_names_are_refused_with_their_line():
    got = _problems(FILE)
    assert got == {"LD_PRELOAD": 8, "GIT_SSH_COMMAND": 9, "METALLO_SITE_API_TOKEN": 10,
                   "PYTHONSTARTUP": 11, "ld_library_path": 12}
    with pytest.raises(ActionsFileError) as exc:
        parse_actions_file(FILE, source="actions.yaml")
    text = str(exc.value)
    assert "actions.yaml:8:" in text and "LD_PRELOAD is forbidden by the Site's environment " \
        "policy (LD_*" in text


def test_the_rest_pass_as_written():
    allowed = "\n".join(line for line in FILE.splitlines()
                        if not any(k in line for k in ("LD_PRELOAD", "GIT_SSH", "METALLO_",
                                                       "PYTHONSTARTUP", "ld_library")))
    train = parse_actions_file(allowed + "\n").action("train")
    assert train["runtime"]["environment"] == {
        "OMP_NUM_THREADS": "4", "PYTHONPATH": "src", "GITHUB_USER": "me", "MY_LD_FLAGS": "-O2"}


def test_an_operator_list_replaces_the_default_but_metallo_stays_forbidden(monkeypatch):
    monkeypatch.setenv("METALLO_FORBIDDEN_ENVIRONMENT", "PYTHONPATH, OMP_*")
    policy = EnvironmentPolicy.from_environment()
    assert set(_problems(FILE, policy)) == {"METALLO_SITE_API_TOKEN", "OMP_NUM_THREADS",
                                            "PYTHONPATH"}
    monkeypatch.setenv("METALLO_FORBIDDEN_ENVIRONMENT", "")
    assert EnvironmentPolicy.from_environment().forbidden == ("METALLO_*",)
    monkeypatch.delenv("METALLO_FORBIDDEN_ENVIRONMENT")
    assert EnvironmentPolicy.from_environment() == EnvironmentPolicy()
    for bad in ("LD_*X", "A B", "*", "1ABC"):
        with pytest.raises(ValueError):
            EnvironmentPolicy.of([bad])


def test_forbidding_names_the_entry():
    policy = EnvironmentPolicy()
    assert policy.forbidding("LD_AUDIT") == "LD_*"
    assert policy.forbidding("git_dir") == "GIT_*"
    assert policy.forbidding("PYTHONSTARTUP") == "PYTHONSTARTUP"
    assert policy.forbidding("PYTHONSTARTUPX") is None
    assert policy.forbidding("LDX") is None
