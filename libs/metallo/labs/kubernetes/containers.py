"""From a Pod's container spec to a running local process.

- Environment: lab defaults (``PATH``, ``HOSTNAME``, ``HOME``, ``KUBERNETES_SERVICE_*``),
  then ``envFrom`` (Secrets, ConfigMaps, with ``prefix``), then ``env`` in order
  (``value`` with ``$(VAR)`` expansion, ``secretKeyRef``, ``configMapKeyRef``,
  ``fieldRef``). A missing Secret, ConfigMap or key is a :class:`ConfigError`
  (``CreateContainerConfigError``), unless ``optional``.
- argv: ``command`` + ``args`` with Kubernetes' ``$(VAR)`` expansion (``$$`` escapes);
  no shell. Without ``command`` the lab has no image entrypoint, so ``args`` is the argv.
- The process runs through ``unshare --mount`` and :mod:`container_init` (mounts, user,
  ``workingDir``, exec) in its own session, so signals reach its whole process group.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pwd
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from metallo.labs.kubernetes.resources import lookup
from metallo.labs.kubernetes.store import Store

SECRETS = lookup("", "v1", "secrets")
CONFIGMAPS = lookup("", "v1", "configmaps")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


class ConfigError(Exception):
    """The container cannot be configured yet (``CreateContainerConfigError``)."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: known names are replaced, unknown ones kept,
    ``$$`` becomes ``$``."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return _REF.sub(sub, text)


def _secret_data(store: Store, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    obj = store.peek(SECRETS, namespace, name)
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'secret "{name}" not found')
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}


def _configmap_data(store: Store, namespace: str, name: str, optional: bool) -> dict[str, str] | None:
    obj = store.peek(CONFIGMAPS, namespace, name)
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'configmap "{name}" not found')
    return dict(obj.get("data") or {})


def _field(pod: dict, path: str) -> str:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP"), "status.hostIP": status.get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    m = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ConfigError(f"unsupported fieldRef path {path!r} in the lab")


def container_env(store: Store, pod: dict, container: dict, home: str, api_port: int) -> dict[str, str]:
    """The process environment; raises :class:`ConfigError`."""
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": pod["metadata"]["name"], "HOME": home,
                           "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api_port)}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        if "secretRef" in src:
            ref = src["secretRef"]
            data = _secret_data(store, ns, ref.get("name", ""), bool(ref.get("optional")))
        else:
            ref = src.get("configMapRef") or {}
            data = _configmap_data(store, ns, ref.get("name", ""), bool(ref.get("optional")))
        for k, v in (data or {}).items():
            env[prefix + k] = v
    for item in container.get("env") or []:
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        source = item["valueFrom"]
        if "secretKeyRef" in source or "configMapKeyRef" in source:
            is_secret = "secretKeyRef" in source
            ref = source["secretKeyRef" if is_secret else "configMapKeyRef"]
            optional = bool(ref.get("optional"))
            data = (_secret_data if is_secret else _configmap_data)(store, ns, ref.get("name", ""), optional)
            if data is None:
                continue
            if ref.get("key") not in data:
                if optional:
                    continue
                kind = "Secret" if is_secret else "ConfigMap"
                raise ConfigError(f"couldn't find key {ref.get('key')} in {kind} {ns}/{ref.get('name')}")
            env[name] = data[ref["key"]]
        elif "fieldRef" in source:
            env[name] = _field(pod, source["fieldRef"].get("fieldPath", ""))
        else:
            raise ConfigError(f"unsupported valueFrom for {name} in the lab")
    return env


def container_argv(container: dict, env: dict[str, str]) -> list[str]:
    """``command`` + ``args`` expanded; raises :class:`ConfigError` when both are empty."""
    argv = [expand(str(a), env) for a in (container.get("command") or [])]
    argv += [expand(str(a), env) for a in (container.get("args") or [])]
    if not argv:
        raise ConfigError("the lab has no image entrypoint: set command (or args)")
    return argv


def home_of(uid: int) -> tuple[str, int]:
    """(home directory, primary gid) of a uid; ("/", uid) when it has no passwd entry."""
    try:
        entry = pwd.getpwuid(uid)
        return entry.pw_dir, entry.pw_gid
    except KeyError:
        return "/", uid


@dataclass
class Started:
    """A started container process; ``start_error`` is set when the exec failed."""

    process: asyncio.subprocess.Process
    start_error: str | None
    copiers: list[asyncio.Future]  # the output copies; done once the process closed both pipes


async def start_process(spec: dict, log_out: object, registry: Path) -> Started:
    """Start ``spec`` (see :mod:`container_init`) and copy its output into ``log_out``;
    the process group is recorded in ``registry`` (see :func:`kill_leftovers`)."""
    from metallo.labs.kubernetes.pod_logs import MAX_LOG_BYTES, copy_stream

    spec_r, spec_w = os.pipe()
    status_r, status_w = os.pipe()
    # -I -S: the helper needs the standard library only, and starts faster without site.
    cmd = ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-I", "-S",
           str(Path(__file__).with_name("container_init.py")), str(spec_r), str(status_w)]
    try:
        process = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, pass_fds=(spec_r, status_w), start_new_session=True,
            env={"PATH": DEFAULT_PATH})
    finally:
        os.close(spec_r)
        os.close(status_w)
    remember(registry, process.pid)
    data = json.dumps(spec).encode()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, _write_all, spec_w, data)
    status = await loop.run_in_executor(None, _read_all, status_r)
    assert process.stdout is not None and process.stderr is not None
    budget = [MAX_LOG_BYTES]
    copiers = [asyncio.ensure_future(copy_stream(process.stdout, "stdout", log_out, budget)),
               asyncio.ensure_future(copy_stream(process.stderr, "stderr", log_out, budget))]
    return Started(process, status.decode("utf-8", "replace") or None, copiers)


def _write_all(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks


def remember(registry: Path, pid: int) -> None:
    """Record a container's process group (pid and start time, so a reused pid is
    never mistaken for it)."""
    registry.mkdir(parents=True, exist_ok=True)
    (registry / str(pid)).write_text(_start_time(pid) or "")


def forget(registry: Path, pid: int) -> None:
    (registry / str(pid)).unlink(missing_ok=True)


def kill_leftovers(registry: Path) -> int:
    """SIGKILL the process groups a previous lab left running (it was killed itself);
    returns how many. Only a process with the recorded start time is signalled."""
    killed = 0
    for entry in registry.glob("*") if registry.is_dir() else []:
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and entry.read_text() and _start_time(pid) == entry.read_text():
            try:
                os.killpg(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        entry.unlink(missing_ok=True)
    return killed


def start_message(error: str, argv: list[str]) -> str:
    """The ``terminated.message`` of a ``StartError``, worded as containerd/runc word it."""
    if error.startswith("FileNotFoundError"):
        return (f'failed to create containerd task: failed to create shim task: OCI runtime create failed: '
                f'runc create failed: unable to start container process: exec: "{argv[0]}": '
                f"executable file not found in $PATH: unknown")
    return f"failed to create containerd task: failed to start container process: {error}"
