"""A ``start-array`` command on a Site's ordered stream (ADR 0032; docs/site-commands.md):
appended after its index-0 child's prepare, validated and bounded, delivered like any
command, its result (with ``array_tasks``) recorded once; each task's Attempt then counts
as submitted for its stage-out grant past the deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from site_coordination.domain.errors import Invalid
from site_coordination.domain.streams import MAX_ARRAY_TASKS, array_task_attempts
from tests.integration.site_coordination_support import prepare_payload, result_for


def array_payload(n: int, first: tuple[str, str] = ("run-0", "att-0")) -> dict:
    tasks = [{"index": i, "run_id": f"run-{i}", "attempt_id": f"att-{i}", "attempt_number": 1}
             for i in range(n)]
    tasks[0].update(run_id=first[0], attempt_id=first[1])
    return {"array": {"group_id": "2c4e6a8b-3333-5444-9555-a66677778888", "max_active": 2, "tasks": tasks}}


async def test_a_start_array_is_delivered_and_its_tasks_count_as_submitted(edge):
    past = datetime.now(UTC) - timedelta(minutes=5)
    url = edge.url + "/git/demo.git"
    for i in range(3):
        await edge.append("prepare", run_id=f"run-{i}", attempt_id=f"att-{i}",
                          payload=prepare_payload(url, deadline=past))
    client = edge.client(await edge.grant())
    for _ in range(3):
        command = (await client.get("/v1/commands/next")).json()
        assert (await client.post(f"/v1/commands/{command['sequence']}/result",
                                  json=result_for(command))).status_code == 200
    r = await client.post("/v1/attempts/att-2/repository-grants", json={"direction": "stage-out"})
    assert (r.status_code, r.json()["error"]["reason"]) == (403, "attempt-not-submitted")
    await edge.append("start-array", run_id="run-0", attempt_id="att-0", payload=array_payload(3))
    command = (await client.get("/v1/commands/next")).json()
    assert command["kind"] == "start-array" and len(command["payload"]["array"]["tasks"]) == 3
    # Delivered: task 2's Attempt may now push past its deadline, as a started one may.
    r = await client.post("/v1/attempts/att-2/repository-grants", json={"direction": "stage-out"})
    assert r.status_code == 201, r.text
    answer = result_for(command, phase="queued")
    answer["observation"]["array_tasks"] = [
        {"index": i, "attempt_id": f"att-{i}", "native_jobs": [{"stage": "compute", "job_id": f"7_{i}"}]}
        for i in range(3)]
    r = await client.post(f"/v1/commands/{command['sequence']}/result", json=answer)
    assert r.json() == {"recorded": True}


@pytest.mark.parametrize("payload, message", [
    ({"array": {"tasks": []}}, "1..1000 tasks"),
    (array_payload(MAX_ARRAY_TASKS + 1), "1..1000 tasks"),
    ({"array": {"tasks": [{"index": 1, "run_id": "run-0", "attempt_id": "att-0"}]}}, "task 0 is not index 0"),
    (array_payload(2, first=("run-9", "att-9")), "task 0 must be the command's own Attempt"),
    ({"array": {"tasks": [{"index": 0, "run_id": "run-0", "attempt_id": "att-0"},
                          {"index": 1, "run_id": "run-1", "attempt_id": "att-0"}]}}, "an Attempt twice"),
])
async def test_a_start_array_payload_out_of_shape_is_refused(edge, payload, message):
    with pytest.raises(Invalid) as refused:
        await edge.append("start-array", run_id="run-0", attempt_id="att-0", payload=payload)
    assert refused.value.code == "invalid-argument" and message in str(refused.value)


def test_a_thousand_tasks_fit_the_payload_bound():
    from site_coordination.domain.canonical import canonical_json
    from site_coordination.domain.streams import MAX_PAYLOAD_BYTES

    payload = array_payload(MAX_ARRAY_TASKS, first=("0" * 36, "1" * 36))
    for t in payload["array"]["tasks"][1:]:
        t.update(run_id=f"{t['index']:036d}", attempt_id=f"{t['index']:036x}")
    assert len(canonical_json(payload).encode()) <= MAX_PAYLOAD_BYTES
    assert len(array_task_attempts(payload, "0" * 36, "1" * 36)) == MAX_ARRAY_TASKS
