"""Helpers for the tests on the real Slurm lab (scripts/slurm-lab; DESIGN.md, The Slurm lab).

Member tokens come from the lab issuer (``metallo.identity.issuer``) signing with
the lab key Slurm trusts; repository grants are recorded in memory; the
repository is a bare Git repository over ``file://`` owned by the member, since
these tests exercise Slurm, not the Git server's grant checks.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt

from metallo.identity.issuer import DEFAULT_AZP, DEFAULT_ISSUER, LabIssuer
from metallo.identity.verify import FileJwksSource, JwksCache, MemberCredential, MemberTokenVerifier
from site_runtime.adaptors.slurm.executor import SlurmExecutor
from site_runtime.adaptors.slurm.journal import SlurmJournal
from site_runtime.adaptors.slurm.rest import SlurmRest
from site_runtime.adaptors.slurm.settings import SlurmSettings
from site_runtime.application.ports import CommandResult, Deferred, SiteCommand
from site_runtime.application.site_access import RepositoryGrant
from tests import lab_repos
from tests.lab_repos import git, queued_batch_payload  # noqa: F401 - git: for the Slurm tests

LAB = Path(os.environ.get("METALLO_SLURM_LAB_STATE", "/var/lib/metallo-slurm-lab"))
KEY = LAB / "issuer" / "private.pem"
JWKS = LAB / "issuer" / "jwks.json"
REST_URL = "http://127.0.0.1:6820"
WORKSPACES = LAB / "workspaces"
REPOS = LAB / "test-repos"
MEMBER = lab_repos.MEMBER


def lab_problem() -> str | None:
    """None when slurmctld and slurmrestd answer, else what is wrong."""
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, check=False)
    if "UP" not in ping.stdout:
        return "slurmctld does not answer scontrol ping: run scripts/slurm-lab up"
    try:
        httpx.get(f"{REST_URL}/openapi/v0.0.38/diag", timeout=3)
    except httpx.HTTPError:
        return "slurmrestd does not answer on 127.0.0.1:6820: run scripts/slurm-lab up"
    return None


class LabTokens:
    """Member tokens from the lab issuer; ``override`` replaces the token for an Attempt."""

    def __init__(self, member: dict[str, str] | None = None) -> None:
        self.issuer = LabIssuer(KEY, issuer=DEFAULT_ISSUER, azp=DEFAULT_AZP)
        self.member = member or MEMBER
        self.override: dict[str, str] = {}
        self.issued: list[str] = []

    async def member_token(self, attempt_id: str) -> MemberCredential:
        token = self.override.get(attempt_id)
        if token is None:
            token, _ = self.issuer.issue(self.member["id"], self.member["site_username"], 600)
        self.issued.append(token)
        return MemberCredential(token)

    def forged(self, **changes: Any) -> str:
        """A token signed with the lab key but with changed claims/header."""
        now = int(time.time())
        claims = {
            "iss": DEFAULT_ISSUER,
            "sub": MEMBER["id"],
            "azp": DEFAULT_AZP,
            "typ": "Bearer",
            "scope": "openid site_username",
            "site_username": "alice",
            "sun": "alice",
            "username": "alice",
            "iat": now,
            "nbf": now,
            "exp": now + 600,
        }
        kid = changes.pop("kid", self.issuer.kid)
        claims.update(changes)
        return jwt.encode(claims, self.issuer._key, algorithm="RS256", headers={"kid": kid})


@dataclass
class RecordingGrants:
    """Repository grants kept in memory; tokens are recognisable so tests can search for them."""

    issued: list[RepositoryGrant] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    async def issue(self, attempt_id: str, direction: str) -> RepositoryGrant:
        grant = RepositoryGrant(
            grant_id=f"g-{uuid.uuid4().hex[:12]}",
            username=f"grant-{direction}",
            token=f"prt_{uuid.uuid4().hex}",
            repository_url="file:///unused",
            expires_at="",
        )
        self.issued.append(grant)
        return grant

    async def release(self, grant_id: str) -> None:
        self.released.append(grant_id)


def settings(state_dir: Path, **changes: Any) -> SlurmSettings:
    env = {
        "SLURM_REST_URL": REST_URL,
        "SLURM_REST_ALLOW_INSECURE_LOOPBACK": "true",
        "SLURM_JWT_ISSUER": DEFAULT_ISSUER,
        "SLURM_JWT_AUTHORIZED_PARTY": DEFAULT_AZP,
        "SLURM_JWKS_URL": f"file:{JWKS}",
        "SLURM_WORKSPACE_ROOT": str(WORKSPACES),
        "RUNTIME_STATE_DIRECTORY": str(state_dir),
        "SLURM_STAGING_MEMORY_MIB": "128",
    }
    env.update({k: str(v) for k, v in changes.items()})
    return SlurmSettings.from_env(env)


def make_executor(
    state_dir: Path,
    tokens,
    grants,
    *,
    fault=None,
    rest_url: str = REST_URL,
    env: dict[str, Any] | None = None,
) -> SlurmExecutor:
    s = settings(state_dir, **(env or {}))
    verifier = MemberTokenVerifier(
        issuer=s.jwt_issuer,
        authorized_party=s.jwt_authorized_party,
        keys=JwksCache(FileJwksSource(JWKS)),
    )
    rest = SlurmRest(rest_url, verifier, allow_insecure_loopback=True, list_cache_seconds=0.5)
    journal = SlurmJournal(state_dir / "jobs.sqlite")
    kwargs = {"fault": fault} if fault else {}
    return SlurmExecutor(
        settings=s, journal=journal, rest=rest, tokens=tokens, grants=grants, **kwargs
    )


def make_repository(
    files: dict[str, str] | None = None,
    lfs: dict[str, bytes] | None = None,
    root: Path = REPOS,
) -> tuple[str, str, Path]:
    """:func:`tests.lab_repos.make_repository` under the Slurm lab's ``REPOS``."""
    return lab_repos.make_repository(files, lfs, root=root)


