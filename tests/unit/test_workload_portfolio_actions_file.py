"""actions.yaml parsing: every action type, the coercion traps, all errors with lines, bounds."""

from __future__ import annotations

import json

import pytest

from workload_portfolio.application.actions_file import ActionsFileError, parse_actions_file
from workload_portfolio.domain.specification import canonical_json, normalise, spec_digest

SHA = "1234567890123456789012345678901234567890"  # a 40-hex commit made only of digits
REPO = "https://git.example.org/lab/models.git"

ALL_TYPES = f"""\
version: 1
actions:
  train:
    type: slurm-job
    description: Train on the cluster
    preCommands:
      - [python, -m, venv, .venv]
      - shell: ". .venv/bin/activate && pip install -r requirements.txt"
    command: {{argv: [python, train.py, --python-version, 3.10, --seed, 007]}}
    resources: {{cpus: 8, memoryMiB: 32768, gpus: 2, gpuClass: a100, wallTimeSeconds: 7200, nodes: 1}}
    runtime:
      environment:
        on: yes
        no: off
        PIN: {SHA}
        VERSION: 3.10
      workingDirectory: src
    inputs:
      - {{name: data, url: "https://git.example.org/lab/data.git", commit: {SHA}}}
      - {{name: tools, url: "file:///srv/git/tools.git", branch: main, path: vendor/tools}}
    retry: {{maxAttempts: 3, backoffSeconds: 60}}
  evaluate:
    type: k8s-job
    command: [python, eval.py]
  app:
    type: k8s-deployment
    command: {{shell: "exec python -m http.server 8080"}}
    service: {{port: 8080, replicas: 2, healthPath: /healthz}}
  serve:
    type: k8s-inferenceservice
    preCommands: [[git, lfs, pull]]
    model: {{name: llm, path: models/out, task: text-generation}}
    resources: {{gpus: 1, gpuClass: l4}}
    runtime: {{environment: {{HF_HUB_OFFLINE: "1"}}}}
"""


def test_every_action_type_parses_in_file_order():
    f = parse_actions_file(ALL_TYPES)
    assert f.names == ["train", "evaluate", "app", "serve"]
    assert f.version == 1


def test_author_text_is_never_coerced():
    train = parse_actions_file(ALL_TYPES).action("train")
    assert train["command"]["argv"] == ["python", "train.py", "--python-version", "3.10", "--seed", "007"]
    assert train["runtime"]["environment"] == {"on": "yes", "no": "off", "PIN": SHA, "VERSION": "3.10"}
    assert train["inputs"][0]["commit"] == SHA


def test_normalised_specifications():
    f = parse_actions_file(ALL_TYPES)
    train = normalise("train", f.action("train"), repository_url=REPO, commit=SHA)
    assert train == {
        "specVersion": 1,
        "action": "train",
        "actionType": "slurm-job",
        "environment": "slurm",
        "intent": {"family": "queued-batch"},
        "description": "Train on the cluster",
        "repository": {"url": REPO, "commit": SHA},
        "command": {"argv": ["python", "train.py", "--python-version", "3.10", "--seed", "007"]},
        "preCommands": [
            {"argv": ["python", "-m", "venv", ".venv"]},
            {"shell": ". .venv/bin/activate && pip install -r requirements.txt"},
        ],
        "resources": {"cpus": 8, "memoryMiB": 32768, "gpus": 2, "gpuClass": "a100",
                      "wallTimeSeconds": 7200, "nodes": 1},
        "runtime": {"environment": {"on": "yes", "no": "off", "PIN": SHA, "VERSION": "3.10"},
                    "workingDirectory": "src"},
        "inputs": [
            {"name": "data", "url": "https://git.example.org/lab/data.git", "commit": SHA, "path": "inputs/data"},
            {"name": "tools", "url": "file:///srv/git/tools.git", "branch": "main", "path": "vendor/tools"},
        ],
        "retry": {"maxAttempts": 3, "backoffSeconds": 60, "onLost": False},
    }
    evaluate = normalise("evaluate", f.action("evaluate"), repository_url=REPO, commit=SHA)
    assert evaluate["environment"] == "k8s" and evaluate["intent"] == {"family": "queued-batch"}
    assert evaluate["resources"] == {"cpus": 1, "memoryMiB": 1024, "gpus": 0, "wallTimeSeconds": 3600}
    assert evaluate["retry"] == {"maxAttempts": 1, "backoffSeconds": 0, "onLost": False}
    app = normalise("app", f.action("app"), repository_url=REPO, commit=SHA)
    assert app["intent"] == {"family": "reconciled-service", "serviceKind": "application"}
    assert app["service"] == {"port": 8080, "replicas": 2, "healthPath": "/healthz"}
    assert "retry" not in app and "wallTimeSeconds" not in app["resources"]
    serve = normalise("serve", f.action("serve"), repository_url=REPO, commit=SHA)
    assert serve["intent"] == {"family": "reconciled-service", "serviceKind": "huggingface-inference"}
    assert serve["model"] == {"name": "llm", "format": "huggingface", "args": [],
                              "source": {"path": "models/out"}, "task": "text-generation"}
    assert "command" not in serve
    assert serve["resources"] == {"cpus": 1, "memoryMiB": 1024, "gpus": 1, "gpuClass": "l4"}


