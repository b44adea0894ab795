"""The lab kubelet's Pods: volumes by mount path, Secrets, waiting reasons, scheduling, logs."""

from __future__ import annotations

import base64
import json
import pwd
import time

import pytest

from metallo.labs.kubernetes.clock import rfc3339_nano
from tests.k8s.lab_clients import IMAGE, NAMESPACE, STATE, as_member, raw, unique, wait_for

pytestmark = pytest.mark.k8s

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PVCS = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"


def pod(name: str, argv: list[str], **spec) -> dict:
    container = {"name": "main", "image": IMAGE, "command": argv,
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    container.update(spec.pop("container", {}))
    return {"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


async def state_of(http, name: str) -> dict:
    return (await http.get(f"{PODS}/{name}")).json()


async def ended(http, name: str, timeout: float = 30) -> dict:
    async def check():
        p = await state_of(http, name)
        return p if p["status"]["phase"] in ("Succeeded", "Failed") else None
    return await wait_for(check, timeout=timeout)


async def waiting_reason(http, name: str, reasons: set[str], timeout: float = 20) -> dict:
    async def check():
        p = await state_of(http, name)
        statuses = p["status"].get("containerStatuses") or []
        got = statuses and statuses[0]["state"].get("waiting", {}).get("reason")
        return p if got in reasons else None
    return await wait_for(check, timeout=timeout)


async def delete_now(name: str) -> None:
    async with raw() as admin:
        await admin.delete(f"{PODS}/{name}", params={"gracePeriodSeconds": "0"})


async def test_a_pvc_is_a_private_directory_at_its_mount_path(k8s_lab):
    claim, writer, reader = unique("ws"), unique("writer"), unique("reader")
    async with as_member("alice") as http:
        r = await http.post(PVCS, json={"metadata": {"name": claim}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        assert r.status_code == 201
        pvc = await wait_for(lambda: _bound(http, claim))
        assert pvc["spec"]["volumeName"] == f"pvc-{pvc['metadata']['uid']}"
        assert "kubernetes.io/pvc-protection" in pvc["metadata"]["finalizers"]
        volume = [{"name": "ws", "persistentVolumeClaim": {"claimName": claim}}]
        mounts = {"volumeMounts": [{"name": "ws", "mountPath": "/workspace"}], "workingDir": "/workspace"}
        r = await http.post(PODS, json=pod(writer, ["sh", "-c", "echo data > result.txt; pwd; ls -ld /workspace"],
                                           volumes=volume, container=mounts))
        assert r.status_code == 201, r.text
        done = await ended(http, writer)
        assert done["status"]["phase"] == "Succeeded"
        log = (await http.get(f"{PODS}/{writer}/log")).text.splitlines()
        assert log[0] == "/workspace" and log[1].startswith("drwx------") and " alice " in log[1]
    host = STATE / "volumes" / NAMESPACE / f"{claim}-{pvc['metadata']['uid']}"
    assert (host / "result.txt").read_text() == "data\n"
    st = host.stat()
    assert (st.st_uid, oct(st.st_mode & 0o7777)) == (pwd.getpwnam("alice").pw_uid, "0o700")
    assert oct((STATE / "volumes").stat().st_mode & 0o777) == "0o700"
    bob = pwd.getpwnam("bob").pw_uid
    async with raw() as admin:  # bob's process, given the claim, still cannot read alice's files
        r = await admin.post(PODS, json=pod(reader, ["cat", "/workspace/result.txt"], volumes=volume,
                                            securityContext={"runAsUser": bob},
                                            container={"volumeMounts": mounts["volumeMounts"]}))
        assert r.status_code == 201, r.text
        denied = await ended(admin, reader)
        assert denied["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] != 0
        assert "Permission denied" in (await admin.get(f"{PODS}/{reader}/log")).text
        for name in (writer, reader):
            await delete_now(name)
        await admin.delete(f"{PVCS}/{claim}")
        await wait_for(lambda: _gone(admin, f"{PVCS}/{claim}"))
    assert not host.exists()


async def _bound(http, claim):
    pvc = (await http.get(f"{PVCS}/{claim}")).json()
    return pvc if (pvc.get("status") or {}).get("phase") == "Bound" else None


async def _gone(http, path):
    return (await http.get(path)).status_code == 404


async def test_secrets_as_env_and_files_and_a_missing_secret_waits(k8s_lab):
    secret, name = unique("grant"), unique("secret-user")
    spec = pod(name, ["sh", "-c", "echo $TOKEN; cat /var/run/grant/token; echo; ls -l /var/run/grant/token"],
               volumes=[{"name": "grant", "secret": {"secretName": secret, "defaultMode": 0o440}}],
               securityContext={"fsGroup": pwd.getpwnam("alice").pw_gid},
               container={"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}],
                          "volumeMounts": [{"name": "grant", "mountPath": "/var/run/grant", "readOnly": True}]})
    async with as_member("alice") as http:
        assert (await http.post(PODS, json=spec)).status_code == 201
        p = await waiting_reason(http, name, {"CreateContainerConfigError"})
        assert p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == f'secret "{secret}" not found'
        assert p["status"]["phase"] == "Pending"
        r = await http.get(f"{PODS}/{name}/log")
        assert r.status_code == 400 and "is waiting to start: CreateContainerConfigError" in r.json()["message"]
        value = "s3cr3t-value"
        await http.post(SECRETS, json={"metadata": {"name": secret},
                                       "data": {"token": base64.b64encode(value.encode()).decode()}})
        done = await ended(http, name)
        lines = (await http.get(f"{PODS}/{name}/log")).text.splitlines()
        assert done["status"]["phase"] == "Succeeded" and lines[:2] == [value, value]
        assert lines[2].startswith("-r--r-----")
        await http.delete(f"{SECRETS}/{secret}")
    await delete_now(name)


async def test_an_image_the_lab_does_not_have_waits_for_its_pull(k8s_lab):
    name = unique("noimage")
    async with as_member("alice") as http:
        spec = pod(name, ["true"], container={"image": "registry.example.com/nope:1"})
        assert (await http.post(PODS, json=spec)).status_code == 201
        first = await waiting_reason(http, name, {"ErrImagePull"})
        assert "registry.example.com/nope:1" in first["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        later = await waiting_reason(http, name, {"ImagePullBackOff"})
        assert later["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == \
            'Back-off pulling image "registry.example.com/nope:1"'
        assert later["status"]["phase"] == "Pending"
        assert [c["status"] for c in later["status"]["conditions"] if c["type"] == "PodScheduled"] == ["True"]
    await delete_now(name)


async def test_requests_beyond_the_node_are_unschedulable(k8s_lab):
    big, picky = unique("huge"), unique("picky")
    async with as_member("alice") as http:
        await http.post(PODS, json=pod(big, ["true"], container={"resources": {"requests": {"cpu": "7", "memory": "64Mi"},
                                                                               "limits": {"nvidia.com/gpu": "1"}}}))
        await http.post(PODS, json=pod(picky, ["true"], nodeSelector={"metallo.io/gpu-class": "a100"}))

        async def unschedulable(name):
            p = await state_of(http, name)
            cond = [c for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
            return cond[0] if cond and cond[0].get("reason") == "Unschedulable" else None
        cond = await wait_for(lambda: unschedulable(big))
        assert cond["status"] == "False"
        assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
        cond = await wait_for(lambda: unschedulable(picky))
        assert "didn't match Pod's node affinity/selector" in cond["message"]
        p = await state_of(http, big)
        assert p["status"]["phase"] == "Pending" and "nodeName" not in p["spec"]
    for name in (big, picky):
        await delete_now(name)


async def test_log_options(k8s_lab):
    name = unique("logs")
    script = "echo one; echo two; sleep 1.2; echo three; echo four >&2"
    async with as_member("alice") as http:
        await http.post(PODS, json=pod(name, ["sh", "-c", script]))
        await ended(http, name)
        url = f"{PODS}/{name}/log"
        assert (await http.get(url)).text == "one\ntwo\nthree\nfour\n"
        assert (await http.get(url, params={"limitBytes": "6"})).text == "one\ntw"
        assert (await http.get(url, params={"tailLines": "2"})).text == "three\nfour\n"
        assert (await http.get(url, params={"container": "main"})).text.startswith("one")
        stamped = (await http.get(url, params={"timestamps": "true"})).text.splitlines()
        stamp_three = stamped[2].split(" ", 1)[0]
        assert stamped[2].endswith(" three") and stamp_three.endswith("Z")
        assert (await http.get(url, params={"sinceTime": stamp_three})).text == "three\nfour\n"
        future = rfc3339_nano(time.time() + 3600)
        assert (await http.get(url, params={"sinceTime": future})).text == ""
        r = await http.get(url, params={"container": "nope"})
        assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    await delete_now(name)


async def test_an_argv_that_cannot_be_executed_is_a_start_error(k8s_lab):
    name = unique("noexec")
    async with as_member("alice") as http:
        await http.post(PODS, json=pod(name, ["/no/such/program", "x"]))
        p = await ended(http, name)
        t = p["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (t["exitCode"], t["reason"]) == (128, "StartError")
        assert 'exec: "/no/such/program": executable file not found' in t["message"]
    await delete_now(name)


async def test_deleting_a_running_pod_sends_sigterm_then_removes_it(k8s_lab):
    name = unique("graceful")
    script = "trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 0.1; done"
    async with as_member("alice") as http:
        await http.post(PODS, json=pod(name, ["sh", "-c", script], terminationGracePeriodSeconds=10))

        async def running():
            p = await state_of(http, name)
            return p["status"]["phase"] == "Running" and "started" in (await http.get(f"{PODS}/{name}/log")).text
        await wait_for(running)
        r = await http.delete(f"{PODS}/{name}")
        assert r.status_code == 202 and r.json()["metadata"]["deletionTimestamp"]
        assert r.json()["metadata"]["deletionGracePeriodSeconds"] == 10

        deleted = None
        async with http.stream("GET", PODS, params={
                "watch": "true", "fieldSelector": f"metadata.name={name}",
                "resourceVersion": r.json()["metadata"]["resourceVersion"]}) as stream:
            async for line in stream.aiter_lines():
                if line.strip() and json.loads(line)["type"] == "DELETED":
                    deleted = json.loads(line)["object"]
                    break
    t = deleted["status"]["containerStatuses"][0]["state"]["terminated"]
    assert deleted["status"]["phase"] == "Succeeded" and t["exitCode"] == 0  # the trap ran: SIGTERM, not SIGKILL
    pod_dir = STATE / "pods" / deleted["metadata"]["uid"]

    async def cleaned():
        return not pod_dir.exists()
    await wait_for(cleaned)


async def test_on_failure_restarts_with_crash_loop_back_off(k8s_lab):
    name = unique("restart")
    marker = f"/tmp/{name}"
    script = f"if [ -e {marker} ]; then echo second; exit 0; fi; touch {marker}; echo first; exit 4"
    async with as_member("alice") as http:
        await http.post(PODS, json=pod(name, ["sh", "-c", script], restartPolicy="OnFailure"))
        done = await ended(http, name)
        status = done["status"]["containerStatuses"][0]
        assert done["status"]["phase"] == "Succeeded" and status["restartCount"] == 1
        assert status["lastState"]["terminated"]["exitCode"] == 4
        assert (await http.get(f"{PODS}/{name}/log")).text == "second\n"
        assert (await http.get(f"{PODS}/{name}/log", params={"previous": "true"})).text == "first\n"
    await delete_now(name)


async def test_fields_and_json_of_the_downward_api(k8s_lab):
    name = unique("downward")
    spec = pod(name, ["python3", "-c", "import json,os; print(json.dumps(dict(os.environ)))"], container={
        "env": [{"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]})
    async with as_member("alice") as http:
        await http.post(PODS, json=spec)
        await ended(http, name)
        env = json.loads((await http.get(f"{PODS}/{name}/log")).text)
    assert (env["MY_NAME"], env["MY_NS"], env["HOME"]) == (name, NAMESPACE, pwd.getpwnam("alice").pw_dir)
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1" and "TOKEN" not in env
    await delete_now(name)

