"""``dev up`` / ``dev down`` / ``dev status``: prepare, start the supervisor (in the
foreground or detached), wait until the stack is ready, stop it cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from metallo.devstack.components import Options, plan, slurm_lab_running
from metallo.devstack.k8s_lab import ensure_k8s_lab
from metallo.devstack.layout import REPO_ROOT, Layout
from metallo.devstack.operator import count_active_runs, runtime_grant_hooks
from metallo.devstack.prepare import PrepareError, prepare
from metallo.devstack.supervisor import MAX_RESTARTS, RESTART_WINDOW_SECONDS, Supervisor

EXECUTORS = ("auto", "local", "slurm")

UP_TIMEOUT_SECONDS = 240.0
DOWN_TIMEOUT_SECONDS = 90.0


class StackError(Exception):
    """``dev up``/``down`` failed; the message says what to do next. ``usage`` is True
    when the request itself was wrong (unknown executor, another executor already
    running): nothing was changed. ``hint`` and ``code``, when given, are the next step
    and the stable code to report instead of the generic ones."""

    def __init__(self, message: str, *, usage: bool = False, hint: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage
        self.hint = hint
        self.code = code


def read_state(layout: Layout) -> dict | None:
    """The state file's content, or None when there is none (or it is unreadable)."""
    try:
        return json.loads(layout.state_file.read_text())
    except (OSError, ValueError):
        return None


