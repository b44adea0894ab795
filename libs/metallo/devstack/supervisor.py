"""The supervised process tree of the development stack.

Each component runs as a child process; its stdout and stderr lines are prefixed
with its name and written to ``logs/stack.log``, ``logs/<name>.log`` and (in the
foreground) the terminal. A child that exits while the stack runs is restarted
after a growing pause (1, 2, 4 … 30 s); after 5 restarts within 120 s it is left
stopped and marked ``failed`` — at once when its exit status is one of the
component's ``final_exits`` (a restart would fail the same way). SIGTERM/SIGINT stop the children in reverse start
order (SIGTERM, then SIGKILL after 15 s). ``state.json`` says what runs.

Hooks run around one component: ``before_start[name]()`` once, just before its
first start (the components before it are ready), and ``after_stop[name]()``
just after it stopped (the components after it in the order still run); what a
hook returns is added to ``state.json``. The Site Runtime's command grant is
made and revoked this way, while Site Coordination serves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from metallo.devstack.components import Component, Options
from metallo.devstack.layout import REPO_ROOT, Layout
from metallo.devstack.probe import queue_consumed

STOP_GRACE_SECONDS = 15.0
MAX_RESTARTS = 5
RESTART_WINDOW_SECONDS = 120.0
READY_TIMEOUT_SECONDS = 90.0
WIDTH = 22


def now_iso() -> str:
    """The current UTC time as ISO 8601 to the second, e.g. ``2026-11-29T12:00:00+00:00``."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Child:
    """Runtime facts of one component."""

    component: Component
    process: asyncio.subprocess.Process | None = None
    state: str = "starting"         # starting | ready | restarting | failed | stopped
    restarts: list[float] = field(default_factory=list)
    reader: asyncio.Task | None = None


# A hook around one component: returns entries for state.json (see module doc).
Hook = Callable[[], Awaitable[dict]]


def not_ready_text(child: Child) -> str:
    """Why ``child`` is not ready: it exited (with its code) or the wait ran out."""
    proc = child.process
    if proc is not None and proc.returncode is not None:
        return f"exited with code {proc.returncode} before it became ready"
    return f"did not become ready within {READY_TIMEOUT_SECONDS:.0f} s"


