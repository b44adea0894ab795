"""The flow the kubernetes executor runs, on the lab: a private PVC, a preparation Pod
that checks a repository out into it with a grant from a Secret, a Job whose command
runs from that checkout, then a stage-out Pod that commits and pushes what the Job
wrote, every Pod as the member. Git is real; the "remote" is a bare repository on
the host (/var/tmp, since each Pod has a private /tmp)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.k8s.lab_clients import IMAGE, NAMESPACE, as_member, job_manifest, unique, wait_for

pytestmark = pytest.mark.k8s

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"


def git(*args: str, cwd: Path) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    return subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def remote():
    alice = pwd.getpwnam("alice")
    root = Path("/var/tmp") / f"metallo-k8s-test-{uuid.uuid4().hex[:8]}"
    work = root / "work"
    work.mkdir(parents=True)
    (work / "run.sh").write_text("#!/bin/sh\necho \"trained on $(cat data.txt)\" > result.txt\n")
    (work / "data.txt").write_text("42\n")
    git("init", "-q", "-b", "main", cwd=work)
    git("add", ".", cwd=work)
    git("commit", "-q", "-m", "input", cwd=work)
    git("clone", "-q", "--bare", str(work), str(root / "repo.git"), cwd=root)
    for path in [root, *root.rglob("*")]:
        os.chown(path, alice.pw_uid, alice.pw_gid)
    yield root / "repo.git"
    shutil.rmtree(root, ignore_errors=True)


def helper(name: str, script: str, claim: str, secret: str) -> dict:
    return {"metadata": {"name": name, "labels": {"metallo.io/test": "workflow"}}, "spec": {
        "restartPolicy": "Never",
        # Secret files are root's: the member reads a 0440 file through its group, fsGroup.
        "securityContext": {"fsGroup": pwd.getpwnam("alice").pw_gid},
        "volumes": [{"name": "ws", "persistentVolumeClaim": {"claimName": claim}},
                    {"name": "grant", "secret": {"secretName": secret, "defaultMode": 0o440}}],
        "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-ec", script],
                        "env": [{"name": "GIT_CONFIG_GLOBAL", "value": "/workspace/.gitconfig"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        "volumeMounts": [{"name": "ws", "mountPath": "/workspace"},
                                         {"name": "grant", "mountPath": "/var/run/metallo/grant", "readOnly": True}]}]}}


async def ended(http, path: str) -> dict:
    async def check():
        obj = (await http.get(path)).json()
        phase = (obj.get("status") or {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None
    return await wait_for(check, timeout=60)


async def test_prepare_run_and_stage_out_through_a_private_pvc(k8s_lab, remote):
    claim, secret = unique("attempt-ws"), unique("attempt-grant")
    prep, job, out = unique("prep"), unique("compute"), unique("stageout")
    async with as_member("alice") as http:
        await http.post(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", json={
            "metadata": {"name": claim}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                  "resources": {"requests": {"storage": "1Gi"}}}})
        await http.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json={
            "metadata": {"name": secret}, "stringData": {"remote": f"file://{remote}"}})
        checkout = ("git clone -q \"$(cat /var/run/metallo/grant/remote)\" /workspace/repo; "
                    "git -C /workspace/repo rev-parse HEAD")
        await http.post(PODS, json=helper(prep, checkout, claim, secret))
        assert (await ended(http, f"{PODS}/{prep}"))["status"]["phase"] == "Succeeded"
        input_commit = (await http.get(f"{PODS}/{prep}/log")).text.strip()
        compute = job_manifest(job, ["sh", "run.sh"], container={
            "workingDir": "/workspace/repo", "volumeMounts": [{"name": "ws", "mountPath": "/workspace"}]},
            volumes=[{"name": "ws", "persistentVolumeClaim": {"claimName": claim}}])
        await http.post(JOBS, json=compute)

        async def complete():
            j = (await http.get(f"{JOBS}/{job}")).json()
            return j if (j.get("status") or {}).get("completionTime") else None
        await wait_for(complete, timeout=60)
        push = ("cd /workspace/repo; git -c user.name=alice -c user.email=alice@lab add result.txt; "
                "git -c user.name=alice -c user.email=alice@lab commit -q -m output; git push -q origin HEAD:main; "
                "git rev-parse HEAD")
        await http.post(PODS, json=helper(out, push, claim, secret))
        done = await ended(http, f"{PODS}/{out}")
        log = (await http.get(f"{PODS}/{out}/log")).text
        assert done["status"]["phase"] == "Succeeded", log
        output_commit = log.strip().splitlines()[-1]
        for name in (prep, out):
            await http.delete(f"{PODS}/{name}")
        await http.request("DELETE", f"{JOBS}/{job}", json={"propagationPolicy": "Foreground"})
        await http.delete(f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret}")
        await http.delete(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims/{claim}")
    assert output_commit != input_commit
    assert git("rev-parse", "main", cwd=remote).strip() == output_commit
    assert git("show", "main:result.txt", cwd=remote) == "trained on 42\n"
    assert git("log", "-1", "--format=%an", "main", cwd=remote).strip() == "alice"