def test_digest_is_sha256_of_canonical_json_and_tracks_the_commit():
    f = parse_actions_file(ALL_TYPES)
    spec = normalise("evaluate", f.action("evaluate"), repository_url=REPO, commit=SHA)
    text = canonical_json(spec)
    assert text == json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    import hashlib

    assert spec_digest(spec) == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    # list shorthand and {argv} are the same specification
    same = parse_actions_file(ALL_TYPES.replace("command: [python, eval.py]", "command: {argv: [python, eval.py]}"))
    assert spec_digest(normalise("evaluate", same.action("evaluate"), repository_url=REPO, commit=SHA)) == spec_digest(spec)
    other_commit = normalise("evaluate", f.action("evaluate"), repository_url=REPO, commit="f" * 40)
    assert spec_digest(other_commit) != spec_digest(spec)


BROKEN = """\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py]
    resources: {cpus: many, gpuClass: a100}
    runtime:
      environment: {METALLO_TOKEN: x, GOOD: ok}
      workingDirectory: ../etc
  serve:
    type: k8s-inferenceservice
    command: [python, serve.py]
    model: {name: llm}
  web:
    type: k8s-deployment
    retry: {maxAttempts: 2}
    resources: {wallTimeSeconds: 600, nodes: 2}
    command: x
    colour: blue
  web:
    type: k8s-job
  BadName:
    type: k8s-job
    command: [true]
  job:
    type: nomad-job
"""


def test_every_problem_is_reported_at_once_with_file_line_and_field():
    with pytest.raises(ActionsFileError) as exc:
        parse_actions_file(BROKEN, source="actions.yaml")
    got = {(p.line, p.field) for p in exc.value.problems}
    expected = {
        (6, "actions.train.resources.cpus"),           # not an integer
        (6, "actions.train.resources.gpuClass"),       # needs gpus >= 1
        (8, "actions.train.runtime.environment.METALLO_TOKEN"),  # reserved prefix
        (9, "actions.train.runtime.workingDirectory"),  # leaves the checkout
        (12, "actions.serve.command"),                 # not for inference services
        (13, "actions.serve.model"),                   # needs id or path
        (16, "actions.web.retry"),                     # services are not retried
        (17, "actions.web.resources.wallTimeSeconds"),
        (17, "actions.web.resources.nodes"),
        (18, "actions.web.command"),                   # a bare string is neither argv nor shell
        (19, "actions.web.colour"),                    # unknown field
        (20, "actions.web"),                           # duplicate action
        (22, "actions.BadName"),                       # name pattern
        (26, "actions.job.type"),                      # unknown type
    }
    assert expected <= got, sorted(expected - got)
    text = str(exc.value)
    assert "actions.yaml:20:3: actions.web: duplicate key 'web' (first at line 14)" in text
    assert "actions.yaml:6:" in text