class Supervisor:
    """Runs ``components`` until :meth:`stop`; writes ``state.json`` on every change."""

    def __init__(self, layout: Layout, options: Options, components: list[Component],
                 missing: list[str], extra_state: dict, echo: bool,
                 before_start: dict[str, Hook] | None = None,
                 after_stop: dict[str, Hook] | None = None):
        self.layout = layout
        self.options = options
        self.children = [Child(c) for c in components]
        self.missing = missing
        self.extra_state = extra_state
        self.echo = echo
        self.before_start = dict(before_start or {})
        self.after_stop = dict(after_stop or {})
        self.stopping = asyncio.Event()
        self.status = "starting"
        # Open for the supervisor's whole life (closed at the end of run()).
        self._log = open(layout.stack_log, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    # ------------------------------------------------------------------ logging
    def line(self, name: str, text: str) -> None:
        """One prefixed line to the stack log, the component log and maybe the terminal."""
        prefixed = f"{name:<{WIDTH}}| {text}"
        self._log.write(prefixed + "\n")
        if self.echo:
            sys.stdout.write(prefixed + "\n")
            sys.stdout.flush()

    def write_state(self) -> None:
        """Write ``state.json`` atomically (temporary file, then rename).

        It holds the supervisor's pid, status, options and per-component pid, state, restart
        count and log path, plus ``extra_state``.
        """
        state = {
            "pid": os.getpid(), "status": self.status, "updated_at": now_iso(),
            "executor": self.options.executor, "edge_url": self.options.edge_url,
            "git_base": self.options.git_base, "site_id": self.options.site_id,
            "amqp_url": self.options.amqp_url, "topology_prefix": self.options.topology_prefix,
            "replicas": self.options.replicas,
            "missing": self.missing, "logs": str(self.layout.logs),
            "components": {c.component.name: {
                "pid": c.process.pid if c.process and c.process.returncode is None else None,
                "state": c.state, "restarts": len(c.restarts), "ops_url": c.component.ops_url,
                "module": c.component.module,
                "log": str(self.layout.logs / f"{c.component.name}.log")} for c in self.children},
            **self.extra_state,
        }
        tmp = self.layout.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True))
        tmp.replace(self.layout.state_file)

    # ---------------------------------------------------------------- processes
    async def _spawn(self, child: Child) -> None:
        c = child.component
        env = {**os.environ, **c.env}
        child.process = await asyncio.create_subprocess_exec(
            *c.argv(), env=env, cwd=str(REPO_ROOT),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        self.line("supervisor", f"started {c.name} (pid {child.process.pid})")
        child.reader = asyncio.create_task(self._pump(child, child.process))

    async def _pump(self, child: Child, process: asyncio.subprocess.Process) -> None:
        path = self.layout.logs / f"{child.component.name}.log"
        with open(path, "a", encoding="utf-8", buffering=1) as own:  # noqa: ASYNC230 (local file)
            assert process.stdout is not None
            async for raw in process.stdout:
                text = raw.decode("utf-8", "replace").rstrip("\n")
                own.write(text + "\n")
                self.line(child.component.name, text)

    async def _watch(self, child: Child) -> None:
        """Restart ``child`` when it exits while the stack runs (bounded, with backoff)."""
        while not self.stopping.is_set():
            assert child.process is not None
            code = await child.process.wait()
            if child.reader:
                await child.reader
            if self.stopping.is_set():
                return
            if code in child.component.final_exits:
                child.state = "failed"
                self.line("supervisor", f"{child.component.name} exited with {code}, which a "
                          "restart does not cure: left stopped; its last lines say why and what "
                          f"to do ({self.layout.logs / (child.component.name + '.log')})")
                self.write_state()
                return
            now = time.monotonic()
            child.restarts = [t for t in child.restarts if now - t < RESTART_WINDOW_SECONDS]
            if len(child.restarts) >= MAX_RESTARTS:
                child.state = "failed"
                self.line("supervisor", f"{child.component.name} exited with {code} "
                          f"{MAX_RESTARTS} times in {RESTART_WINDOW_SECONDS:.0f} s: left stopped; "
                          f"see {self.layout.logs / (child.component.name + '.log')}")
                self.write_state()
                return
            pause = min(30.0, 2.0 ** len(child.restarts))
            child.restarts.append(now)
            child.state = "restarting"
            self.line("supervisor", f"{child.component.name} exited with {code}; restarting "
                      f"in {pause:.0f} s")
            self.write_state()
            try:
                await asyncio.wait_for(self.stopping.wait(), pause)
                return
            except TimeoutError:
                pass
            await self._spawn(child)
            child.state = "starting"
            asyncio.create_task(self._mark_ready(child))

    # ---------------------------------------------------------------- readiness
    async def _ready(self, component: Component) -> bool:
        kind, _, target = component.ready.partition(":")
        if kind == "queue":
            # Consumed, not merely declared: a durable queue outlives the stack that made it.
            # Asked as the component's own user: no other user has rights on the stack's
            # virtual host.
            return await queue_consumed(component.env.get("METALLO_AMQP_URL", self.options.amqp_url),
                                        self.options.topology_prefix + target)
        if kind == "https":
            return await https_ok(target, self.layout.certs / "ca.pem")
        if kind == "ops" and component.ops_url:
            return await ops_ready(component.ops_url)
        return True

    async def _mark_ready(self, child: Child) -> bool:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline and not self.stopping.is_set():
            proc = child.process
            if proc is None or proc.returncode is not None:
                return False
            if await self._ready(child.component):
                # A process-only check needs a moment alive to mean anything.
                if child.component.ready == "process":
                    await asyncio.sleep(2.0)
                    if proc.returncode is not None:
                        return False
                child.state = "ready"
                self.line("supervisor", f"{child.component.name} ready")
                self.write_state()
                return True
            await asyncio.sleep(0.5)
        return False

    # ------------------------------------------------------------------- run
    async def run(self) -> int:
        """Start every component in order (each ready before the next), supervise until
        a stop signal; 0 after a clean stop, 1 when the stack never became ready."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        self.write_state()
        watchers = []
        ok = True
        for child in self.children:
            if self.stopping.is_set():
                break
            if not await self._hook(self.before_start, child.component.name, "before starting"):
                ok = False
                break
            await self._spawn(child)
            watchers.append(asyncio.create_task(self._watch(child)))
            if not await self._mark_ready(child):
                ok = False
                self.line("supervisor", f"{child.component.name} {not_ready_text(child)}; see "
                          f"{self.layout.logs / (child.component.name + '.log')}")
                break
        self.status = "ready" if ok and not self.stopping.is_set() else "failed"
        self.write_state()
        if ok:
            self.line("supervisor", "stack ready" + (f" (not in this checkout: "
                      f"{', '.join(self.missing)})" if self.missing else ""))
            await self.stopping.wait()
        self.stopping.set()
        await self.stop_children()
        for w in watchers:
            w.cancel()
        self.status = "stopped"
        self.write_state()
        self._log.close()
        return 0 if ok else 1

    async def _hook(self, hooks: dict[str, Hook], name: str, when: str) -> bool:
        """Run the hook of ``name`` (once) and keep what it returns; False when it failed."""
        hook = hooks.pop(name, None)
        if hook is None:
            return True
        try:
            self.extra_state.update(await hook())
        except Exception as exc:  # noqa: BLE001 - said in the log; the caller decides
            self.line("supervisor", f"{when} {name}: {type(exc).__name__}: {exc}")
            return False
        self.write_state()
        return True

    async def stop_children(self) -> None:
        """SIGTERM in reverse order, each given STOP_GRACE_SECONDS, then SIGKILL; each
        component's ``after_stop`` hook runs once it stopped."""
        for child in reversed(self.children):
            await self._stop(child)
            await self._hook(self.after_stop, child.component.name, "after stopping")

    async def _stop(self, child: Child) -> None:
        """Stop one child (SIGTERM, SIGKILL after STOP_GRACE_SECONDS)."""
        proc = child.process
        if proc is None or proc.returncode is not None:
            child.state = "stopped"
            return
        self.line("supervisor", f"stopping {child.component.name} (pid {proc.pid})")
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_SECONDS)
        except TimeoutError:
            self.line("supervisor", f"{child.component.name} ignored SIGTERM; killing it")
            proc.kill()
            await proc.wait()
        if child.reader:
            await asyncio.gather(child.reader, return_exceptions=True)
        child.state = "stopped"
        self.write_state()


async def https_ok(url: str, ca_file: Path) -> bool:
    """True when GET ``url`` answers 200 over TLS verified against ``ca_file``."""
    import httpx

    if not ca_file.exists():
        return False
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
        async with httpx.AsyncClient(verify=context, timeout=3, trust_env=False) as client:
            return (await client.get(url)).status_code == 200
    except httpx.HTTPError:
        return False


async def ops_ready(ops_url: str) -> bool:
    """True when ``GET <ops_url>/readyz`` answers 200 (plain HTTP on loopback)."""
    import httpx

    try:
        async with httpx.AsyncClient(timeout=3, trust_env=False) as client:
            return (await client.get(f"{ops_url}/readyz")).status_code == 200
    except httpx.HTTPError:
        return False