def process_alive(pid: int | None, needle: str) -> bool:
    """True when ``pid`` runs and its command line contains ``needle`` (so a reused
    pid of another programme is never signalled)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return needle in cmdline


def running_supervisor(layout: Layout) -> dict | None:
    """The state of a live supervisor, or None."""
    state = read_state(layout)
    if state and process_alive(state.get("pid"), "metallo.devstack"):
        return state
    return None


def _check_executor(name: str) -> None:
    if name not in EXECUTORS:
        raise StackError(f"unknown executor {name!r}: the executors are {', '.join(EXECUTORS)}", usage=True,
                         hint="run `metallo dev up --executor local` (or slurm; auto, the default, picks "
                              "slurm when the Slurm lab runs, else local)")


def failed_components(state: dict) -> list[str]:
    """Components of a running stack's ``state`` that the supervisor left stopped
    (``MAX_RESTARTS`` crashes within ``RESTART_WINDOW_SECONDS``): the stack is degraded."""
    return sorted(n for n, c in state.get("components", {}).items() if c.get("state") == "failed")


def left_stopped(names: list[str]) -> str:
    """``"<names> crashed 5 times in 120 s and was left stopped"``."""
    return (f"{', '.join(names)} crashed {MAX_RESTARTS} times in "
            f"{RESTART_WINDOW_SECONDS:.0f} s and was left stopped")


def choose_executor(requested: str) -> str:
    """``auto`` → ``slurm`` when the Slurm lab runs, else ``local``."""
    _check_executor(requested)
    if requested == "auto":
        return "slurm" if slurm_lab_running() else "local"
    if requested == "slurm" and not slurm_lab_running():
        raise StackError("the Slurm lab is not running: start it with `scripts/slurm-lab up` "
                         "(as root), or use --executor local")
    return requested


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port`` (0.5 s at most)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def refuse_a_stack_of_another_checkout(edge_port: int) -> None:
    """Raise StackError when the edge port is taken while this checkout runs no stack.

    The dev databases (``metallo_*``), the broker's ``metallo-dev`` users and the ports
    are shared by every checkout on the machine: preparing (``--fresh`` drops the
    databases; every ``up`` rotates the broker passwords) would wreck the stack that
    holds the port, so nothing is changed before this check.
    """
    if port_taken(edge_port):
        raise StackError(
            f"127.0.0.1:{edge_port} is taken, but this checkout ({REPO_ROOT}) runs no dev stack: "
            "another checkout's dev stack (or another program) holds it. The dev databases and "
            "broker users are shared by every checkout, so starting here would break that stack; "
            "nothing was changed", code="dev-stack-elsewhere",
            hint="run `metallo dev down` in the checkout whose stack runs (or stop what holds the "
                 "port), or use --edge-port for a program that is not a dev stack")


def up(executor: str = "auto", *, foreground: bool = False, edge_port: int = 8443,
       fresh: bool = False, replicas: int = 1, say=print) -> dict:
    """Prepare and start the stack; returns the state when ready.

    Raises StackError (with the next step) when a precondition fails, when the stack
    already runs with another executor than the one asked for (never silently the
    wrong one), or a component does not become ready (the stack is then stopped again).
    ``replicas``: how many processes of each service (the Site Runtime runs once).
    """
    _check_executor(executor)
    layout = Layout.default()
    live = running_supervisor(layout)
    if live is not None:
        if executor != "auto" and live.get("executor") != executor:
            raise StackError(
                f"the dev stack already runs with the {live.get('executor')} executor, not "
                f"{executor}; run `metallo dev down`, then `metallo dev up --executor {executor}`",
                usage=True, hint=f"run `metallo dev down`, then `metallo dev up --executor {executor}`")
        failed = failed_components(live)
        if failed:
            raise StackError(
                f"the dev stack runs, but {left_stopped(failed)} (see {layout.logs}); "
                "run `metallo dev down`, then `metallo dev up`")
        say(f"the dev stack already runs (supervisor pid {live['pid']}, executor "
            f"{live['executor']}); `metallo dev down` stops it")
        return live
    refuse_a_stack_of_another_checkout(edge_port)
    chosen = choose_executor(executor)
    # The lab first: a second Runtime serves lab-k8s only when its API answers.
    k8s_lab = ensure_k8s_lab(say)
    kubernetes = bool(k8s_lab["running"])
    if not kubernetes:
        say("warning: no Runtime serves lab-k8s (the Kubernetes lab is not running)")
    options = Options(executor=chosen, edge_port=edge_port,
                      amqp_url=os.environ.get("METALLO_DEV_AMQP_URL", Options.amqp_url),
                      topology_prefix=os.environ.get("METALLO_TOPOLOGY_PREFIX", ""),
                      kubernetes=kubernetes, replicas=replicas)
    say(f"executor: {chosen}" + (f", {replicas} replicas of each service" if replicas > 1 else ""))
    try:
        prepared = asyncio.run(prepare(layout, options, say=say, fresh=fresh))
    except PrepareError as exc:
        raise StackError(str(exc), hint=exc.hint, code=exc.code) from None
    # After prepare: the components' settings name the RabbitMQ users it made.
    components, missing = plan(layout, options)
    for name in missing:
        say(f"warning: {name} has no `python -m {name}` entry in this checkout; not started")
    extra = {"ca_file": str(prepared.ca_file),
             "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "k8s_lab": k8s_lab}
    if foreground:
        before_start, after_stop = runtime_grant_hooks(layout, options)
        supervisor = Supervisor(layout, options, components, missing, extra, echo=True,
                                before_start=before_start, after_stop=after_stop)
        code = asyncio.run(supervisor.run())
        if code:
            raise StackError(f"the stack did not become ready; see {layout.stack_log}")
        return read_state(layout) or {}
    argv = [sys.executable, "-m", "metallo.devstack", "supervise", "--executor", chosen,
            "--edge-port", str(edge_port), "--ca-file", str(prepared.ca_file),
            "--replicas", str(replicas)]
    if kubernetes:
        argv.append("--kubernetes")
    layout.logs.mkdir(parents=True, exist_ok=True)
    with open(layout.logs / "supervisor.out", "ab") as out:
        proc = subprocess.Popen(argv, cwd=str(REPO_ROOT), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    say(f"supervisor pid {proc.pid}; logs: {layout.stack_log}")
    deadline = time.monotonic() + UP_TIMEOUT_SECONDS
    shown: dict[str, str] = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        state = read_state(layout)
        if state and state.get("pid") == proc.pid:
            for name, comp in state.get("components", {}).items():
                if shown.get(name) != comp["state"]:
                    shown[name] = comp["state"]
                    say(f"  {name:<24} {comp['state']}")
            if state["status"] == "ready":
                warn_switched_executor(options, chosen, say, layout)
                return state
            if state["status"] in ("failed", "stopped"):
                break
        if proc.poll() is not None:
            break
    tail = tail_lines(layout.stack_log, 25)
    down(say=lambda _m: None)
    raise StackError("the dev stack did not become ready (it was stopped again). Last log "
                     f"lines:\n{tail}\nfull log: {layout.stack_log}")


def tail_lines(path: Path, count: int) -> str:
    """The last ``count`` lines of a text file ('' when missing)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return ""


def stack_options(state: dict) -> Options:
    """The broker and namespace a stack with this ``state`` runs on."""
    return Options(executor=state.get("executor") or "local",
                   amqp_url=state.get("amqp_url") or Options.amqp_url,
                   topology_prefix=state.get("topology_prefix") or "")


