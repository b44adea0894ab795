"""LaunchRun.parameters: a collection child's values, checked, kept on the Run, planned into its
specification (as ``parameters``, never into the command), part of the launch identity, kept by a rerun."""

from __future__ import annotations

import json

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as pb
from metallo.messaging import Rejected
from tests.integration.execution_core_support import batch_spec, cmd_meta, stack_factory

pytestmark = pytest.mark.integration


@pytest.fixture
async def make_stack(make_database, amqp_url, topology, tmp_path):
    async with stack_factory(make_database, amqp_url, topology, tmp_path) as make:
        yield make


async def test_a_childs_values_reach_the_prepare_payload_and_a_rerun_keeps_them(make_stack):
    stack = await make_stack()
    values = {"lr": "0.01", "seed": "3"}
    labels = {"pipeline_id": "p-1", "collection_id": "c-1", "collection_item": "7", "team": "vision"}
    run_id = await stack.launch(launch_key="pipeline:p-1:step:1:1:item:7", parameters=values, labels=labels)
    run = await stack.terminal(run_id)
    assert dict(run.parameters) == values and run.outcome == "succeeded"
    prepare = next(c for c in stack.site.received if c.run_id == run_id and c.kind == "prepare")
    spec = json.loads(prepare.payload_json)["spec"]
    assert spec["parameters"] == values
    assert spec["command"] == batch_spec()["command"]  # the command is the revision's, untouched

    # The same key with other values is another child: refused, not answered with this Run.
    with pytest.raises(Rejected) as e:
        await stack.launch(launch_key="pipeline:p-1:step:1:1:item:7", parameters={"lr": "0.1", "seed": "3"})
    assert e.value.code == "launch-key-conflict"
    assert await stack.launch(launch_key="pipeline:p-1:step:1:1:item:7", parameters=values,
                              labels=labels) == run_id

    reply = await stack.client.request(pb.RerunRun(metadata=cmd_meta("m-alice"), run_id=run_id), timeout=15)
    again = await stack.terminal(reply.run_id)
    assert dict(again.parameters) == values
    assert dict(again.labels) == {"team": "vision"}  # the rerun is the member's own Run, no child of it


@pytest.mark.parametrize("bad", [{"bad-name": "1"}, {"x": "a\x00b"}, {"x": "v" * 1025},
                                 {f"p{i}": "1" for i in range(17)}, {"lr": "1", "LR": "2"}])
async def test_bad_values_are_refused_before_anything_is_recorded(make_stack, bad):
    stack = await make_stack(parts=frozenset({"server", "relay"}))
    with pytest.raises(Rejected) as e:
        await stack.launch(parameters=bad)
    assert e.value.code == "invalid-argument" and "parameters" in e.value.message
