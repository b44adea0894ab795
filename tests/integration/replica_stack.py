"""A whole Metallo stack as real processes, with several replicas of each service, on
the test's own databases and bus namespace (tests/integration/test_replicas_kill9.py).

Two replicas of each service (``python -m <service>``, each migrating its database at
start, the edge replicas sharing one port through SO_REUSEPORT) and one Site Runtime
with the local executor, each service talking to RabbitMQ as its own principal of the
suite's virtual host (tests/bus.py) inside the test's topology prefix, the Go API's
principal declaring the notifications queue. Nothing here touches the
shared dev stack, its databases or its RabbitMQ users, so the test runs beside it.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from metallo.devstack.layout import Layout, write_secret
from metallo.messaging import Topology

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("site_coordination", "workload_portfolio", "execution_core", "pipeline_coordination")
ARGS = {"site_coordination": ["serve"], "workload_portfolio": ["serve"]}
READY_TIMEOUT_SECONDS = 180.0
#: Development timing, with short leases so that a killed replica's Runs and Pipelines
#: are taken over within seconds (production defaults: 30 s).
TIMING = {
    "METALLO_EXECUTION_CORE_OBSERVE_INTERVAL_SECONDS": "2",
    "METALLO_EXECUTION_CORE_RESULT_RECHECK_SECONDS": "5",
    "METALLO_EXECUTION_CORE_LAUNCH_POLL_SECONDS": "0.2",
    "METALLO_EXECUTION_CORE_SUPERVISOR_POLL_SECONDS": "0.2",
    "METALLO_EXECUTION_CORE_SUPERVISOR_LEASE_SECONDS": "5",
    "METALLO_EXECUTION_CORE_LAUNCH_LEASE_SECONDS": "5",
    "METALLO_PIPELINE_COORDINATION_POLL_SECONDS": "0.2",
    "METALLO_PIPELINE_COORDINATION_LEASE_SECONDS": "5",
    "METALLO_PIPELINE_COORDINATION_BATCH_RECHECK_SECONDS": "10",
}


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Process:
    """One supervised process of the stack (a service replica or the Runtime)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ops_port: int
    proc: asyncio.subprocess.Process | None = None
    kills: int = 0

    @property
    def ops_url(self) -> str:
        """Its operations endpoint (``/readyz``, ``/metrics``)."""
        return f"http://127.0.0.1:{self.ops_port}"

    def tail(self, lines: int = 30) -> str:
        """The last lines of its log (for a failure's message)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class ReplicaStack:
    """The processes and the facts a test needs: database URLs, edge, topology, layout."""

    tmp: Path
    amqp_url: str
    topology: Topology
    database_urls: dict[str, str]
    replicas: int = 2
    #: ``bus_url(role)``: each service's (and the Go API's) own principal's URL.
    bus_url: Callable[[str], str] | None = None
    edge_port: int = field(default_factory=free_port)
    processes: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.layout = Layout(self.tmp / "stack")
        self.layout.make()

    @property
    def edge_url(self) -> str:
        """The edge every replica of Site Coordination serves (one shared port)."""
        return f"https://127.0.0.1:{self.edge_port}"

    def replica_names(self, service: str) -> list[str]:
        """``<service>-1`` … ``<service>-N``."""
        return [f"{service}-{k}" for k in range(1, self.replicas + 1)]

    # ------------------------------------------------------------------ settings
    def _prepare_files(self) -> None:
        from metallo.dev_certificates import make_dev_certificates

        make_dev_certificates(self.layout.certs)
        token = secrets.token_urlsafe(24)
        write_secret(self.layout.secrets / "git-operator-token", token)
        write_secret(self.layout.secrets / "git-credentials.json", json.dumps(
            {f"127.0.0.1:{self.edge_port}": {"username": "operator", "secret": token}}))
        shutil.copy(ROOT / "examples" / "governance.yaml", self.tmp / "governance.yaml")

    def _common_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("METALLO_OIDC_")}
        env.update({
            "PYTHONUNBUFFERED": "1",
            "METALLO_AUTOVACUUM_CHECKED": "1",
            "METALLO_AMQP_URL": self.amqp_url,
            "METALLO_TOPOLOGY_PREFIX": self.topology.prefix,
            "METALLO_GOVERNANCE_FILE": str(self.tmp / "governance.yaml"),
            "METALLO_DEFERRALS_FILE": str(ROOT / "contracts" / "deferrals.json"),
            "METALLO_LOCAL_REPOSITORIES": "allow",
            "METALLO_GIT_HOSTS": f"127.0.0.1:{self.edge_port}",
            "METALLO_STATE_DIRS": str(self.layout.root),
            **TIMING,
        })
        for service, url in self.database_urls.items():
            env[f"METALLO_{service.upper()}_DATABASE_URL"] = url
        return env

    def _service_env(self, service: str) -> dict[str, str]:
        certs = self.layout.certs
        env = self._common_env()
        if self.bus_url is not None:
            env["METALLO_AMQP_URL"] = self.bus_url(service)
        if service == "site_coordination":
            env.update({
                "METALLO_SITE_EDGE_HOST": "127.0.0.1",
                "METALLO_SITE_EDGE_PORT": str(self.edge_port),
                "METALLO_SITE_EDGE_REUSE_PORT": "1",
                "METALLO_SITE_EDGE_TLS_CERT": str(certs / "server.pem"),
                "METALLO_SITE_EDGE_TLS_KEY": str(certs / "server-key.pem"),
                "METALLO_LAB_GIT_ROOT": str(self.layout.git_root),
                "METALLO_LAB_GIT_OPERATOR_TOKEN_FILE": str(self.layout.secrets / "git-operator-token"),
                "METALLO_LAB_ISSUER_DIR": str(self.layout.issuer),
                "METALLO_LAB_ISSUER_URL": f"{self.edge_url}/lab-issuer",
            })
        if service == "workload_portfolio":
            env.update({
                "METALLO_GIT_CA_FILE": str(certs / "ca.pem"),
                "METALLO_GIT_CREDENTIALS_FILE": str(self.layout.secrets / "git-credentials.json"),
            })
        return env

    def _add(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        port = free_port()
        process = Process(name, argv, {**env, "METALLO_OPS_ADDRESS": f"127.0.0.1:{port}"},
                          self.layout.logs / f"{name}.log", port)
        self.processes[name] = process
        return process

    # ----------------------------------------------------------------- processes
    async def spawn(self, process: Process) -> None:
        """Start ``process`` (its output appended to its log)."""
        with open(process.log, "ab") as log:  # noqa: ASYNC230 (a local file, once)
            process.proc = await asyncio.create_subprocess_exec(
                *process.argv, env=process.env, cwd=str(ROOT), stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=asyncio.subprocess.STDOUT)

    async def ready(self, process: Process, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        """Wait until ``GET /readyz`` answers 200; raise AssertionError (with its log) when
        it exits or stays unready for ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            while time.monotonic() < deadline:
                assert process.proc is not None
                if process.proc.returncode is not None:
                    raise AssertionError(f"{process.name} exited with {process.proc.returncode}:"
                                         f"\n{process.tail()}")
                try:
                    if (await http.get(f"{process.ops_url}/readyz")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
        raise AssertionError(f"{process.name} not ready after {timeout:.0f} s:\n{process.tail()}")

    async def kill(self, process: Process) -> None:
        """SIGKILL ``process`` (no clean stop of anything it was doing) and reap it."""
        assert process.proc is not None
        if process.proc.returncode is None:
            process.proc.send_signal(signal.SIGKILL)
        await process.proc.wait()
        process.kills += 1

    async def start(self) -> None:
        """Files, every replica of every service (first replicas together: their
        migrations race; then the others), the Runtime's grant, and the Runtime."""
        from metallo.messaging.notifications import declare_notifications_queue

        self._prepare_files()
        # Events no service consumes (RunAccepted…) stay routable, as the Go API's bridge
        # keeps them in a deployment (and `dev up` does).
        self.topology.declared_queues.add(
            await declare_notifications_queue(
                self.bus_url("go_api") if self.bus_url else self.amqp_url, self.topology))
        for service in SERVICES:
            for name in self.replica_names(service):
                self._add(name, [sys.executable, "-m", service, *ARGS.get(service, [])],
                          self._service_env(service))
        everyone = list(self.processes.values())
        for p in everyone:
            await self.spawn(p)
        await asyncio.gather(*(self.ready(p) for p in everyone))
        secret = await self._runtime_grant()
        write_secret(self.layout.secrets / "runtime-grant", secret)
        runtime_env = {
            **self._common_env(),
            "SITE_API_URL": self.edge_url,
            "SITE_API_CA_FILE": str(self.layout.certs / "ca.pem"),
            "SITE_API_CREDENTIAL_FILE": str(self.layout.secrets / "runtime-grant"),
            "RUNTIME_EXECUTOR": "local",
            "RUNTIME_STATE_DIRECTORY": str(self.layout.runtime / "local"),
            "REPOSITORY_CA_FILE": str(self.layout.certs / "ca.pem"),
            "RUNTIME_LOCAL_MAX_ACTIVE": "8",
        }
        runtime = self._add("site_runtime", [sys.executable, "-m", "site_runtime"], runtime_env)
        await self.spawn(runtime)
        await self.ready(runtime)

    async def _runtime_grant(self) -> str:
        """A ``psb_`` command grant of the ``(lab-slurm, slurm)`` stream, made with Site
        Coordination's operator command line on the test's database; its secret."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "site_coordination", "grant", "create", "--site", "lab-slurm",
            "--environment", "slurm", "--expires", "1h",
            env=self._service_env("site_coordination"), cwd=str(ROOT),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        return out.decode().strip().splitlines()[-1]

    async def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL after 20 s."""
        running = [p for p in self.processes.values() if p.proc and p.proc.returncode is None]
        for p in reversed(running):
            p.proc.send_signal(signal.SIGTERM)
        for p in running:
            try:
                await asyncio.wait_for(p.proc.wait(), 20)
            except TimeoutError:
                p.proc.kill()
                await p.proc.wait()