def warn_active_runs(options: Options, say=print) -> int:
    """Say how many Runs are still active before the stack stops (a stage-out that
    finds the lab Git server gone fails its Run); return that count (0
    also when Execution Core cannot tell: stopping goes on regardless)."""
    try:
        active = asyncio.run(count_active_runs(options))
    except Exception:  # noqa: BLE001 - only a courtesy: nothing may keep the stack running
        return 0
    if active:
        say(f"warning: {active} Run(s) still active. Their native work goes on (local stage "
            "processes and Slurm jobs are adopted again at the next `metallo dev up`), but a "
            "stage-out that pushes while the stack is down finds no lab Git server: it tries "
            "again for about a minute, then fails. `metallo run list --active` shows them.")
    return active


def period_text(seconds: float) -> str:
    """``15 minutes``, ``90 s``, ``2 hours``: a period for people."""
    if seconds >= 7200 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f} hours"
    if seconds >= 120 and seconds % 60 == 0:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds:.0f} s"


def warn_switched_executor(options: Options, chosen: str, say=print,
                           layout: Layout | None = None) -> int:
    """After ``dev up``: say, for each other executor whose Runtime started Attempts on
    the Site (its delivery journal under ``var/dev/runtime/<executor>``), how many Runs
    are still active on one of those Attempts — the ``chosen`` executor's Runtime does
    not know them — with Execution Core's reconciliation period. Returns how many in all
    (0 also when Execution Core cannot tell)."""
    from metallo.devstack.operator import count_active_attempts
    from metallo.devstack.runtime_state import executor_states, started_attempts

    layout = layout or Layout.default()
    total = 0
    for executor, state_dir in executor_states(layout.runtime).items():
        if executor in (chosen, "kubernetes"):  # the Kubernetes lab has a Site of its own
            continue
        attempts = sorted(started_attempts(state_dir))
        if not attempts:
            continue
        try:
            active, lost_after = asyncio.run(count_active_attempts(
                options, options.site_id, attempts[-10_000:]))
        except Exception:  # noqa: BLE001 - only a courtesy: the stack is up regardless
            return total
        if not active:
            continue
        total += active
        period = f" ({period_text(lost_after)})" if lost_after else ""
        say(f"warning: {active} Run(s) on {options.site_id} are still active on Attempts "
            f"the {executor} executor's Runtime started. The {chosen} Runtime does not know "
            "them: they wait with `attempt-unknown-at-site`, a cancellation of them waits too, "
            f"and they end `lost` after the reconciliation period{period}, their native work "
            f"not stopped — unless `metallo dev down` and `metallo dev up --executor "
            f"{executor}` bring their Runtime back first. `metallo run list --active` shows "
            "them.")
    return total


def down(say=print) -> bool:
    """Stop the supervisor (it stops the children), revoke the runtime grant; True when
    something was running."""
    layout = Layout.default()
    state = read_state(layout)
    if state is None:
        say("the dev stack is not running (no state file)")
        return False
    pid = state.get("pid")
    was_running = process_alive(pid, "metallo.devstack")
    if was_running:
        warn_active_runs(stack_options(state), say)
        say(f"stopping the dev stack (supervisor pid {pid})")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_TIMEOUT_SECONDS
        while process_alive(pid, "metallo.devstack") and time.monotonic() < deadline:
            time.sleep(0.2)
        if process_alive(pid, "metallo.devstack"):
            say("the supervisor did not stop in time; killing its process group")
            os.killpg(pid, signal.SIGKILL)
    # Children left by a supervisor that was killed: stop them by their recorded pid.
    for name, comp in (state.get("components") or {}).items():
        if process_alive(comp.get("pid"), comp.get("module", name)):
            say(f"stopping leftover {name} (pid {comp['pid']})")
            os.kill(comp["pid"], signal.SIGTERM)
            was_running = True
    state = read_state(layout) or state  # the supervisor's last word on the grants
    for key in ("grant_id", "k8s_grant_id"):
        grant_id = state.get(key)
        if grant_id and state.get(key.replace("_id", "_revoked")):
            say(f"revoked runtime grant {grant_id}")
        elif grant_id:
            say(f"runtime grant {grant_id} was not revoked (Site Coordination stopped first); "
                "it expires by itself, or revoke it with `metallo site grant revoke` while the "
                "platform runs")
    state.update(status="stopped", pid=None)
    layout.state_file.write_text(json.dumps(state, indent=2, sort_keys=True))
    say("the dev stack is stopped")
    return was_running


def status() -> dict | None:
    """The state of the running stack, or None."""
    return running_supervisor(Layout.default())
