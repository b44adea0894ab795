"""RBAC, impersonation, ResourceQuota and the Pod security rule of the lab.

Members and roles come from examples/governance.yaml: alice holds runs.launch,
runs.read and runs.cancel in the demo Project (namespace metallo-demo), bob only
runs.read. Every refusal must be a 403 Forbidden Status and change nothing.
"""

from __future__ import annotations

import pwd

import pytest

from tests.k8s.lab_clients import NAMESPACE, as_member, job_manifest, raw, unique, wait_for

pytestmark = pytest.mark.k8s

JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def forbidden(r) -> str:
    body = r.json()
    assert (r.status_code, body["kind"], body["status"], body["reason"], body["code"]) == \
        (403, "Status", "Failure", "Forbidden", 403), r.text
    return body["message"]


async def absent(path: str) -> bool:
    async with raw() as admin:
        return (await admin.get(path)).status_code == 404


async def test_impersonating_a_user_the_runtime_may_not_is_refused(k8s_lab):
    name = unique("mallory")
    async with raw("kubeconfig", impersonate="mallory") as http:
        msg = forbidden(await http.post(JOBS, json=job_manifest(name, ["true"])))
    assert msg == ('users "mallory" is forbidden: User "system:serviceaccount:metallo-system:site-runtime" '
                   'cannot impersonate resource "users" in API group "" at the cluster scope')
    assert await absent(f"{JOBS}/{name}")
    async with raw("kubeconfig", impersonate="alice", groups=("system:masters",)) as http:
        msg = forbidden(await http.get(JOBS))
    assert 'groups "system:masters" is forbidden' in msg
    async with raw("kubeconfig", impersonate="alice") as http:
        r = await http.get(JOBS, headers={"Impersonate-Uid": "0"})
        assert 'cannot impersonate resource "uids"' in forbidden(r)


async def test_the_runtime_creates_nothing_as_itself(k8s_lab):
    name = unique("asself")
    async with raw("kubeconfig") as http:
        msg = forbidden(await http.post(JOBS, json=job_manifest(name, ["true"])))
        assert (await http.get(JOBS)).status_code == 200  # reading across namespaces is its own right
    assert msg == ('jobs.batch is forbidden: User "system:serviceaccount:metallo-system:site-runtime" cannot create '
                   'resource "jobs" in API group "batch" in the namespace "metallo-demo"')
    assert await absent(f"{JOBS}/{name}")


async def test_a_member_without_runs_launch_cannot_create(k8s_lab):
    name = unique("bob")
    async with as_member("bob") as http:
        msg = forbidden(await http.post(JOBS, json=job_manifest(name, ["true"])))
        assert msg == ('jobs.batch is forbidden: User "bob" cannot create resource "jobs" in API group "batch" '
                       'in the namespace "metallo-demo"')
        assert (await http.get(JOBS)).status_code == 200  # runs.read still reads
        forbidden(await http.get(f"/api/v1/namespaces/{NAMESPACE}/secrets"))
    assert await absent(f"{JOBS}/{name}")


async def test_a_member_has_no_rights_outside_their_projects_namespace(k8s_lab):
    other = unique("other-ns")
    async with raw() as admin:
        assert (await admin.post("/api/v1/namespaces", json={"metadata": {"name": other}})).status_code == 201
    try:
        async with as_member("alice") as http:
            msg = forbidden(await http.post(f"/apis/batch/v1/namespaces/{other}/jobs",
                                            json=job_manifest(unique("x"), ["true"])))
        assert f'in the namespace "{other}"' in msg
    finally:
        async with raw() as admin:
            await admin.delete(f"/api/v1/namespaces/{other}")


