"""The lab produces the status shapes kept in tests/k8s/fixtures/ (from the Kubernetes
API reference, each file names its source).

Every key of a fixture's ``object`` must be in what the lab answers, with the same
JSON type (``null`` admits a string); the paths under ``fixed`` must have the
fixture's values and those under ``absent`` must be missing. Lists of conditions
are matched by ``type``, other lists by position. The executor's parsing tests use
the same files.
"""

from __future__ import annotations

import json
import pwd
import re
from pathlib import Path

import pytest

from tests.k8s.lab_clients import IMAGE, NAMESPACE, as_member, job_manifest, raw, unique, wait_for

pytestmark = pytest.mark.k8s

FIXTURES = Path(__file__).parent / "fixtures"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"


def _type(v) -> str:
    return "null" if v is None else "bool" if isinstance(v, bool) else type(v).__name__


def shape_problems(want, got, path: str = "") -> list[str]:
    """Where ``got`` lacks a key of ``want`` or has another JSON type."""
    if want is None:
        return [] if got is None or isinstance(got, str) else [f"{path}: {_type(got)} instead of null"]
    if _type(want) != _type(got):
        return [f"{path}: {_type(got)} instead of {_type(want)}"]
    out: list[str] = []
    if isinstance(want, dict):
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: missing")
            else:
                out += shape_problems(v, got[k], f"{path}.{k}")
    elif isinstance(want, list):
        by_type = all(isinstance(x, dict) and "type" in x for x in want + got)
        for i, item in enumerate(want):
            if by_type:
                match = [g for g in got if g["type"] == item["type"]]
                out += shape_problems(item, match[0], f"{path}[type={item['type']}]") if match \
                    else [f"{path}[type={item['type']}]: missing"]
            elif i < len(got):
                out += shape_problems(item, got[i], f"{path}[{i}]")
            else:
                out.append(f"{path}[{i}]: missing")
    return out


def lookup(obj, path: str):
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if part.startswith("["):
            obj = obj[int(part[1:-1])]
        else:
            obj = obj[part]
    return obj


def check(fixture_name: str, got: dict) -> None:
    fixture = json.loads((FIXTURES / fixture_name).read_text())
    assert fixture["source"].startswith("https://kubernetes.io/docs/reference/kubernetes-api/")
    want = fixture["object"]
    assert shape_problems(want, got) == []
    for path in fixture.get("fixed", []):
        assert lookup(got, path) == lookup(want, path), path
    for path in fixture.get("absent", []):
        with pytest.raises(KeyError):
            lookup(got, path)


def pod(name: str, argv: list[str], **container) -> dict:
    c = {"name": "main", "image": IMAGE, "command": argv, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
         **container}
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [c]}}


async def _pod_when(http, name: str, ready) -> dict:
    async def probe():
        p = (await http.get(f"{PODS}/{name}")).json()
        return p if ready(p) else None
    return await wait_for(probe, timeout=30)


def _ended(p) -> bool:
    return p["status"]["phase"] in ("Succeeded", "Failed")


def _waiting(reason):
    return lambda p: any(s["state"].get("waiting", {}).get("reason") == reason
                         for s in p["status"].get("containerStatuses") or [])


def _unscheduled(p) -> bool:
    return any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions") or [])


POD_CASES = {
    "pod-succeeded.json": (["true"], {}, _ended),
    "pod-failed-exit-code.json": (["sh", "-c", "exit 3"], {}, _ended),
    "pod-signal-killed.json": (["sh", "-c", "kill -KILL $$$$"], {}, _ended),
    "pod-unschedulable.json": (["true"], {"resources": {"requests": {"cpu": "9", "memory": "64Mi"}}}, _unscheduled),
    "pod-image-pull-backoff.json": (["true"], {"image": "registry.example.com/nope:1"}, _waiting("ImagePullBackOff")),
    "pod-create-container-config-error.json": (
        ["true"], {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "absent-grant", "key": "t"}}}]},
        _waiting("CreateContainerConfigError")),
}


@pytest.mark.parametrize("fixture_name", sorted(POD_CASES))
async def test_pod_status_shapes(k8s_lab, fixture_name):
    argv, container, ready = POD_CASES[fixture_name]
    name = unique("shape")
    async with as_member("alice") as http:
        assert (await http.post(PODS, json=pod(name, argv, **container))).status_code == 201
        check(fixture_name, await _pod_when(http, name, ready))
    async with raw() as admin:
        await admin.delete(f"{PODS}/{name}", params={"gracePeriodSeconds": "0"})


JOB_CASES = {
    "job-complete.json": (["true"], {}),
    "job-failed-backoff-limit.json": (["false"], {}),
    "job-failed-deadline.json": (["sleep", "30"], {"activeDeadlineSeconds": 1}),
}


@pytest.mark.parametrize("fixture_name", sorted(JOB_CASES))
async def test_job_status_shapes(k8s_lab, fixture_name):
    argv, job_spec = JOB_CASES[fixture_name]
    name = unique("shapejob")
    async with as_member("alice") as http:
        await http.post(JOBS, json=job_manifest(name, argv, job_spec=job_spec))

        async def final():
            job = (await http.get(f"{JOBS}/{name}")).json()
            kinds = [c["type"] for c in job["status"].get("conditions") or []]
            return job if {"Complete", "Failed"} & set(kinds) else None
        check(fixture_name, await wait_for(final, timeout=60))
        await http.request("DELETE", f"{JOBS}/{name}", json={"propagationPolicy": "Background"})


async def test_status_body_shapes(k8s_lab):
    name = unique("shapecm")
    cm = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
    async with raw() as admin:
        await admin.post(cm, json={"metadata": {"name": name}})
        stale = (await admin.get(f"{cm}/{name}")).json()
        await admin.patch(f"{cm}/{name}", json={"data": {"a": "b"}},
                          headers={"Content-Type": "application/merge-patch+json"})
        check("status-conflict.json", (await admin.put(f"{cm}/{name}", json=stale)).json())
    async with as_member("alice") as http:
        job = job_manifest(unique("shapedup"), ["true"])
        await http.post(JOBS, json=job)
        check("status-already-exists.json", (await http.post(JOBS, json=job)).json())
        check("status-not-found.json", (await http.get(f"{JOBS}/{unique('absent')}")).json())
        check("status-invalid.json", (await http.post(JOBS, json=job_manifest("Bad_Name", ["true"]))).json())
        big = {"metadata": {"name": unique("huge")}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                              "resources": {"requests": {"storage": "1Ti"}}}}
        check("status-forbidden-quota.json",
              (await http.post(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", json=big)).json())
        await http.request("DELETE", f"{JOBS}/{job['metadata']['name']}", json={"propagationPolicy": "Background"})
    async with as_member("bob") as http:
        check("status-forbidden-rbac.json", (await http.post(JOBS, json=job_manifest(unique("b"), ["true"]))).json())
    async with raw("kubeconfig", impersonate="mallory") as http:
        check("status-forbidden-impersonation.json", (await http.get(JOBS)).json())
    assert pwd.getpwnam("alice")  # the member users exist (scripts/k8s-lab up makes them)
