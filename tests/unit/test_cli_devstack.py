"""The dev stack's supervisor (``metallo dev up``): prefixed logs, state file,
restart of a child that dies, bounded restarts, clean stop — with real child
processes (tests/unit/cli_sleeper.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from metallo.devstack import supervisor as sup
from metallo.devstack.components import Component, Options, plan
from metallo.devstack.layout import Layout
from tests.unit.devstack_support import with_broker_users


def state(layout: Layout) -> dict:
    return json.loads(layout.state_file.read_text())


async def until(predicate, seconds: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


@pytest.fixture
def layout(tmp_path, monkeypatch):
    monkeypatch.setattr(sup, "STOP_GRACE_SECONDS", 5.0)
    lay = Layout(tmp_path / "dev")
    lay.make()
    return lay


def sleeper(name: str, *args: str) -> Component:
    return Component(name, "tests.unit.cli_sleeper", list(args))


async def test_runs_restarts_and_stops_children(layout):
    supervisor = sup.Supervisor(layout, Options(executor="local"),
                                [sleeper("first"), sleeper("second")], ["missing_one"],
                                {"grant_id": "cg-test"}, echo=False)
    task = asyncio.create_task(supervisor.run())
    await until(lambda: layout.state_file.exists() and state(layout)["status"] == "ready")
    s = state(layout)
    assert s["pid"] == os.getpid() and s["missing"] == ["missing_one"] and s["grant_id"] == "cg-test"
    first_pid = s["components"]["first"]["pid"]
    assert all(c["state"] == "ready" for c in s["components"].values())

    os.kill(first_pid, signal.SIGKILL)  # a crash: restarted after a pause
    await until(lambda: state(layout)["components"]["first"]["restarts"] == 1
                and state(layout)["components"]["first"]["state"] == "ready"
                and state(layout)["components"]["first"]["pid"] not in (None, first_pid))
    second_pid = state(layout)["components"]["second"]["pid"]

    supervisor.stopping.set()
    assert await asyncio.wait_for(task, 30) == 0
    final = state(layout)
    assert final["status"] == "stopped"
    assert all(c["state"] == "stopped" and c["pid"] is None for c in final["components"].values())
    assert not os.path.exists(f"/proc/{second_pid}")  # stopped and reaped
    log = layout.stack_log.read_text().splitlines()
    assert any(line.startswith("first ") and line.endswith("| sleeper up") for line in log)
    assert any("first exited with -9; restarting" in line for line in log)
    assert (layout.logs / "second.log").read_text().startswith("sleeper up")


async def test_a_child_that_dies_at_start_fails_the_stack(layout):
    supervisor = sup.Supervisor(layout, Options(executor="local"), [sleeper("flaky", "3")], [],
                                {}, echo=False)
    result = await asyncio.wait_for(supervisor.run(), 60)
    assert result == 1  # never became ready
    assert state(layout)["status"] == "stopped"
    assert "exiting with 3" in (layout.logs / "flaky.log").read_text()


async def test_an_exit_a_restart_cannot_cure_leaves_the_child_stopped_at_once(layout):
    # The Site Runtime exits 3 on a journal mismatch: restarting it would crash-loop.
    runtime = Component("runtime", "tests.unit.cli_sleeper", ["3"], final_exits=frozenset({3}))
    supervisor = sup.Supervisor(layout, Options(executor="local"), [runtime], [], {}, echo=False)
    result = await asyncio.wait_for(supervisor.run(), 20)
    assert result == 1
    log = layout.stack_log.read_text()
    assert "runtime exited with 3, which a restart does not cure: left stopped" in log
    assert "restarting" not in log
    # Why it is not ready is its exit, not a readiness wait that never ran out.
    assert "runtime exited with code 3 before it became ready" in log
    assert "did not become ready within" not in log


def test_plan_orders_components_and_configures_the_runtime(tmp_path):
    layout = with_broker_users(Layout(tmp_path))
    components, missing = plan(layout, Options(executor="slurm", edge_port=9443))
    names = [c.name for c in components] + missing
    assert names[0] == "site_coordination" and "site_runtime" in names
    runtime = next((c for c in components if c.name == "site_runtime"), None)
    if runtime is not None:
        assert runtime.env["SITE_API_URL"] == "https://127.0.0.1:9443"
        assert runtime.env["RUNTIME_EXECUTOR"] == "slurm"
        assert runtime.env["SITE_API_CREDENTIAL_FILE"].endswith("secrets/runtime-grant")
        assert runtime.env["SLURM_JWKS_URL"].startswith("file:")
        assert not any("psb_" in v for v in runtime.env.values())  # never the secret itself
    edge = components[0]
    # Each service connects as its own RabbitMQ user, never guest.
    assert edge.env["METALLO_AMQP_URL"].startswith("amqp://metallo-site-coordination:")
    assert all("guest" not in c.env.get("METALLO_AMQP_URL", "") for c in components)
    assert edge.env["METALLO_OIDC_ISSUER"] == "https://127.0.0.1:9443/lab-issuer"
    assert edge.env["METALLO_SITE_EDGE_PORT"] == "9443"
    assert edge.ready == "https:https://127.0.0.1:9443/healthz"


def test_up_never_silently_keeps_another_executor(monkeypatch):
    from metallo.devstack import control

    live = {"pid": 4242, "executor": "local", "edge_url": "https://127.0.0.1:8443"}
    monkeypatch.setattr(control, "running_supervisor", lambda layout: live)
    said: list[str] = []
    assert control.up("auto", say=said.append) is live
    assert control.up("local", say=said.append) is live
    assert "already runs" in said[0]
    with pytest.raises(control.StackError) as refused:
        control.up("slurm", say=said.append)
    assert "metallo dev down" in str(refused.value) and "--executor slurm" in str(refused.value)


def test_a_component_left_stopped_makes_the_stack_degraded(monkeypatch):
    # The supervisor leaves a component stopped after 5 crashes in 120 s: `dev status`
    # and `dev up` must not call that stack ready.
    import json

    from metallo.devstack import control
    from tests.unit.cli_support import run_cli

    live = {"pid": 4242, "status": "ready", "executor": "local",
            "edge_url": "https://127.0.0.1:8443", "components": {
                "execution_core": {"pid": 11, "state": "ready", "restarts": 0, "log": "ec.log"},
                "site_runtime": {"pid": None, "state": "failed", "restarts": 5, "log": "rt.log"}}}
    monkeypatch.setattr(control, "running_supervisor", lambda layout: live)
    shown = run_cli("dev", "status")
    assert shown.code == 1
    assert "dev stack degraded" in shown.stdout
    assert "site_runtime" in shown.stderr and "metallo dev down" in shown.stderr
    as_json = run_cli("dev", "status", "--output", "json")
    assert as_json.code == 1
    document = json.loads(as_json.stdout)  # one document: status and the error together
    assert document["status"] == "degraded" and document["error"]["code"] == "stack-degraded"
    assert "metallo dev down" in as_json.stderr
    with pytest.raises(control.StackError) as refused:
        control.up("auto", say=lambda text: None)
    assert "site_runtime" in str(refused.value) and "metallo dev down" in str(refused.value)

    live["components"]["site_runtime"]["state"] = "ready"
    assert run_cli("dev", "status").code == 0


def test_an_unknown_executor_is_named_even_while_the_stack_runs(monkeypatch):
    from metallo.devstack import control

    live = {"pid": 4242, "executor": "local", "edge_url": "https://127.0.0.1:8443"}
    monkeypatch.setattr(control, "running_supervisor", lambda layout: live)
    with pytest.raises(control.StackError) as refused:
        control.up("bogus", say=lambda text: None)
    assert "unknown executor 'bogus'" in str(refused.value) and refused.value.usage


async def test_hooks_run_around_their_component_in_order(layout):
    """The Runtime's grant is asked for once the components before it are ready and
    revoked after it stopped, while the components before it still run."""
    seen: list[tuple[str, dict]] = []

    def running() -> dict:
        return {n: c["state"] for n, c in state(layout)["components"].items()}

    async def before() -> dict:
        seen.append(("before", running()))
        return {"grant_id": "cg-hooked"}

    async def after() -> dict:
        seen.append(("after", running()))
        return {"grant_revoked": True}

    supervisor = sup.Supervisor(layout, Options(executor="local"),
                                [sleeper("first"), sleeper("second")], [], {}, echo=False,
                                before_start={"second": before}, after_stop={"second": after})
    task = asyncio.create_task(supervisor.run())
    await until(lambda: layout.state_file.exists() and state(layout)["status"] == "ready")
    assert state(layout)["grant_id"] == "cg-hooked"
    supervisor.stopping.set()
    assert await asyncio.wait_for(task, 30) == 0
    assert seen == [("before", {"first": "ready", "second": "starting"}),
                    ("after", {"first": "ready", "second": "stopped"})]
    assert state(layout)["grant_revoked"] is True


async def test_a_failing_hook_stops_the_start(layout):
    async def refused() -> dict:
        raise RuntimeError("permission-denied: m-operator lacks sites.grants")

    supervisor = sup.Supervisor(layout, Options(executor="local"),
                                [sleeper("first"), sleeper("second")], [], {}, echo=False,
                                before_start={"second": refused})
    assert await asyncio.wait_for(supervisor.run(), 30) == 1
    final = state(layout)
    assert final["status"] == "stopped" and final["components"]["second"]["pid"] is None
    assert "before starting second: RuntimeError: permission-denied" in layout.stack_log.read_text()


async def test_a_service_is_ready_once_its_queries_queue_is_consumed(layout, amqp_url, namespace):
    # A durable queue outlives the stack that declared it: only a consumer on it says the
    # service serves. A command server consumes its queries queue last.
    import aio_pika

    components, _missing = plan(with_broker_users(layout), Options(executor="local"))
    served = {c.name: c.ready for c in components if c.ready.startswith("queue:")}
    assert served, "no queue-served service in this checkout"
    assert all(ready == f"queue:{name}.queries" for name, ready in served.items())

    component = Component("workload_portfolio", "workload_portfolio", [],
                          ready="queue:workload_portfolio.queries")
    supervisor = sup.Supervisor(layout, Options(executor="local", amqp_url=amqp_url,
                                                topology_prefix=namespace),
                                [component], [], {}, echo=False)
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel()
        assert await supervisor._ready(component) is False  # no queue yet
        queue = await channel.declare_queue(f"{namespace}workload_portfolio.queries",
                                            auto_delete=True)
        assert await supervisor._ready(component) is False  # left over, nobody consumes
        async def ignore(_message) -> None:
            return None

        tag = await queue.consume(ignore)
        assert await supervisor._ready(component) is True
        await queue.cancel(tag)
    finally:
        await connection.close()
