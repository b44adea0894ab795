"""The lab's Job controller and kubelet: real processes, exit codes, signals, deadlines.

Jobs are created as the member alice (the Runtime's token impersonating her), as the
executor does; what the tests check is what the lab reports through the API.
"""

from __future__ import annotations

import json
import pwd

import pytest
from lightkube.resources.batch_v1 import Job

from tests.k8s.lab_clients import NAMESPACE, as_member, job_manifest, raw, unique, wait_for

pytestmark = pytest.mark.k8s

JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


async def finished(http, name: str) -> dict:
    async def check():
        job = (await http.get(f"{JOBS}/{name}")).json()
        kinds = [c["type"] for c in (job.get("status") or {}).get("conditions") or []]
        return job if ("Complete" in kinds or "Failed" in kinds) else None
    return await wait_for(check, timeout=60)


async def pods_of(http, job: dict) -> list[dict]:
    r = await http.get(PODS, params={"labelSelector": f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}"})
    return r.json()["items"]


def terminated(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


async def test_a_job_runs_as_the_member_and_completes(k8s_lab):
    name = unique("ok")
    async with as_member("alice") as http:
        r = await http.post(JOBS, json=job_manifest(name, ["sh", "-c", "id -u; echo to-stderr >&2"]))
        assert r.status_code == 201, r.text
        job = await finished(http, name)
        st = job["status"]
        assert [c["type"] for c in st["conditions"]] == ["SuccessCriteriaMet", "Complete"]
        assert all(c["reason"] == "CompletionsReached" and c["status"] == "True" for c in st["conditions"])
        assert st["succeeded"] == 1 and "failed" not in st and st["startTime"] and st["completionTime"]
        assert job["spec"]["selector"]["matchLabels"] == {"batch.kubernetes.io/controller-uid": job["metadata"]["uid"]}
        [pod] = await pods_of(http, job)
        labels = pod["metadata"]["labels"]
        assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == name
        assert labels["controller-uid"] == job["metadata"]["uid"]
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == \
            ("Job", job["metadata"]["uid"], True, True)
        assert pod["status"]["phase"] == "Succeeded"
        assert terminated(pod)["exitCode"] == 0 and terminated(pod)["reason"] == "Completed"
        assert pod["spec"]["securityContext"]["runAsUser"] == pwd.getpwnam("alice").pw_uid
        log = (await http.get(f"{PODS}/{pod['metadata']['name']}/log")).text
        assert log.splitlines() == [str(pwd.getpwnam("alice").pw_uid), "to-stderr"]


async def test_exit_code_3_fails_the_job_with_backoff_limit_exceeded(k8s_lab):
    name = unique("exit3")
    async with as_member("alice") as http:
        await http.post(JOBS, json=job_manifest(name, ["sh", "-c", "exit 3"]))
        job = await finished(http, name)
        conds = job["status"]["conditions"]
        assert [(c["type"], c["reason"]) for c in conds] == [("FailureTarget", "BackoffLimitExceeded"),
                                                             ("Failed", "BackoffLimitExceeded")]
        assert job["status"]["failed"] == 1 and "completionTime" not in job["status"]
        [pod] = await pods_of(http, job)
        assert pod["status"]["phase"] == "Failed"
        t = terminated(pod)
        assert (t["exitCode"], t["reason"]) == (3, "Error") and "signal" not in t


async def test_a_signal_death_is_128_plus_n_with_the_signal_kept(k8s_lab):
    name = unique("sig")
    async with as_member("alice") as http:
        # Kubernetes' expansion turns $$ into $, so the shell sees kill -KILL $$.
        await http.post(JOBS, json=job_manifest(name, ["sh", "-c", "kill -KILL $$$$"]))
        job = await finished(http, name)
        [pod] = await pods_of(http, job)
        t = terminated(pod)
        assert (t["exitCode"], t["signal"], t["reason"]) == (137, 9, "Error")


async def test_backoff_limit_replaces_failed_pods(k8s_lab):
    name = unique("retry")
    async with as_member("alice") as http:
        await http.post(JOBS, json=job_manifest(name, ["false"], job_spec={"backoffLimit": 1}))
        job = await finished(http, name)
        assert job["status"]["failed"] == 2
        assert len(await pods_of(http, job)) == 2


async def test_active_deadline_seconds_fails_the_job_and_stops_its_pod(k8s_lab):
    name = unique("deadline")
    async with as_member("alice") as http:
        await http.post(JOBS, json=job_manifest(name, ["sleep", "60"], job_spec={"activeDeadlineSeconds": 1}))
        job = await finished(http, name)
        assert [(c["type"], c["reason"]) for c in job["status"]["conditions"]] == [
            ("FailureTarget", "DeadlineExceeded"), ("Failed", "DeadlineExceeded")]
        assert job["status"]["conditions"][1]["message"] == "Job was active longer than specified deadline"

        async def stopped():
            return all(p["status"]["phase"] == "Failed" for p in await pods_of(http, job))
        await wait_for(stopped, timeout=45)


async def test_command_args_env_and_working_dir_are_exact(k8s_lab):
    name = unique("argv")
    script = ("import json,os,sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
              "'env': {k: os.environ.get(k) for k in ('GREETING','REF','ESCAPED','PATH','HOSTNAME')}}))")
    manifest = job_manifest(name, ["python3", "-c", script], container={
        "args": ["two words", "$(GREETING)", "$$(GREETING)", "*", "; rm -rf /"],
        "env": [{"name": "GREETING", "value": "hello there"}, {"name": "REF", "value": "x-$(GREETING)"},
                {"name": "ESCAPED", "value": "$$(GREETING)"}],
        "workingDir": "/usr"})
    async with as_member("alice") as http:
        await http.post(JOBS, json=manifest)
        job = await finished(http, name)
        [pod] = await pods_of(http, job)
        out = json.loads((await http.get(f"{PODS}/{pod['metadata']['name']}/log")).text)
    assert out["argv"] == ["two words", "hello there", "$(GREETING)", "*", "; rm -rf /"]
    assert out["cwd"] == "/usr"
    assert out["env"]["REF"] == "x-hello there" and out["env"]["ESCAPED"] == "$(GREETING)"
    assert out["env"]["HOSTNAME"] == pod["metadata"]["name"] and out["env"]["PATH"]


async def test_init_containers_run_first_in_order(k8s_lab):
    name = unique("init")
    mount = [{"name": "scratch", "mountPath": "/scratch"}]
    manifest = job_manifest(name, ["cat", "/scratch/order"], container={"volumeMounts": mount},
                            volumes=[{"name": "scratch", "emptyDir": {}}],
                            initContainers=[
                                {"name": f"init-{i}", "image": "metallo/platform:1", "volumeMounts": mount,
                                 "command": ["sh", "-c", f"echo {i} >> /scratch/order"]} for i in (1, 2)])
    async with as_member("alice") as http:
        await http.post(JOBS, json=manifest)
        job = await finished(http, name)
        [pod] = await pods_of(http, job)
        assert [s["state"]["terminated"]["exitCode"] for s in pod["status"]["initContainerStatuses"]] == [0, 0]
        assert (await http.get(f"{PODS}/{pod['metadata']['name']}/log")).text == "1\n2\n"


async def test_a_failing_init_container_fails_the_pod_before_the_main_container(k8s_lab):
    name = unique("initfail")
    manifest = job_manifest(name, ["sh", "-c", "echo main-ran"], initContainers=[
        {"name": "prepare", "image": "metallo/platform:1", "command": ["sh", "-c", "exit 7"]}])
    async with as_member("alice") as http:
        await http.post(JOBS, json=manifest)
        job = await finished(http, name)
        [pod] = await pods_of(http, job)
        assert pod["status"]["phase"] == "Failed"
        assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 7
        assert "terminated" not in pod["status"]["containerStatuses"][0]["state"]


async def test_propagation_policies_on_job_delete(k8s_lab):
    async with as_member("alice") as http:
        made = {}
        for policy in ("Foreground", "Background", "Orphan"):
            name = unique(policy.lower())
            await http.post(JOBS, json=job_manifest(name, ["sleep", "30"]))
            made[policy] = (await http.get(f"{JOBS}/{name}")).json()
        for job in made.values():
            await wait_for(lambda job=job: _one_pod(http, job))
        answers = {}
        for policy, job in made.items():
            r = await http.request("DELETE", f"{JOBS}/{job['metadata']['name']}",
                                   json={"propagationPolicy": policy, "preconditions": {"uid": job["metadata"]["uid"]}})
            assert r.status_code in (200, 202), r.text
            answers[policy] = r
        fg = answers["Foreground"]
        assert fg.status_code == 202  # accepted: the Job stays until its Pods are gone
        assert "foregroundDeletion" in fg.json()["metadata"]["finalizers"] and fg.json()["metadata"]["deletionTimestamp"]
        assert answers["Background"].status_code == 200  # removed at once; the Pods go after it

        async def gone(path):
            return (await http.get(path)).status_code == 404
        for policy in ("Foreground", "Background"):
            job = made[policy]
            await wait_for(lambda job=job: gone(f"{JOBS}/{job['metadata']['name']}"), timeout=45)

            async def no_pods(job=job):
                return not await pods_of(http, job)
            await wait_for(no_pods, timeout=45)
        orphan = made["Orphan"]
        await wait_for(lambda: gone(f"{JOBS}/{orphan['metadata']['name']}"))
        [pod] = await pods_of(http, orphan)
        assert "ownerReferences" not in pod["metadata"]
    async with raw() as admin:
        await admin.delete(f"{PODS}/{pod['metadata']['name']}", params={"gracePeriodSeconds": "0"})


async def _one_pod(http, job):
    pods = await pods_of(http, job)
    return len(pods) == 1 and pods[0]["status"]["phase"] == "Running"


async def test_lightkube_typed_models_parse_the_lab_job(alice):
    name = unique("typed")
    await alice.create(Job.from_dict(job_manifest(name, ["true"])))

    async def done():
        job = await alice.get(Job, name)
        return job if job.status and job.status.completionTime else None
    job = await wait_for(done, timeout=60)
    assert job.status.succeeded == 1 and [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]


async def test_cancelling_a_job_whose_pod_cannot_be_scheduled(k8s_lab):
    name = unique("pending")
    manifest = job_manifest(name, ["true"], container={"resources": {"requests": {"cpu": "9", "memory": "8Mi"}}})
    async with as_member("alice") as http:
        await http.post(JOBS, json=manifest)
        job = (await http.get(f"{JOBS}/{name}")).json()

        async def unschedulable():
            pods = await pods_of(http, job)
            conds = [c for p in pods for c in p["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
            return conds and conds[0].get("reason") == "Unschedulable"
        await wait_for(unschedulable)
        r = await http.request("DELETE", f"{JOBS}/{name}", json={
            "propagationPolicy": "Foreground", "preconditions": {"uid": job["metadata"]["uid"]}})
        assert r.status_code == 202

        async def all_gone():
            return (await http.get(f"{JOBS}/{name}")).status_code == 404 and not await pods_of(http, job)
        await wait_for(all_gone)
