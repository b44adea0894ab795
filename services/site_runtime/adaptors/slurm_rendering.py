"""Each stage's exact native request (seed 000, Staged Slurm batch execution).

The workspace and log paths of an Attempt, each stage's exact native identity
(name, comment, account, user) and the request saved before its POST: the
versioned stage script and a job submitted held, with ``afterok`` on the stage
before.  The request carries no credential; repository tokens are added only to
the POST's environment (:mod:`site_runtime.adaptors.slurm_submission`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from site_runtime.adaptors.slurm_chain_base import ChainBase
from site_runtime.adaptors.slurm_job_model import StagingSettings, job_request, stage_identity
from site_runtime.adaptors.slurm_journal import AttemptRow
from site_runtime.adaptors.slurm_scripts import scripts_for


class ChainRendering(ChainBase):
    """Workspace, log paths, native identity and the exact request of a stage."""

    def _workspace(self, att: AttemptRow) -> str:
        return f"{att.record['workspace_root']}/{att.attempt_id}"

    def _log_path(self, attempt_id: str, stage: str) -> Path:
        att = self.journal.attempt(attempt_id)
        root = att.record["workspace_root"] if att else str(self.settings.workspace_root)
        return Path(root) / f"{attempt_id}.{stage}.log"

    def _identity(self, att: AttemptRow, stage: str):
        b = att.record["binding"]
        return stage_identity(
            att.record["prefix"], att.run_id, att.attempt_id, stage, b["account"], b["user"]
        )

    def _render(self, att: AttemptRow, stage: str, after: str | None) -> dict[str, Any]:
        """The exact request of ``stage`` (no credentials): script and job.

        The script is the text of the version the Attempt was prepared with (a record
        from before versions were recorded is version 1), so a stage submitted after an
        upgrade runs what the Attempt's first stage was rendered with (seed 000,
        Recovery). Raises :class:`~site_runtime.adaptors.slurm_scripts.UnknownScriptVersion`
        for a version this Runtime does not have.
        """
        r = att.record
        version = r.get("script_version", 1)
        script = scripts_for(version)[stage]
        ws = self._workspace(att)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": ws,
            "METALLO_STAGE": stage,
            "METALLO_WORKSPACE": ws,
            "METALLO_ATTEMPT_ID": att.attempt_id,
            "METALLO_RUN_ID": att.run_id,
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
                env["METALLO_COMMIT_MESSAGE"] = (
                    f"Metallo run {att.run_id} attempt {att.attempt_number}"
                )
            partition, cpus, memory, minutes, nodes = (
                staging.partition,
                staging.cpus,
                staging.memory_mib,
                staging.time_minutes,
                1,
            )
            tres = None
        job = job_request(
            identity=self._identity(att, stage),
            partition=partition,
            cpus=cpus,
            memory_mib=memory,
            time_minutes=minutes,
            nodes=nodes,
            dependency=f"afterok:{after}" if after else None,
            working_directory=r["workspace_root"],
            standard_output=str(self._log_path(att.attempt_id, stage)),
            environment=env,
            tres_per_node=tres,
            hold=True,
        )
        return {"script_version": version, "script": script, "job": job}