def test_bool_where_text_is_wanted_keeps_the_text():
    f = parse_actions_file("version: 1\nactions:\n  a:\n    type: k8s-job\n    command: [true, on, 1e3, null]\n")
    assert f.action("a")["command"] == ["true", "on", "1e3", "null"]


def test_version_must_be_one_and_integer_fields_refuse_text():
    with pytest.raises(ActionsFileError) as exc:
        parse_actions_file("version: '1'\nactions:\n  a:\n    type: k8s-job\n    command: [x]\n"
                           "    resources: {cpus: '4', memoryMiB: 3.5}\n")
    fields = {p.field for p in exc.value.problems}
    assert {"version", "actions.a.resources.cpus", "actions.a.resources.memoryMiB"} <= fields


def test_size_limit_is_one_mebibyte():
    big = "version: 1\nactions:\n  a:\n    type: k8s-job\n    command: [x]\n    description: '" + "x" * (1024 * 1024) + "'\n"
    with pytest.raises(ActionsFileError, match="limit is 1048576 bytes"):
        parse_actions_file(big)


def test_at_most_two_hundred_actions():
    head = "version: 1\nactions:\n"
    body = "".join(f"  a{i}: {{type: k8s-job, command: [x]}}\n" for i in range(201))
    with pytest.raises(ActionsFileError, match="201 actions; at most 200"):
        parse_actions_file(head + body)
    ok = parse_actions_file(head + "".join(f"  a{i}: {{type: k8s-job, command: [x]}}\n" for i in range(200)))
    assert len(ok.actions) == 200


def test_alias_bomb_and_deep_nesting_are_refused():
    lines = ["version: 1", "x0: &x0 [a, a, a, a, a, a, a, a, a, a]"]
    for i in range(1, 8):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i-1}"] * 10) + "]")
    lines.append("actions: {a: {type: k8s-job, command: *x7}}")
    with pytest.raises(ActionsFileError, match="expands beyond"):
        parse_actions_file("\n".join(lines) + "\n")
    deep = "version: 1\nactions: {a: {type: k8s-job, command: " + "[" * 100 + "]" * 100 + "}}\n"
    with pytest.raises(ActionsFileError, match="nesting deeper"):
        parse_actions_file(deep)


def test_anchors_and_merge_keys_are_usable():
    text = """\
version: 1
actions:
  a: &base
    type: slurm-job
    command: [python, a.py]
    resources: {cpus: 2}
  b:
    <<: *base
    command: [python, b.py]
"""
    f = parse_actions_file(text)
    assert f.action("b") == {"type": "slurm-job", "command": ["python", "b.py"], "resources": {"cpus": 2}}


def test_yaml_syntax_error_names_its_line():
    with pytest.raises(ActionsFileError) as exc:
        parse_actions_file("version: 1\nactions:\n  a: {type: k8s-job\n  b: [\n")
    assert exc.value.problems[0].line >= 3
    assert "invalid YAML" in exc.value.problems[0].message


def test_input_repositories_follow_the_sites_repository_policy():
    """An input naming a host off the Git host list (a metadata address here) is refused
    at its line, so no service or Runtime is ever asked to fetch from it."""
    from metallo.repository_policy import RepositoryPolicy

    policy = RepositoryPolicy.of(["git.example.org"])
    text = f"""\
version: 1
actions:
  train:
    type: slurm-job
    command: [python, train.py]
    inputs:
      - {{name: ok, url: "https://git.example.org/lab/data.git", commit: {SHA}}}
      - {{name: meta, url: "https://169.254.169.254/latest", commit: {SHA}}}
"""
    assert parse_actions_file(text)  # no policy given: not checked here
    with pytest.raises(ActionsFileError) as refused:
        parse_actions_file(text, repositories=policy)
    problems = str(refused.value)
    assert "repository-host-not-allowed" in problems and "inputs" in problems
    assert ":8:" in problems or "line 8" in problems
    assert "git.example.org/lab/data.git" not in problems
