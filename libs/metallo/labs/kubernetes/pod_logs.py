"""Container logs: written as the kubelet reads them, served at ``pods/<name>/log``.

Each container run (restart) has a file ``<container>.<restartCount>.log`` of lines
``<RFC 3339 nano time> <stdout|stderr> <text>`` (CRI's format without the tag), kept
while the Pod exists. The log route takes Kubernetes' PodLogOptions: ``container``,
``limitBytes``, ``sinceTime``, ``sinceSeconds``, ``tailLines``, ``timestamps``,
``previous`` and ``follow``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from metallo.labs.kubernetes import errors
from metallo.labs.kubernetes.clock import parse_rfc3339, rfc3339_nano
from metallo.labs.kubernetes.resources import PODS
from metallo.labs.kubernetes.store import Store

MAX_LOG_BYTES = 64 * 1024 * 1024  # per container run


def log_file(pod_dir: Path, container: str, restart: int) -> Path:
    return pod_dir / "logs" / f"{container}.{restart}.log"


async def copy_stream(stream: asyncio.StreamReader, name: str, out: Any, budget: list[int]) -> None:
    """Copy a process's stdout or stderr into the log file ``out``, one timestamped line
    per line read (a line longer than 64 KiB is split). ``budget`` ([bytes left], shared
    by both streams of a container run) bounds the file: past it, output is read and
    dropped after one line saying so (the kubelet rotates at 10 MiB; the lab keeps the
    start of the log instead)."""
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            line = e.partial
        except asyncio.LimitOverrunError as e:
            line = await stream.readexactly(e.consumed)
        if not line:
            return
        if budget[0] <= 0:
            continue
        text = line.decode("utf-8", "replace").rstrip("\n")
        budget[0] -= len(line)
        if budget[0] <= 0:
            text = f"[metallo lab: log limit of {MAX_LOG_BYTES} bytes reached; further output is dropped]"
        out.write(f"{rfc3339_nano(time.time())} {name} {text}\n")
        out.flush()


def _read_lines(path: Path) -> list[tuple[float, str, str]]:
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for raw in fh:
                stamp, _, rest = raw.rstrip("\n").partition(" ")
                _, _, text = rest.partition(" ")
                out.append((parse_rfc3339(stamp), stamp, text))
    except FileNotFoundError:
        pass
    return out


class PodLogs:
    """Serves logs; ``pod_dir(uid)`` says where a Pod's files are, ``running(uid, name)``
    whether that container still runs (for ``follow``)."""

    def __init__(self, store: Store, pod_dir: Callable[[str], Path],
                 running: Callable[[str, str], bool]) -> None:
        self.store = store
        self.pod_dir = pod_dir
        self.running = running

    async def serve(self, request: web.Request, namespace: str | None, name: str | None) -> web.StreamResponse:
        pod = self.store.get(PODS, namespace, name or "")
        q = request.query
        spec = pod.get("spec") or {}
        names = [c["name"] for c in spec.get("containers", [])]
        all_names = names + [c["name"] for c in spec.get("initContainers", [])]
        container = q.get("container")
        if not container:
            if len(names) != 1:
                raise errors.bad_request(f"a container name must be specified for pod {name}, "
                                         f"choose one of: [{' '.join(names)}]")
            container = names[0]
        if container not in all_names:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        status = _container_status(pod, container)
        restarts = int((status or {}).get("restartCount", 0))
        started = status is not None and ("running" in status.get("state", {})
                                          or "terminated" in status.get("state", {}))
        if q.get("previous") in ("true", "True", "1"):
            if restarts == 0:
                raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
            restarts -= 1
        elif not started:
            reason = ((status or {}).get("state", {}).get("waiting") or {}).get("reason", "ContainerCreating")
            raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        path = log_file(self.pod_dir(pod["metadata"]["uid"]), container, restarts)
        lines = self._select(path, q)
        limit = _int(q.get("limitBytes"))
        timestamps = q.get("timestamps") in ("true", "True", "1")
        body = "".join(f"{stamp} {text}\n" if timestamps else f"{text}\n" for _, stamp, text in lines).encode()
        if q.get("follow") not in ("true", "True", "1"):
            return web.Response(body=body[:limit] if limit else body, content_type="text/plain")
        return await self._follow(request, pod, container, path, body, limit, timestamps)

    def _select(self, path: Path, q: Any) -> list[tuple[float, str, str]]:
        lines = _read_lines(path)
        if q.get("sinceTime"):
            try:
                since = parse_rfc3339(q["sinceTime"])
            except ValueError:
                raise errors.bad_request(f"invalid sinceTime: {q['sinceTime']}") from None
            lines = [x for x in lines if x[0] >= since]
        elif q.get("sinceSeconds"):
            since = time.time() - (_int(q.get("sinceSeconds")) or 0)
            lines = [x for x in lines if x[0] >= since]
        tail = _int(q.get("tailLines"))
        if tail is not None:
            lines = lines[-tail:] if tail else []
        return lines

    async def _follow(self, request: web.Request, pod: dict, container: str, path: Path,
                      first: bytes, limit: int | None, timestamps: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        sent = 0

        async def send(data: bytes) -> bool:
            nonlocal sent
            if limit is not None:
                data = data[: max(0, limit - sent)]
            if data:
                await response.write(data)
                sent += len(data)
            return limit is None or sent < limit

        go_on = await send(first)
        seen = len(_read_lines(path))
        uid = pod["metadata"]["uid"]
        while go_on:
            alive = self.running(uid, container)
            lines = _read_lines(path)
            for _, stamp, text in lines[seen:]:
                if not await send((f"{stamp} {text}\n" if timestamps else f"{text}\n").encode()):
                    go_on = False
                    break
            seen = len(lines)
            if not alive or not os.path.exists(path.parent):
                break
            await asyncio.sleep(0.2)
        await response.write_eof()
        return response


def _container_status(pod: dict, container: str) -> dict | None:
    status = pod.get("status") or {}
    for s in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if s.get("name") == container:
            return s
    return None


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    if not text.isdigit():
        raise errors.bad_request(f"invalid integer: {text}")
    return int(text)
