"""Array tasks that start after their first grant's lifetime still stage in and out
(docs/site-runtime.md, Arrays: grant renewal; ``adaptors/slurm/array_grant_renewal.py``).

Grants live 30 s here (the edge's ``METALLO_REPOSITORY_GRANT_SECONDS``, shortened) and
the HTTPS Git server refuses an expired or revoked one. Three children run one at a
time (``max_active`` 1) and each compute sleeps 20 s, so the second and third
stage-out tasks start well after the grants written at the release have expired:
without renewal their pushes are refused. With it every child succeeds with its own
pushed commit, and no token is left on disk once the group has ended.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from site_runtime.application.ports import Deferred
from tests.slurm.git_grants import ExpiringGrants, GrantedGitServer
from tests.slurm.lab import REPOS, WORKSPACES, Driver, git, make_executor, make_repository, payload
from tests.slurm.test_slurm_array_start import COMMAND, TERMINAL, cleanup, start_array

pytestmark = pytest.mark.slurm
LIFETIME = 30.0
CHILDREN = 3


async def observe_all(executor, drivers, timeout: float = 300.0):
    """Observe every child once a second (as Execution Core keeps observing each) until
    all have ended; their final results in order."""
    finals: dict[int, object] = {}
    end = time.monotonic() + timeout
    while len(finals) < len(drivers) and time.monotonic() < end:
        for i, drv in enumerate(drivers):
            if i in finals:
                continue
            try:
                result = await executor.observe(drv.command("observe"))
            except Deferred:
                continue
            if result.observation and result.observation["phase"] in TERMINAL:
                finals[i] = result
        await asyncio.sleep(1.0)
    assert len(finals) == len(drivers), f"not ended after {timeout}s: {sorted(finals)}"
    return [finals[i] for i in range(len(drivers))]


def files_under(*roots):
    for root in roots:
        if root.is_file():
            yield root
        elif root.is_dir():
            yield from (p for p in root.rglob("*") if p.is_file())


async def test_tasks_starting_after_the_first_grants_expired_still_push_their_commits(
    slurm_lab, tmp_path, tokens
):
    grants = ExpiringGrants(LIFETIME)
    with GrantedGitServer(REPOS, grants) as server:
        state = tmp_path / "state"
        executor = make_executor(state, tokens, grants, env={"REPOSITORY_CA_FILE": server.ca_file})
        _url, commit, bare = make_repository({"README.md": "lab\n"})
        drivers = []
        for i in range(CHILDREN):
            drv = Driver()
            body = payload(server.url(bare), commit, COMMAND)
            body["spec"]["parameters"] = {"item": str(i)}
            body["spec"]["runtime"]["environment"] = {"SLEEP": "20"}
            body["repository"]["output_branch"] = f"out-{i}"
            prepared = await executor.prepare(drv.command("prepare", body))
            assert prepared.outcome == "succeeded", prepared
            drivers.append(drv)
        group = str(uuid.uuid4())
        try:
            released_at = time.time()
            started = await executor.start_array(start_array(drivers, group, max_active=1))
            assert started.outcome == "succeeded", started
            finals = await observe_all(executor, drivers)

            for i, final in enumerate(finals):
                o = final.observation
                assert o["phase"] == "succeeded", (i, o, server.refused)
                pushed = o["output_commit"]
                assert git("-C", str(bare), "rev-parse", f"refs/heads/out-{i}") == pushed
                assert git("-C", str(bare), "show", f"{pushed}:out-{i}.txt") == f"{i} alice"
                assert git("-C", str(bare), "rev-parse", f"{pushed}^") == commit
            # The later pushes used grants renewed after the first ones had expired.
            late = [g for g in server.pushes if grants.issued_at[g] > released_at + LIFETIME]
            assert len(late) >= CHILDREN - 1, (server.pushes, grants.issued_at)
            assert len(grants.issued) > 2 * CHILDREN

            # Every grant issued is released (superseded ones too); no token on disk.
            assert sorted(set(grants.released)) == sorted(g.grant_id for g in grants.issued)
            assert not (WORKSPACES / f"metallo-{group}.material").exists()
            secrets = [g.token.encode() for g in grants.issued]
            kept = list(files_under(state, *WORKSPACES.glob(f"metallo-{group}*")))
            kept += [p for d in drivers for p in files_under(WORKSPACES / d.attempt_id)]
            assert kept, "the journal and the task logs are on disk"
            for path in kept:
                data = path.read_bytes()
                assert not any(s in data for s in secrets), path
        finally:
            await executor.close()
            cleanup(group)
