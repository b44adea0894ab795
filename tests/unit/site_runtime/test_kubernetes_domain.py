"""The kubernetes executor's pure rules: names, identity, material checks, manifests
(validated against the real OpenAPI schemas), status parsing and error classes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest

from site_runtime.adaptors.kubernetes import pod_stage
from site_runtime.domain.kubernetes_batch import parse_kubernetes_job
from site_runtime.domain.kubernetes_errors import classify, quota_exceeded
from site_runtime.domain.kubernetes_manifests import (
    compute_job,
    grant_secret,
    helper_pod,
    workspace_claim,
)
from site_runtime.domain.kubernetes_names import (
    MAX_NAME,
    Identity,
    is_dns_label,
    label_value,
    object_name,
)
from site_runtime.domain.kubernetes_observation import (
    HELPER_EXITS,
    StageEnd,
    observation,
    output_commit,
)
from site_runtime.domain.kubernetes_status import job_facts, pod_facts
from site_runtime.domain.local_batch import InvalidMaterial
from tests.unit.site_runtime.kubernetes_support import K8S_VERSIONS, SITE, fixture, payload

IDENTITY = Identity("lab-k8s", "run-1", "att-0001", 1, "ab" * 32)


@pytest.mark.parametrize(
    "attempt_id",
    ["att-0001", "A" * 128, "0c9e4f2e-2b6d-4a57-9d1c-1f3c0b9c6a11", "x.y_z", "----9"],
)
def test_object_names_are_bounded_dns_labels(attempt_id):
    names = [
        object_name(attempt_id, role) for role in ("workspace", "stage-in", "compute", "stage-out")
    ]
    assert all(is_dns_label(n) and len(n) <= MAX_NAME for n in names)
    assert len(set(names)) == 4
    assert names == [
        object_name(attempt_id, r) for r in ("workspace", "stage-in", "compute", "stage-out")
    ]


def test_names_differ_past_the_readable_prefix():
    a, b = "a" * 60 + "1", "a" * 60 + "2"
    assert object_name(a, "compute") != object_name(b, "compute")


@pytest.mark.parametrize(
    "raw", ["run-1", "UPPER_case.ok", "has space/and:colon", "-lead", "x" * 80, ""]
)
def test_label_values_are_valid(raw):
    value = label_value(raw)
    assert len(value) <= 63
    assert (
        kubernetes_validate.validate(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "x", "labels": {"k": value}},
            },
            K8S_VERSIONS[0],
            strict=True,
        )
        is not None
    )


def test_identity_decides_ownership():
    obj = {"metadata": {"annotations": IDENTITY.annotations()}}
    assert IDENTITY.owns(obj)
    other = dataclasses.replace(IDENTITY, material_digest="cd" * 32)
    assert not other.owns(obj)
    assert not IDENTITY.owns({"metadata": {}})


@pytest.mark.parametrize(
    "changes, site_changes, code",
    [
        (
            {"resources": {"gpus": 1, "gpuClass": "h100", "wallTimeSeconds": 60}},
            {},
            "unsupported-kubernetes-accelerator-class",
        ),
        ({"resources": {"wallTimeSeconds": 90000}}, {}, "kubernetes-wall-time-above-limit"),
        (
            {"inputs": [{"name": "d", "url": "https://x/d.git", "path": "d", "commit": "a" * 40}]},
            {},
            "unsupported-kubernetes-inputs",
        ),
        ({"resources": {"cpus": 0}}, {}, "invalid-material"),
        ({"command": "python x.py"}, {}, "invalid-material"),
        ({}, {"run_as": {}}, "kubernetes-member-unmapped"),
        ({}, {"run_as": {"alice": (0, 0)}}, "kubernetes-member-unmapped"),
        ({}, {"namespace_template": "Bad_{project}"}, "invalid-material"),
    ],
)
def test_material_is_checked_before_any_create(changes, site_changes, code):
    with pytest.raises(InvalidMaterial) as refused:
        parse_kubernetes_job(payload(**changes), dataclasses.replace(SITE, **site_changes))
    assert refused.value.code == code


def test_material_resolves_member_namespace_and_gpu():
    kjob = parse_kubernetes_job(
        payload(resources={"gpus": 2, "gpuClass": "a100", "cpus": 4, "memoryMiB": 2048}), SITE
    )
    assert (kjob.member.user, kjob.member.namespace, kjob.member.uid) == (
        "alice",
        "metallo-demo",
        1001,
    )
    assert kjob.gpus == 2 and kjob.gpu is not None and kjob.gpu.resource == "nvidia.com/gpu"


def _manifests(kjob):
    ns = kjob.member.namespace
    return {
        "pvc": workspace_claim(SITE, IDENTITY, ns),
        "secret": grant_secret(IDENTITY, ns, "stage-in", "grant-user", "s3cr3t-token"),
        "stage-in": helper_pod(SITE, kjob, IDENTITY, "stage-in", with_grant=True),
        "stage-out": helper_pod(SITE, kjob, IDENTITY, "stage-out", with_grant=True),
        "stage-in-file": helper_pod(SITE, kjob, IDENTITY, "stage-in", with_grant=False),
        "job": compute_job(SITE, kjob, IDENTITY),
    }


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"resources": {"gpus": 1, "gpuClass": "a100", "wallTimeSeconds": 60}},
        {"preCommands": [], "command": {"shell": "echo $HOME | tee out.txt"}},
        {"runtime": {"environment": {}, "workingDirectory": "sub/dir"}},
    ],
)
def test_every_rendered_manifest_is_valid_kubernetes(version, spec):
    kjob = parse_kubernetes_job(payload(**spec), SITE)
    for name, manifest in _manifests(kjob).items():
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:  # pragma: no cover - the failure
            pytest.fail(
                f"{name} is not valid Kubernetes {version}: {error.message} at {list(error.path)}"
            )


def test_job_runs_exact_argv_once_within_wall_time():
    kjob = parse_kubernetes_job(payload(), SITE)
    job = compute_job(SITE, kjob, IDENTITY)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 1800
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    compute = pod["containers"][0]
    # "$" is doubled: Kubernetes expands $(VAR) in command and turns $$ back into $.
    assert compute["command"] == ["python", "evaluate.py", "--name", "my run", "$$HOME", "*"]
    assert "args" not in compute and compute["image"] == "metallo/job:1"
    assert pod["initContainers"][0]["command"] == ["/bin/sh", "-c", "echo prepared > prepared.txt"]
    assert compute["resources"] == {
        "requests": {"cpu": "2", "memory": "4096Mi"},
        "limits": {"cpu": "2", "memory": "4096Mi"},
    }
    assert pod["securityContext"] == {
        "runAsUser": 1001,
        "runAsGroup": 1001,
        "fsGroup": 1001,
        "runAsNonRoot": True,
    }
    assert compute["workingDir"] == "/workspace/repo"
    assert job["metadata"]["annotations"]["metallo.dev/material-digest"] == "ab" * 32
    assert spec["template"]["metadata"]["labels"]["metallo.dev/stage"] == "compute"


def test_gpu_class_maps_to_resource_and_node_selector():
    kjob = parse_kubernetes_job(payload(resources={"gpus": 2, "gpuClass": "a100"}), SITE)
    pod = compute_job(SITE, kjob, IDENTITY)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["nodeSelector"] == {"metallo.dev/gpu-class": "a100"}


def test_grant_reaches_the_helper_only_through_its_secret():
    kjob = parse_kubernetes_job(payload(), SITE)
    pod = helper_pod(SITE, kjob, IDENTITY, "stage-in", with_grant=True)
    text = json.dumps(pod)
    assert "s3cr3t" not in text
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["METALLO_GIT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == object_name(
        "att-0001", "stage-in"
    )
    assert "value" not in env["METALLO_GIT_TOKEN"]
    spec = json.loads(env["METALLO_STAGE_SPEC"]["value"])
    assert spec["repository"]["commit"] == "c" * 40 and spec["stage"] == "stage-in"
    assert pod["spec"]["containers"][0]["command"][-1] == "stage-in"
    assert pod["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("case", fixture("pods.json")["cases"], ids=lambda c: c["name"])
def test_pod_status_parsing(case):
    state = dataclasses.asdict(pod_facts(case["pod"]))
    assert {k: state[k] for k in case["expect"]} == case["expect"]


@pytest.mark.parametrize("case", fixture("jobs.json")["cases"], ids=lambda c: c["name"])
def test_job_status_parsing(case):
    state = dataclasses.asdict(job_facts(case["job"], case["pods"]))
    assert {k: state[k] for k in case["expect"]} == case["expect"]


@pytest.mark.parametrize("case", fixture("errors.json")["cases"], ids=lambda c: c["name"])
def test_definite_and_uncertain_answers(case):
    verdict = classify(case["status"], case["body"], case["operation"])
    expect = dict(case["expect"])
    assert quota_exceeded(case["body"]) is expect.pop("quota", False)
    assert {k: getattr(verdict, k) for k in expect} == expect


def test_helper_exit_statuses_agree_with_the_domain():
    assert pod_stage.EXITS == {code: status for status, code in HELPER_EXITS.items()}


def test_output_commit_from_the_result_line():
    line = 'metallo-stage-result {"output_commit": "' + "d" * 40 + '", "stage": "stage-out"}'
    assert output_commit("pushed\n" + line + "\n") == "d" * 40
    assert output_commit('metallo-stage-result {"output_commit": "$(rm -rf)"}') is None
    assert output_commit("nothing") is None


def test_observation_phases_and_failure_record():
    ends = [
        StageEnd("stage-in", "mt-in", 0, None, None),
        StageEnd("compute", "mt-run", 3, None, "compute-failed"),
    ]
    failed = observation("failed", ends=ends, current=None, output=None, observed_at="t")
    assert failed["phase"] == "failed" and failed["exit_code"] == 3
    assert failed["failure"] == {
        "stage": "compute",
        "scheduler_state": "FAILED",
        "job_id": "mt-run",
        "exit_code": 3,
        "signal": None,
        "code": "compute-failed",
    }
    pending = job_facts(
        fixture("jobs.json")["cases"][0]["job"], [fixture("pods.json")["cases"][0]["pod"]]
    )
    queued = observation("compute", ends=ends[:1], current=pending, output=None, observed_at="t")
    assert queued["phase"] == "queued" and queued["native_wait"] == "kubernetes-unschedulable"
    done = observation(
        "succeeded",
        ends=[StageEnd("compute", "j", 0, None, None)],
        current=None,
        output="e" * 40,
        observed_at="t",
    )
    assert done["output_commit"] == "e" * 40 and done["exit_code"] == 0


LAB_FIXTURES = Path(__file__).resolve().parents[2] / "k8s" / "fixtures"
#: What the executor reads from each of the lab's recorded objects (tests/k8s/fixtures,
#: shapes the lab serves, with their Kubernetes API reference source).
LAB_EXPECTED = {
    "pod-unschedulable.json": ("pod", {"state": "pending", "wait_code": "kubernetes-unschedulable"}),
    "pod-image-pull-backoff.json": ("pod", {"state": "pending", "wait_code": "kubernetes-image-pull"}),
    "pod-create-container-config-error.json": (
        "pod", {"state": "pending", "wait_code": "kubernetes-container-config"}),
    "pod-succeeded.json": ("pod", {"state": "succeeded", "exit_code": 0, "signal": None}),
    "pod-signal-killed.json": ("pod", {"state": "failed", "exit_code": 137, "signal": 9}),
    "job-complete.json": ("job", {"state": "succeeded"}),
    "job-failed-backoff-limit.json": ("job", {"state": "failed", "code": None}),
    "job-failed-deadline.json": ("job", {"state": "failed", "code": "wall-time-exceeded"}),
    "status-forbidden-rbac.json": ("status", ("definite", "native-request-denied", False)),
    "status-forbidden-impersonation.json": ("status", ("definite", "native-request-denied", False)),
    "status-forbidden-quota.json": ("status", ("definite", "native-request-denied", True)),
    "status-invalid.json": ("status", ("definite", "native-request-invalid", False)),
    "status-already-exists.json": ("status", ("exists", None, False)),
    "status-not-found.json": ("status", ("absent", None, False)),
}


@pytest.mark.parametrize("name", sorted(LAB_EXPECTED))
def test_the_labs_recorded_objects_read_as_expected(name):
    kind, expect = LAB_EXPECTED[name]
    obj = json.loads((LAB_FIXTURES / name).read_text())["object"]
    if kind == "status":
        verdict = classify(obj["code"], obj, "create")
        assert (verdict.kind, verdict.code, quota_exceeded(obj)) == expect
        return
    state = dataclasses.asdict(pod_facts(obj) if kind == "pod" else job_facts(obj, []))
    assert {k: state[k] for k in expect} == expect


def test_the_labs_update_conflict_is_uncertain():
    obj = json.loads((LAB_FIXTURES / "status-conflict.json").read_text())["object"]
    verdict = classify(obj["code"], obj, "update")
    assert (verdict.kind, verdict.code) == ("uncertain", "kubernetes-unavailable")