def payload(
    url: str, commit: str, command: Any, member: dict[str, str] | None = None, **resources: Any
) -> dict[str, Any]:
    res = {"cpus": 1, "memoryMiB": 128, "gpus": 0, "wallTimeSeconds": 600, "nodes": 1}
    res.update(resources)
    return queued_batch_payload("slurm-job", url, commit, command, member, resources=res)


class Driver:
    """Sends numbered commands for one Attempt to an executor."""

    def __init__(self, attempt_id: str | None = None, run_id: str | None = None) -> None:
        self.attempt_id = attempt_id or f"a-{uuid.uuid4().hex[:12]}"
        self.run_id = run_id or f"r-{uuid.uuid4().hex[:12]}"
        self.sequence = 0

    def command(
        self, kind: str, payload: dict[str, Any] | None = None, command_id: str | None = None
    ) -> SiteCommand:
        self.sequence += 1
        return SiteCommand(
            sequence=self.sequence,
            command_id=command_id or f"c-{uuid.uuid4().hex}",
            kind=kind,
            site_id="lab-slurm",
            environment="slurm",
            run_id=self.run_id,
            attempt_id=self.attempt_id,
            attempt_number=1,
            payload=payload or {},
        )


async def observe_until(
    executor: SlurmExecutor, driver: Driver, phases: set[str], timeout: float = 120.0
) -> CommandResult:
    """Observe every 0.5 s until the phase is one of ``phases`` (deferrals are retried)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = await executor.observe(driver.command("observe"))
            if last.observation and last.observation["phase"] in phases:
                return last
        except Deferred:
            pass
        await asyncio.sleep(0.5)
    raise AssertionError(f"phase not in {phases} after {timeout}s: {last}")


def sacct_jobs(name_prefix: str) -> list[dict[str, str]]:
    """Jobs in accounting whose name starts with ``name_prefix`` (all users)."""
    out = subprocess.run(
        [
            "sacct",
            "-a",
            "-X",
            "-n",
            "-P",
            "-S",
            "now-1days",
            "-o",
            "jobid,jobname%200,partition,user,account,state,comment%300",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 7 and parts[1].startswith(name_prefix):
            rows.append(
                dict(
                    zip(
                        ("job_id", "name", "partition", "user", "account", "state", "comment"),
                        parts,
                        strict=False,
                    )
                )
            )
    return rows


def squeue_jobs(name_prefix: str) -> list[dict[str, str]]:
    """Jobs slurmctld still holds whose name starts with ``name_prefix``."""
    out = subprocess.run(
        ["squeue", "-a", "-h", "-o", "%i|%j|%T|%r|%E"], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[1].startswith(name_prefix):
            rows.append(
                dict(zip(("job_id", "name", "state", "reason", "dependency"), parts, strict=False))
            )
    return rows


def dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
