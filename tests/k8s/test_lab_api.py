"""The lab's API semantics through the real client (lightkube) and raw HTTPS.

Each test checks one behaviour the lab adds to a plain object store: uids and one
cluster-wide resourceVersion, 409s, selectors, the status subresource, server-side
apply, watch from a resourceVersion, delete preconditions and propagation,
finalizers, Status bodies and TLS.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid

import httpx2
import pytest
from lightkube import ApiError
from lightkube.models.core_v1 import PersistentVolumeClaimSpec, VolumeResourceRequirements
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, PersistentVolumeClaim, Secret

from tests.k8s.lab_clients import NAMESPACE, STATE, raw, unique

pytestmark = pytest.mark.k8s


def _cm(name: str, labels: dict | None = None, data: dict | None = None) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, labels=labels), data=data or {"k": "v"})


async def test_uid_and_one_increasing_resource_version_across_types(kadmin):
    a = await kadmin.create(_cm(unique("rv-a")))
    s = await kadmin.create(Secret(metadata=ObjectMeta(name=unique("rv-s")), stringData={"x": "y"}))
    b = await kadmin.create(_cm(unique("rv-b")))
    rvs = [int(o.metadata.resourceVersion) for o in (a, s, b)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3
    assert len({a.metadata.uid, s.metadata.uid, b.metadata.uid}) == 3
    assert str(uuid.UUID(a.metadata.uid)) == a.metadata.uid
    changed = await kadmin.patch(ConfigMap, a.metadata.name, {"data": {"k": "w"}})
    assert int(changed.metadata.resourceVersion) > rvs[-1]
    assert changed.metadata.uid == a.metadata.uid
    assert s.data == {"x": "eQ=="} and not s.stringData  # stringData folded into base64 data


async def test_create_of_an_existing_name_is_409_already_exists(kadmin):
    name = unique("dup")
    await kadmin.create(_cm(name))
    with pytest.raises(ApiError) as e:
        await kadmin.create(_cm(name))
    st = e.value.status
    assert (st.code, st.reason, st.status) == (409, "AlreadyExists", "Failure")
    assert st.message == f'configmaps "{name}" already exists'
    assert st.details.name == name and st.details.kind == "configmaps"


async def test_update_with_a_stale_resource_version_is_409_conflict(kadmin):
    first = await kadmin.create(_cm(unique("stale")))
    await kadmin.patch(ConfigMap, first.metadata.name, {"data": {"k": "newer"}})
    first.data = {"k": "from the stale copy"}
    with pytest.raises(ApiError) as e:
        await kadmin.replace(first)
    assert (e.value.status.code, e.value.status.reason) == (409, "Conflict")
    assert "the object has been modified" in e.value.status.message
    kept = await kadmin.get(ConfigMap, first.metadata.name)
    assert kept.data == {"k": "newer"}
    with pytest.raises(ApiError) as e:  # a merge patch naming the stale version too
        await kadmin.patch(ConfigMap, first.metadata.name,
                           {"metadata": {"resourceVersion": first.metadata.resourceVersion}, "data": {"k": "x"}})
    assert e.value.status.reason == "Conflict"


async def test_label_and_field_selectors(kadmin):
    run = unique("sel")
    names = [unique("sel-obj") for _ in range(3)]
    for i, n in enumerate(names):
        await kadmin.create(_cm(n, {"metallo.io/run": run, "idx": str(i)}))
    listed = [o.metadata.name async for o in kadmin.list(ConfigMap, labels={"metallo.io/run": run})]
    assert sorted(listed) == sorted(names)
    async with raw() as http:
        r = await http.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                           params={"labelSelector": f"metallo.io/run={run},idx in (0,2),idx!=2"})
        assert [i["metadata"]["name"] for i in r.json()["items"]] == [names[0]]
        r = await http.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                           params={"fieldSelector": f"metadata.name={names[1]}"})
        assert [i["metadata"]["name"] for i in r.json()["items"]] == [names[1]]
        r = await http.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps", params={"fieldSelector": "spec.nope=1"})
        assert r.status_code == 400 and r.json()["reason"] == "BadRequest"


async def test_status_subresource_is_kept_apart_from_spec(kadmin):
    name = unique("pvc-status")
    pvc = PersistentVolumeClaim(metadata=ObjectMeta(name=name), spec=PersistentVolumeClaimSpec(
        accessModes=["ReadWriteOnce"], resources=VolumeResourceRequirements(requests={"storage": "1Gi"})))
    await kadmin.create(pvc)
    async with raw() as http:
        url = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{name}"
        merge = {"Content-Type": "application/merge-patch+json"}
        r = await http.patch(url, content=json.dumps({"status": {"phase": "Lost"}, "metadata": {"labels": {"a": "b"}}}),
                             headers=merge)
        assert r.status_code == 200
        assert r.json()["status"].get("phase") != "Lost" and r.json()["metadata"]["labels"] == {"a": "b"}
        r = await http.patch(url + "/status", content=json.dumps(
            {"status": {"phase": "Lost"}, "metadata": {"labels": {"c": "d"}}, "spec": {"volumeName": "x"}}),
            headers=merge)
        assert r.status_code == 200
        body = r.json()
        assert body["status"]["phase"] == "Lost"
        assert body["metadata"]["labels"] == {"a": "b"} and body["spec"]["volumeName"] != "x"
        assert body["metadata"]["generation"] == 1  # status writes never raise generation


async def test_server_side_apply_creates_a_missing_object_then_merges(kadmin):
    name = unique("ssa")
    async with raw() as http:
        url = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}"
        apply = {"Content-Type": "application/apply-patch+yaml"}
        doc = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: '1'\n"
        r = await http.patch(url, params={"fieldManager": "metallo"}, content=doc, headers=apply)
        assert r.status_code == 201 and r.json()["data"] == {"a": "1"}
        r = await http.patch(url, params={"fieldManager": "metallo"}, content=doc.replace("a: '1'", "b: '2'"),
                             headers=apply)
        assert r.status_code == 200 and r.json()["data"] == {"a": "1", "b": "2"}
        r = await http.patch(url, content=doc, headers=apply)
        assert r.status_code == 400  # apply needs a fieldManager
    applied = await kadmin.apply(_cm(unique("ssa-lk"), data={"z": "9"}))
    assert applied.metadata.uid and applied.data == {"z": "9"}


async def _collect(http: httpx2.AsyncClient, params: dict, want: int) -> list[dict]:
    out: list[dict] = []
    async with http.stream("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps", params=params) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.strip():
                out.append(json.loads(line))
            if len(out) >= want:
                break
    return out


@pytest.mark.parametrize("flag", ["true", "True"])
async def test_watch_from_a_resource_version(kadmin, flag):
    run = unique("watch")
    first = await kadmin.create(_cm(unique("w0"), {"run": run}))
    second = await kadmin.create(_cm(unique("w1"), {"run": run}))
    await kadmin.patch(ConfigMap, second.metadata.name, {"data": {"k": "changed"}})
    await kadmin.delete(ConfigMap, first.metadata.name)
    async with raw() as http:
        events = await asyncio.wait_for(_collect(http, {
            "watch": flag, "labelSelector": f"run={run}",
            "resourceVersion": first.metadata.resourceVersion}, 3), timeout=10)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", second.metadata.name), ("MODIFIED", second.metadata.name), ("DELETED", first.metadata.name)]
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert rvs == sorted(rvs) and rvs[0] > int(first.metadata.resourceVersion)
        r = await http.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps", params={"watch": flag, "resourceVersion": "x"})
        assert r.status_code == 400


async def test_watch_through_lightkube_sees_new_objects(kadmin):
    run = unique("lkwatch")
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for kind, obj in kadmin.watch(ConfigMap, labels={"run": run}):
            seen.append((kind, obj.metadata.name))
            if len(seen) == 2:
                return
    task = asyncio.create_task(watch())
    await asyncio.sleep(0.3)
    name = unique("lkw")
    await kadmin.create(_cm(name, {"run": run}))
    await kadmin.patch(ConfigMap, name, {"metadata": {"labels": {"run": "other"}}})  # leaves the selector
    await asyncio.wait_for(task, timeout=10)
    assert seen == [("ADDED", name), ("DELETED", name)]


async def test_delete_with_a_uid_precondition(kadmin):
    obj = await kadmin.create(_cm(unique("pre")))
    async with raw() as http:
        url = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{obj.metadata.name}"
        r = await http.request("DELETE", url, content=json.dumps(
            {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": str(uuid.uuid4())}}))
        assert r.status_code == 409 and r.json()["reason"] == "Conflict"
        assert "Precondition failed: UID in precondition" in r.json()["message"]
        await kadmin.get(ConfigMap, obj.metadata.name)  # still there
        r = await http.request("DELETE", url, content=json.dumps({"preconditions": {"uid": obj.metadata.uid}}))
        assert r.status_code == 200
    with pytest.raises(ApiError) as e:
        await kadmin.get(ConfigMap, obj.metadata.name)
    assert (e.value.status.code, e.value.status.reason) == (404, "NotFound")


async def test_delete_collection_by_label_selector(kadmin):
    run = unique("coll")
    keep = await kadmin.create(_cm(unique("keep"), {"run": "other"}))
    names = sorted([(await kadmin.create(_cm(unique("gone"), {"run": run}))).metadata.name for _ in range(2)])
    async with raw() as http:
        r = await http.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/configmaps",
                               params={"labelSelector": f"run={run}"}, json={"propagationPolicy": "Background"})
        assert r.status_code == 200 and r.json()["kind"] == "ConfigMapList"
        assert sorted(i["metadata"]["name"] for i in r.json()["items"]) == names
    assert [o async for o in kadmin.list(ConfigMap, labels={"run": run})] == []
    await kadmin.get(ConfigMap, keep.metadata.name)


async def test_finalizers_hold_an_object_with_a_deletion_timestamp(kadmin):
    name = unique("fin")
    await kadmin.create(ConfigMap(metadata=ObjectMeta(name=name, finalizers=["metallo.io/hold"])))
    await kadmin.delete(ConfigMap, name)
    held = await kadmin.get(ConfigMap, name)
    assert held.metadata.deletionTimestamp is not None and held.metadata.finalizers == ["metallo.io/hold"]
    with pytest.raises(ApiError) as e:
        await kadmin.patch(ConfigMap, name, {"metadata": {"finalizers": ["metallo.io/hold", "x.io/new"]}})
    assert e.value.status.reason == "Forbidden"
    await kadmin.patch(ConfigMap, name, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiError) as e:
        await kadmin.get(ConfigMap, name)
    assert e.value.status.reason == "NotFound"


async def test_invalid_and_not_found_and_unauthorised_status_bodies(kadmin):
    with pytest.raises(ApiError) as e:
        await kadmin.create(_cm("Not_A_DNS_Name"))
    st = e.value.status
    assert (st.code, st.reason) == (422, "Invalid")
    assert st.details.causes[0].field == "metadata.name" and st.details.causes[0].reason == "FieldValueInvalid"
    with pytest.raises(ApiError) as e:
        await kadmin.get(ConfigMap, unique("absent"))
    assert (e.value.status.code, e.value.status.reason) == (404, "NotFound")
    with pytest.raises(ApiError) as e:
        await kadmin.create(_cm(unique("nons")), namespace=unique("no-such-namespace"))
    assert e.value.status.reason == "NotFound" and "namespaces" in e.value.status.message
    async with raw() as http:
        r = await http.get("/api/v1/namespaces", headers={"Authorization": "Bearer wrong"})
        body = r.json()
        assert (r.status_code, body["kind"], body["reason"], body["code"]) == (401, "Status", "Unauthorized", 401)


async def test_the_openapi_schema_refuses_what_a_cluster_refuses(k8s_lab):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": unique("schema")},
           "spec": {"backoffLimit": "zero", "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"image": "metallo/platform:1", "command": "true"}]}}}}
    async with raw() as http:
        r = await http.post(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", json=job)
        body = r.json()
        assert (r.status_code, body["reason"]) == (422, "Invalid")
        causes = {(c["field"], c["reason"]) for c in body["details"]["causes"]}
        assert {("spec.backoffLimit", "FieldValueInvalid"),
                ("spec.template.spec.containers[0].command", "FieldValueInvalid"),
                ("spec.template.spec.containers[0].name", "FieldValueRequired")} <= causes
        assert len(body["details"]["causes"]) == len(causes)  # each cause once
        assert (await http.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job['metadata']['name']}")).status_code == 404
        job["spec"] = {"backoffLimit": 0, "unknownField": 1, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "metallo/platform:1", "command": ["true"],
                                                      "resources": {"requests": {"cpu": "100m", "memory": "8Mi"}}}]}}}
        r = await http.post(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", json=job)
        assert r.status_code == 201  # unknown fields pass, as the API server's default fieldValidation lets them
        await http.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job['metadata']['name']}",
                           json={"propagationPolicy": "Background"})


async def test_tls_with_the_lab_ca_and_the_kubeconfig(k8s_lab):
    text = (STATE / "kubeconfig").read_text()
    assert "https://127.0.0.1:" in text and str(STATE / "ca.pem") in text and "token:" in text
    assert oct((STATE / "kubeconfig").stat().st_mode & 0o777) == "0o600"
    server = text.split("server: ", 1)[1].split()[0]
    with pytest.raises(httpx2.ConnectError):  # the system trust store does not know the lab CA
        async with httpx2.AsyncClient(verify=ssl.create_default_context()) as plain:
            await plain.get(f"{server}/version")
    async with raw() as http:
        version = (await http.get("/version")).json()
        assert (version["major"], version["minor"]) == ("1", "31")
        groups = (await http.get("/apis")).json()
        assert "batch" in [g["name"] for g in groups["groups"]]
        v1 = (await http.get("/api/v1")).json()
        assert {"pods", "pods/log", "pods/status", "secrets"} <= {r["name"] for r in v1["resources"]}
