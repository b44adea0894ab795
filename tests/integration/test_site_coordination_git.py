"""The lab Git server by real ``git`` over TLS (seed 001, Repository grants):
per-grant tokens work only for their repository and direction, and stop working
after revocation and after expiry."""

from __future__ import annotations

import asyncio
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import update

from site_coordination.adaptors.tables import lab_git_tokens
from tests.integration.site_coordination_support import (
    OPERATOR_TOKEN,
    prepare_payload,
)

ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$LAB_GIT_USER" ;;
  *) printf '%s\\n' "$LAB_GIT_PASS" ;;
esac
"""


class Git:
    """Runs real git asynchronously (the edge runs in this event loop); credentials go
    through GIT_ASKPASS and the environment, never the command line."""

    def __init__(self, edge, tmp: Path) -> None:
        self.edge = edge
        self.tmp = tmp
        askpass = tmp / "askpass.sh"
        askpass.write_text(ASKPASS)
        askpass.chmod(askpass.stat().st_mode | stat.S_IXUSR)
        self.base_env = {
            "PATH": os.environ["PATH"], "HOME": str(tmp), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": str(askpass),
            "GIT_SSL_CAINFO": str(edge.ca_file),
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
        }

    async def run(self, *args: str, user: str = "", password: str = "", cwd: Path | None = None
                  ) -> tuple[int, str]:
        env = {**self.base_env, "LAB_GIT_USER": user, "LAB_GIT_PASS": password}
        proc = await asyncio.create_subprocess_exec(
            "git", *args, cwd=cwd or self.tmp, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await proc.communicate()
        return proc.returncode, out.decode(errors="replace")

    def url(self, repo: str) -> str:
        return f"{self.edge.url}/git/{repo}"


async def _seed_repository(edge, git: Git, name: str) -> None:
    client = edge.client()
    r = await client.put(f"/git-admin/repositories/{name}", auth=("operator", OPERATOR_TOKEN))
    assert r.status_code == 201, r.text
    work = git.tmp / f"seed-{name}"
    assert (await git.run("init", "-q", "-b", "main", str(work)))[0] == 0
    (work / "README").write_text(f"{name}\n")
    assert (await git.run("add", "README", cwd=work))[0] == 0
    assert (await git.run("commit", "-q", "-m", "seed", cwd=work))[0] == 0
    code, out = await git.run("push", git.url(name), "main", cwd=work,
                              user="operator", password=OPERATOR_TOKEN)
    assert code == 0, out


async def _grant(client, direction: str) -> dict:
    r = await client.post("/v1/attempts/att-1/repository-grants", json={"direction": direction})
    assert r.status_code == 201, r.text
    return r.json()


async def test_repository_tokens_by_real_git(edge, tmp_path):
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    await _seed_repository(edge, git, "other.git")
    await edge.append("prepare", payload=prepare_payload(git.url("demo.git")))
    client = edge.client(await edge.grant())
    await client.get("/v1/commands/next")

    # Anonymous and the wrong operator password are refused.
    code, _ = await git.run("clone", "-q", git.url("demo.git"), "anon")
    assert code != 0 and not (tmp_path / "anon" / "README").exists()
    code, _ = await git.run("clone", "-q", git.url("demo.git"), "badop", user="operator",
                            password="wrong")
    assert code != 0

    stage_in = await _grant(client, "stage-in")
    creds = {"user": stage_in["username"], "password": stage_in["token"]}
    code, out = await git.run("clone", "-q", stage_in["repository_url"], "in", **creds)
    assert code == 0, out
    assert (tmp_path / "in" / "README").read_text() == "demo.git\n"
    # Wrong direction: a stage-in identity cannot push.
    (tmp_path / "in" / "out.txt").write_text("result\n")
    await git.run("add", "out.txt", cwd=tmp_path / "in")
    await git.run("commit", "-q", "-m", "out", cwd=tmp_path / "in")
    code, out = await git.run("push", "origin", "main", cwd=tmp_path / "in", **creds)
    assert code != 0 and "403" in out
    # Wrong repository.
    code, out = await git.run("clone", "-q", git.url("other.git"), "wrong-in", **creds)
    assert code != 0 and "403" in out

    stage_out = await _grant(client, "stage-out")
    out_creds = {"user": stage_out["username"], "password": stage_out["token"]}
    code, out = await git.run("push", git.url("demo.git"), "main", cwd=tmp_path / "in", **out_creds)
    assert code == 0, out
    code, out = await git.run("clone", "-q", git.url("other.git"), "wrong-out", **out_creds)
    assert code != 0 and "403" in out
    code, out = await git.run("push", git.url("other.git"), "main", cwd=tmp_path / "in",
                              **out_creds)
    assert code != 0

    # After revocation.
    r = await client.delete(f"/v1/repository-grants/{stage_out['grant_id']}")
    assert r.status_code == 204
    assert (await client.delete(f"/v1/repository-grants/{stage_out['grant_id']}")).status_code == 204
    code, out = await git.run("clone", "-q", git.url("demo.git"), "revoked", **out_creds)
    assert code != 0 and "Authentication failed" in out

    # After expiry (moved into the past on the database clock's terms).
    code, _ = await git.run("clone", "-q", git.url("demo.git"), "before-expiry", **creds)
    assert code == 0
    async with edge.engine.begin() as conn:
        await conn.execute(update(lab_git_tokens).where(
            lab_git_tokens.c.username == stage_in["username"]).values(
            expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    code, out = await git.run("clone", "-q", git.url("demo.git"), "expired", **creds)
    assert code != 0 and "Authentication failed" in out
    # The token was pushed by stage-out before revocation: the output commit is there.
    code, out = await git.run("clone", "-q", git.url("demo.git"), "final", user="operator",
                              password=OPERATOR_TOKEN)
    assert code == 0 and (tmp_path / "final" / "out.txt").exists()


async def test_repository_grants_of_another_stream_cannot_be_revoked(edge):
    await edge.append("prepare", payload=prepare_payload(edge.url + "/git/demo.git"))
    mine = edge.client(await edge.grant())
    issued = await _grant(mine, "stage-in")
    other = edge.client(await edge.grant(environment="k8s"))
    r = await other.delete(f"/v1/repository-grants/{issued['grant_id']}")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "grant-wrong-environment")
    r = await mine.delete("/v1/repository-grants/rg-unknown")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "repository-grant-not-found")


async def test_backends_that_answered_are_left_to_exit_not_killed(edge, tmp_path, caplog):
    # Killing a finished `git http-backend` reaped it behind asyncio's child watcher
    # ("Unknown child process pid …", twice per fetch) and could signal a recycled pid.
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    caplog.set_level("WARNING", logger="asyncio")
    for n in range(6):
        code, out = await git.run("clone", "-q", git.url("demo.git"), f"c{n}", user="operator",
                                  password=OPERATOR_TOKEN)
        assert code == 0, out
    await asyncio.sleep(0.5)  # let every watcher thread report its child
    assert not [r for r in caplog.records if "Unknown child process" in r.getMessage()]


async def test_several_grants_are_revoked_in_one_request_with_an_answer_each(edge, tmp_path):
    """``POST /v1/repository-grants/revocations`` (ADR 0014): the local Runtime's batch."""
    git = Git(edge, tmp_path)
    await _seed_repository(edge, git, "demo.git")
    await edge.append("prepare", payload=prepare_payload(git.url("demo.git")))
    mine = edge.client(await edge.grant())
    await mine.get("/v1/commands/next")
    stage_in, stage_out = await _grant(mine, "stage-in"), await _grant(mine, "stage-out")
    other = edge.client(await edge.grant(environment="k8s"))

    ids = [stage_in["grant_id"], "rg-unknown", stage_out["grant_id"]]
    r = await other.post("/v1/repository-grants/revocations", json={"grant_ids": ids})
    assert r.status_code == 200
    assert r.json()["results"] == {
        stage_in["grant_id"]: "forbidden", "rg-unknown": "not-found",
        stage_out["grant_id"]: "forbidden",
    }
    creds = {"user": stage_in["username"], "password": stage_in["token"]}
    assert (await git.run("clone", "-q", git.url("demo.git"), "still", **creds))[0] == 0

    r = await mine.post("/v1/repository-grants/revocations", json={"grant_ids": ids})
    assert r.json()["results"] == {
        stage_in["grant_id"]: "revoked", "rg-unknown": "not-found",
        stage_out["grant_id"]: "revoked",
    }
    for grant in (stage_in, stage_out):
        code, out = await git.run("clone", "-q", git.url("demo.git"), f"after-{grant['direction']}",
                                  user=grant["username"], password=grant["token"])
        assert code != 0 and "Authentication failed" in out
    again = await mine.post("/v1/repository-grants/revocations", json={"grant_ids": ids[:1]})
    assert again.json()["results"] == {stage_in["grant_id"]: "revoked"}  # idempotent

    # Bounded input: nothing, too many or a malformed id is refused and revokes nothing.
    for body in ({"grant_ids": []}, {"grant_ids": [f"rg-{i}" for i in range(101)]},
                 {"grant_ids": ["x" * 129]}, {"grant_ids": "rg-1"}):
        r = await mine.post("/v1/repository-grants/revocations", json=body)
        assert r.status_code == 422, (body, r.text)
