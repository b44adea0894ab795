"""``metallo dev up --replicas N``: N processes of each service, each with its own
operations endpoint and readiness, the edge replicas sharing one port; one Site Runtime."""

from __future__ import annotations

import pytest

from metallo.devstack.components import SERVICES, Options, plan
from metallo.devstack.layout import Layout
from tests.unit.devstack_support import with_broker_users


def test_two_replicas_of_each_service_and_one_runtime(tmp_path):
    components, _missing = plan(with_broker_users(Layout(tmp_path)),
                                Options(executor="local", replicas=2))
    names = [c.name for c in components]
    assert names == [*SERVICES, *(f"{s}-2" for s in SERVICES), "site_runtime"]
    addresses = [c.env["METALLO_OPS_ADDRESS"] for c in components]
    assert len(set(addresses)) == len(components)
    by_name = {c.name: c for c in components}
    for service in SERVICES:
        first, second = by_name[service], by_name[f"{service}-2"]
        assert (first.module, first.args) == (second.module, second.args)
        assert second.ready == "ops"  # its queue and port are already served by the first
        assert second.env["METALLO_AMQP_URL"] == first.env["METALLO_AMQP_URL"]
    assert by_name["site_coordination"].env["METALLO_SITE_EDGE_REUSE_PORT"] == "1"
    assert by_name["site_coordination-2"].env["METALLO_SITE_EDGE_PORT"] == by_name[
        "site_coordination"].env["METALLO_SITE_EDGE_PORT"]


def test_one_replica_keeps_the_edge_port_exclusive(tmp_path):
    components, _ = plan(with_broker_users(Layout(tmp_path)), Options(executor="local"))
    assert [c.name for c in components] == [*SERVICES, "site_runtime"]
    assert all("METALLO_SITE_EDGE_REUSE_PORT" not in c.env for c in components)


@pytest.mark.parametrize("count", [0, 5])
def test_replicas_out_of_range_are_refused(count):
    with pytest.raises(ValueError, match="replicas must be 1..4"):
        Options(executor="local", replicas=count)


def test_dev_up_refuses_replicas_out_of_range():
    from tests.unit.cli_support import run_cli

    done = run_cli("dev", "up", "--replicas", "9")
    assert done.code != 0
    assert "replicas" in (done.stderr + done.stdout)


async def test_a_second_replica_is_ready_by_its_own_readyz():
    from metallo.devstack.supervisor import ops_ready
    from metallo.operations.readiness import Readiness
    from metallo.operations.server import OpsServer

    async def behind() -> str | None:
        return "database at ['0001'], code at ['0002']"

    ready = OpsServer("ready", Readiness(), address=("127.0.0.1", 0))
    not_ready = OpsServer("behind", Readiness({"migrations": behind}), address=("127.0.0.1", 0))
    await ready.start()
    await not_ready.start()
    try:
        assert await ops_ready(f"http://127.0.0.1:{ready.port}") is True
        assert await ops_ready(f"http://127.0.0.1:{not_ready.port}") is False
    finally:
        await ready.stop()
        await not_ready.stop()
    assert await ops_ready(f"http://127.0.0.1:{ready.port}") is False  # nobody answers
