"""Each stage's exact native request (docs/site-runtime.md, Slurm executor).

The workspace and log paths of an Attempt and the request saved before a stage's
POST: the versioned stage script and a job submitted held, with ``afterok`` on the
stage before. The request carries no credential; repository tokens are added only
to the POST's environment. Pure: the Attempt record and the script text are handed in.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from site_runtime.domain.slurm_jobs import (
    NativeIdentity,
    StagingSettings,
    job_request,
    stage_identity,
)


def workspace(record: dict[str, Any], attempt_id: str) -> str:
    """The Attempt's private workspace on the shared filesystem."""
    return f"{record['workspace_root']}/{attempt_id}"


def log_path(workspace_root: str, attempt_id: str, stage: str) -> str:
    """The Attempt-scoped log of ``stage`` (the job's standard output and error)."""
    return str(PurePosixPath(workspace_root) / f"{attempt_id}.{stage}.log")


def identity(record: dict[str, Any], run_id: str, attempt_id: str, stage: str) -> NativeIdentity:
    """The exact native identity of ``stage`` from the saved record's prefix and binding."""
    b = record["binding"]
    return stage_identity(record["prefix"], run_id, attempt_id, stage, b["account"], b["user"])


def stage_request(
    record: dict[str, Any],
    *,
    run_id: str,
    attempt_id: str,
    attempt_number: int,
    stage: str,
    after: str | None,
    script: str,
) -> dict[str, Any]:
    """The exact request of ``stage`` (no credentials): ``{script_version, script, job}``.

    ``script`` is the text of the record's script version (a record from before
    versions were recorded is version 1), so a stage submitted after an upgrade runs
    what the Attempt's first stage was rendered with.
    """
    r = record
    version = r.get("script_version", 1)
    ws = workspace(r, attempt_id)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": ws,
        "METALLO_STAGE": stage,
        "METALLO_WORKSPACE": ws,
        "METALLO_ATTEMPT_ID": attempt_id,
        "METALLO_RUN_ID": run_id,
    }
    if stage == "compute":
        env.update(r["environment"])
        env["METALLO_WORKDIR"] = r["working_directory"]
        env["METALLO_CMD_COUNT"] = str(len(r["commands"]))
        for i, c in enumerate(r["commands"]):
            if "shell" in c:
                env[f"METALLO_CMD_{i}_SHELL"] = c["shell"]
            else:
                env[f"METALLO_CMD_{i}_ARGC"] = str(len(c["argv"]))
                for j, arg in enumerate(c["argv"]):
                    env[f"METALLO_CMD_{i}_ARG_{j}"] = arg
        res = r["compute"]
        partition, cpus, memory, minutes, nodes = (
            res["partition"],
            res["cpus"],
            res["memory_mib"],
            res["time_minutes"],
            res["nodes"],
        )
        tres = res.get("tres_per_node")
    else:
        staging = StagingSettings.from_json(r["staging"])
        env["METALLO_REPOSITORY_URL"] = r["repository"]["url"]
        if r.get("repository_ca"):
            env["METALLO_REPOSITORY_CA"] = r["repository_ca"]
        if stage == "stage-in":
            env["METALLO_COMMIT"] = r["repository"]["commit"]
            env["METALLO_BRANCH"] = r["repository"]["branch"]
        else:
            env["METALLO_OUTPUT_BRANCH"] = r["repository"]["output_branch"]
            if version >= 2:  # to tell "nothing to push" (version 1 did not know it)
                env["METALLO_COMMIT"] = r["repository"]["commit"]
            env["METALLO_COMMIT_MESSAGE"] = f"Metallo run {run_id} attempt {attempt_number}"
        partition, cpus, memory, minutes, nodes = (
            staging.partition,
            staging.cpus,
            staging.memory_mib,
            staging.time_minutes,
            1,
        )
        tres = None
    job = job_request(
        identity=identity(r, run_id, attempt_id, stage),
        partition=partition,
        cpus=cpus,
        memory_mib=memory,
        time_minutes=minutes,
        nodes=nodes,
        dependency=f"afterok:{after}" if after else None,
        working_directory=r["workspace_root"],
        standard_output=log_path(r["workspace_root"], attempt_id, stage),
        environment=env,
        tres_per_node=tres,
        hold=True,
    )
    return {"script_version": version, "script": script, "job": job}
