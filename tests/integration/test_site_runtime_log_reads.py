"""read-log under a viewer read permit: the local executor through the real worker and
the real HTTPS Site edge (docs/site-commands.md, read-log)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from site_coordination.adaptors.tables import read_permits
from tests.integration.site_runtime_support import batch_payload, new_runtime

pytestmark = pytest.mark.integration

LOG = "".join(f"step {i}\n" for i in range(100)) + "the data file is missing\n"


@pytest.fixture
async def prepared(edge, tmp_path):
    """A Runtime with Attempt att-1 prepared and a compute log in its workspace."""
    rt = await new_runtime(edge, tmp_path)
    payload = batch_payload("https://127.0.0.1:1/git/demo.git", "0" * 40, {"argv": ["true"]})
    done = await rt.handle(await edge.append("prepare", payload=payload))
    assert done["outcome"] == "succeeded", done
    (rt.state / "workspaces" / "att-1" / "logs" / "compute.log").write_text(LOG)
    yield rt
    await rt.close()


async def read(
    edge, rt, viewer: str | None, max_bytes: int = 4096, stage: str = "compute", **extra
):
    payload = {"stage": stage, "max_bytes": max_bytes, "read_id": "r-1", **extra}
    if viewer is not None:
        payload["viewer"] = viewer
    return await rt.handle(await edge.append("read-log", payload=payload))


async def test_a_permitted_viewer_reads_the_tail(edge, prepared):
    got = await read(edge, prepared, "m-alice")
    assert got["outcome"] == "succeeded"
    size = len(LOG)
    assert got["observation"]["log"] == {
        "stage": "compute",
        "text": LOG,
        "truncated": False,
        "offset": 0,
        "next_offset": size,
        "size": size,
    }
    tail = await read(edge, prepared, "m-alice", max_bytes=25)
    assert tail["observation"]["log"]["text"] == "the data file is missing\n"
    assert tail["observation"]["log"]["truncated"] is True
    # Each read asked the edge for its own permit, for the viewer and the exact path.
    async with edge.engine.connect() as conn:
        rows = (
            await conn.execute(
                select(read_permits.c.viewer, read_permits.c.path, read_permits.c.read_kind)
            )
        ).all()
    assert [tuple(r) for r in rows] == [("m-alice", "logs/compute.log", "logs")] * 2


async def test_a_viewer_without_permission_gets_no_text(edge, prepared):
    refused = await read(edge, prepared, "m-mallory")  # not a member of the Project
    assert refused["outcome"] == "refused" and refused["code"] == "authorisation-refused"
    assert "viewer-not-authorised" in refused["message"]
    assert refused.get("observation") is None

    # runs.read is asked now: taking it from m-bob refuses his next read.
    assert (await read(edge, prepared, "m-bob"))["outcome"] == "succeeded"
    text = edge.governance_file.read_text()
    edge.governance_file.write_text(
        text.replace("m-bob: [runs.read, pipelines.read]", "m-bob: [pipelines.read]")
    )
    again = await read(edge, prepared, "m-bob")
    assert again["outcome"] == "refused" and again["code"] == "authorisation-refused"

    missing = await read(edge, prepared, None)
    assert (missing["outcome"], missing["code"]) == ("refused", "invalid-request")
    too_big = await read(edge, prepared, "m-alice", max_bytes=5 * 1024 * 1024 + 1)
    assert (too_big["outcome"], too_big["code"]) == ("refused", "invalid-request")
    async with edge.engine.connect() as conn:
        permits = (await conn.execute(select(func.count()).select_from(read_permits))).scalar()
    assert permits == 1  # only m-bob's first read got a permit


async def test_a_read_from_an_offset_returns_what_followed(edge, prepared):
    log = prepared.state / "workspaces" / "att-1" / "logs" / "compute.log"
    first = (await read(edge, prepared, "m-alice", max_bytes=10, offset=0))["observation"]["log"]
    assert (first["text"], first["offset"], first["next_offset"]) == ("step 0\nste", 0, 10)
    assert first["truncated"] is True  # more follows
    with log.open("a") as f:
        f.write("retrying\n")
    rest = await read(edge, prepared, "m-alice", offset=len(LOG))
    assert rest["observation"]["log"]["text"] == "retrying\n"
    assert rest["observation"]["log"]["next_offset"] == len(LOG) + len("retrying\n")
    bad = await read(edge, prepared, "m-alice", offset=-5)
    assert (bad["outcome"], bad["code"]) == ("refused", "invalid-request")
