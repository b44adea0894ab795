"""Governance file: sample, queries, re-reading on change, refusal with every error and line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from metallo.governance import GovernanceError, GovernanceFile, parse_governance

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "examples" / "governance.yaml"


def test_sample_file_answers_the_documented_questions():
    g = GovernanceFile(SAMPLE).current()
    demo = g.project("demo")
    assert demo is not None
    assert demo.members == ("m-alice", "m-bob")
    assert demo.sites == ("lab-slurm", "lab-k8s")
    for cap in ("runs.launch", "runs.read", "runs.cancel", "pipelines.start", "pipelines.read",
                "pipelines.stop", "workloads.prepare", "workloads.read"):
        assert g.has_capability("demo", "m-alice", cap)
    assert g.has_capability("demo", "m-bob", "runs.read")
    assert g.has_capability("demo", "m-bob", "pipelines.read")
    assert not g.has_capability("demo", "m-bob", "runs.launch")
    assert not g.has_capability("demo", "m-nobody", "runs.read")
    assert not g.has_capability("other", "m-alice", "runs.read")
    b = g.binding("m-alice", "lab-slurm")
    assert (b.site_username, b.account) == ("alice", "demo")
    assert g.binding("m-bob", "lab-slurm").site_username == "bob"
    assert g.binding("m-alice", "nowhere") is None
    slurm = g.site("lab-slurm")
    assert (slurm.environment, slurm.ready, slurm.max_wall_seconds) == ("slurm", True, 86400)
    assert dict(slurm.gpu_classes) == {}
    assert g.site("lab-k8s").environment == "k8s"
    assert [s.id for s in g.sites_for("demo")] == ["lab-slurm", "lab-k8s"]
    assert g.sites_for("missing") == []
    assert g.member("m-alice").name == "Alice"
    assert g.project("missing") is None and g.member("missing") is None and g.site("x") is None


VALID = """\
version: 1
sites:
  s1:
    environment: slurm
    ready: true
    gpu_classes:
      a100: "gpu:a100"
members:
  "007":
    bindings:
      s1: {site_username: "u0755", account: "2024"}
projects:
  p:
    sites: [s1]
    members:
      "007": [runs.read]
"""


def test_text_is_kept_as_written():
    g = parse_governance(VALID)
    assert g.binding("007", "s1") == type(g.binding("007", "s1"))(site_username="u0755", account="2024")
    assert g.site("s1").gpu_classes["a100"] == "gpu:a100"
    assert g.has_capability("p", "007", "runs.read")


def test_unquoted_digit_only_account_stays_text():
    g = parse_governance(VALID.replace('account: "2024"', "account: 2024"))
    assert g.binding("007", "s1").account == "2024"


BROKEN = """\
version: 1
sites:
  s1:
    environment: openstack
    ready: yes
    max_wall_seconds: -5
members:
  m-a:
    bindings:
      s9: {site_username: alice, account: demo}
    colour: blue
projects:
  p:
    sites: [s1, s2]
    members:
      m-a: [runs.launch, runs.fly]
      m-ghost: [runs.read]
"""


def test_every_error_is_reported_with_its_line():
    with pytest.raises(GovernanceError) as exc:
        parse_governance(BROKEN, source="gov.yaml")
    found = {(p.line, p.field) for p in exc.value.problems}
    # schema problems: environment (4), ready (5), max_wall_seconds (6), colour (11), runs.fly (16)
    assert (4, "sites.s1.environment") in found
    assert (5, "sites.s1.ready") in found
    assert (6, "sites.s1.max_wall_seconds") in found
    assert (11, "members.m-a.colour") in found
    assert (16, "projects.p.members.m-a[1]") in found
    # reference problems come in the same report
    assert (10, "members.m-a.bindings.s9") in found
    assert (14, "projects.p.sites[1]") in found
    assert (17, "projects.p.members.m-ghost") in found
    assert "gov.yaml:4:" in str(exc.value)


def test_reference_errors_are_reported_with_their_lines():
    text = BROKEN.replace("openstack", "slurm").replace("yes", "true").replace("-5", "5")
    text = text.replace("    colour: blue\n", "").replace("runs.fly", "runs.read")
    with pytest.raises(GovernanceError) as exc:
        parse_governance(text)
    found = {(p.line, p.field): p.message for p in exc.value.problems}
    assert "unknown Site 's9'" in found[(10, "members.m-a.bindings.s9")]
    assert "unknown Site 's2'" in found[(13, "projects.p.sites[1]")]
    assert "unknown member 'm-ghost'" in found[(16, "projects.p.members.m-ghost")]


def test_duplicate_keys_and_syntax_errors_are_refused():
    with pytest.raises(GovernanceError) as exc:
        parse_governance(VALID.replace("members:\n  \"007\":", "members:\n  \"007\": {}\n  \"007\":", 1))
    assert any("duplicate key" in p.message for p in exc.value.problems)
    with pytest.raises(GovernanceError) as exc:
        parse_governance("version: 1\nsites: [\n")
    assert exc.value.problems[0].line >= 2


def test_file_is_reread_when_it_changes_and_invalid_files_are_refused(tmp_path):
    path = tmp_path / "governance.yaml"
    path.write_text(VALID)
    gov = GovernanceFile(path)
    first = gov.current()
    assert gov.current() is first  # unchanged file: same snapshot, no re-parse
    assert not first.has_capability("p", "007", "runs.launch")

    path.write_text(VALID.replace("[runs.read]", "[runs.read, runs.launch]"))
    second = gov.current()
    assert second is not first
    assert second.has_capability("p", "007", "runs.launch")

    path.write_text(VALID.replace("environment: slurm", "environment: moon"))
    with pytest.raises(GovernanceError) as exc:
        gov.current()
    assert exc.value.problems[0].field == "sites.s1.environment"
    with pytest.raises(GovernanceError):
        gov.current()  # stays refused; the old snapshot is not served

    path.write_text(VALID)
    os.utime(path, ns=(1, 1))  # even an edit that rewinds mtime is seen (size/inode/mtime key)
    assert gov.current().has_capability("p", "007", "runs.read")


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(GovernanceError) as exc:
        GovernanceFile(tmp_path / "nope.yaml").current()
    assert "cannot read governance file" in str(exc.value)


def test_schema_is_valid_json_schema_and_accepts_the_sample():
    import json

    import jsonschema
    from ruamel.yaml import YAML

    schema = json.loads((ROOT / "contracts" / "governance.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(YAML(typ="safe").load(SAMPLE.read_text()))