async def test_quota_exceeded_is_a_definite_refusal(k8s_lab):
    ns = unique("quota-ns")
    alice_uid = pwd.getpwnam("alice").pw_uid
    pod = {"metadata": {"name": "p"}, "spec": {
        "restartPolicy": "Never", "securityContext": {"runAsUser": alice_uid},
        "containers": [{"name": "main", "image": "metallo/platform:1", "command": ["sleep", "30"],
                        "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}
    async with raw() as admin:
        await admin.post("/api/v1/namespaces", json={"metadata": {"name": ns}})
        try:
            r = await admin.post(f"/api/v1/namespaces/{ns}/resourcequotas", json={
                "metadata": {"name": "small"}, "spec": {"hard": {"pods": "1", "requests.cpu": "1500m"}}})
            assert r.status_code == 201
            assert (await admin.post(f"/api/v1/namespaces/{ns}/pods", json=pod)).status_code == 201
            second = {**pod, "metadata": {"name": "q"}}
            msg = forbidden(await admin.post(f"/api/v1/namespaces/{ns}/pods", json=second))
            assert msg == ('pods "q" is forbidden: exceeded quota: small, requested: pods=1,requests.cpu=1, '
                           'used: pods=1,requests.cpu=1, limited: pods=1,requests.cpu=1500m')
            assert (await admin.get(f"/api/v1/namespaces/{ns}/pods/q")).status_code == 404
            unrequested = {**pod, "metadata": {"name": "r"}}
            unrequested["spec"] = {**pod["spec"], "containers": [{**pod["spec"]["containers"][0], "resources": {}}]}
            assert "must specify requests.cpu" in forbidden(await admin.post(f"/api/v1/namespaces/{ns}/pods",
                                                                             json=unrequested))

            async def used():
                q = (await admin.get(f"/api/v1/namespaces/{ns}/resourcequotas/small")).json()
                return (q.get("status") or {}).get("used") == {"pods": "1", "requests.cpu": "1"}
            await wait_for(used)
        finally:
            await admin.delete(f"/api/v1/namespaces/{ns}")


async def test_a_job_pod_beyond_quota_is_retried_and_reported_as_an_event(k8s_lab):
    name = unique("bigjob")
    async with as_member("alice") as http:
        manifest = job_manifest(name, ["true"], container={"resources": {"requests": {"cpu": "64", "memory": "1Mi"}}})
        assert (await http.post(JOBS, json=manifest)).status_code == 201
        job = (await http.get(f"{JOBS}/{name}")).json()

        async def refused():
            events = (await http.get(f"/api/v1/namespaces/{NAMESPACE}/events",
                                     params={"fieldSelector": f"involvedObject.uid={job['metadata']['uid']}"})).json()
            return [e for e in events["items"] if e["reason"] == "FailedCreate"]
        [event] = await wait_for(refused)
        assert event["type"] == "Warning" and "exceeded quota: metallo-quota" in event["message"]
        await http.request("DELETE", f"{JOBS}/{name}", json={"propagationPolicy": "Background"})


async def test_pods_run_only_as_the_creating_member(k8s_lab):
    bob_uid = pwd.getpwnam("bob").pw_uid
    async with as_member("alice") as http:
        for run_as, why in ((bob_uid, f"runAsUser={bob_uid}"), (0, "runAsUser=0")):
            manifest = job_manifest(unique("who"), ["true"])
            manifest["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": run_as}
            pod = {"metadata": {"name": unique("pod")}, "spec": manifest["spec"]["template"]["spec"]}
            msg = forbidden(await http.post(PODS, json=pod))
            assert 'violates PodSecurity "restricted:latest"' in msg and why in msg
        priv = job_manifest(unique("priv"), ["true"], container={"securityContext": {"privileged": True}})
        msg = forbidden(await http.post(PODS, json={"metadata": {"name": unique("priv")},
                                                   "spec": priv["spec"]["template"]["spec"]}))
        assert "privileged" in msg
        host = {"metadata": {"name": unique("host")}, "spec": {
            **job_manifest("h", ["true"])["spec"]["template"]["spec"],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
        assert "hostPath" in forbidden(await http.post(PODS, json=host))



async def test_self_subject_access_review_answers_for_the_impersonated_member(k8s_lab):
    url = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

    def review(verb: str, resource: str, group: str = "batch") -> dict:
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {
            "resourceAttributes": {"namespace": NAMESPACE, "verb": verb, "group": group, "resource": resource}}}
    async with as_member("alice") as http:
        r = await http.post(url, json=review("create", "jobs"))
        assert r.status_code == 201 and r.json()["status"]["allowed"] is True
    async with as_member("bob") as http:
        assert (await http.post(url, json=review("create", "jobs"))).json()["status"]["allowed"] is False
        assert (await http.post(url, json=review("list", "jobs"))).json()["status"]["allowed"] is True
