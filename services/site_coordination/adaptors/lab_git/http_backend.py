"""Runs ``git http-backend`` as CGI for one ASGI request (git smart HTTP).

The command is a fixed argument list and every request value travels in the CGI
environment, never through a shell. The request body is streamed to the
process (bounded by ``max_body_bytes``) while its output is streamed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

_PASSED_HEADERS = {
    b"content-type": "CONTENT_TYPE",
    b"content-length": "CONTENT_LENGTH",
    b"content-encoding": "HTTP_CONTENT_ENCODING",
    b"git-protocol": "GIT_PROTOCOL",
}


class BodyTooLarge(Exception):
    """The request body passed the configured bound."""


async def run_http_backend(scope, receive, send, *, project_root: Path, path_info: str,
                           remote_user: str, max_body_bytes: int) -> None:
    """Serve one smart-HTTP request with ``git http-backend`` rooted at ``project_root``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(project_root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(project_root),
        "PATH_INFO": path_info,
        "REQUEST_METHOD": scope["method"],
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "REMOTE_USER": remote_user,
        "REMOTE_ADDR": (scope.get("client") or ("", 0))[0],
        "SERVER_PROTOCOL": "HTTP/1.1",
        "GATEWAY_INTERFACE": "CGI/1.1",
    }
    for name, value in scope.get("headers", []):
        key = _PASSED_HEADERS.get(name.lower())
        if key:
            env[key] = value.decode("latin-1")
    proc = await asyncio.create_subprocess_exec(
        "git", "http-backend", env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )

    async def feed() -> None:
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    break
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > max_body_bytes:
                    raise BodyTooLarge()
                if chunk:
                    proc.stdin.write(chunk)
                    await proc.stdin.drain()
                if not message.get("more_body", False):
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()

    feeder = asyncio.create_task(feed())
    answered = False
    try:
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            head += chunk
            if len(head) > 65536:
                break
        if feeder.done() and feeder.exception() is not None:
            raise feeder.exception()
        sep = b"\r\n\r\n" if b"\r\n\r\n" in head else b"\n\n"
        header_blob, _, rest = head.partition(sep)
        status = 200
        headers: list[tuple[bytes, bytes]] = []
        for line in header_blob.splitlines():
            name, _, value = line.partition(b":")
            name, value = name.strip(), value.strip()
            if not name:
                continue
            if name.lower() == b"status":
                status = int(value.split()[0])
            else:
                headers.append((name.lower(), value))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if rest:
            await send({"type": "http.response.body", "body": rest, "more_body": True})
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        await feeder
        answered = True
    finally:
        if not feeder.done():
            feeder.cancel()
        # Kill only a backend cut off mid-answer. After a whole answer it is exiting on
        # its own, and a kill then (Popen.send_signal polls first) would reap it behind
        # asyncio's child watcher: "Unknown child process pid" warnings, and a signal
        # that could reach a recycled pid (CPython gh-127049).
        if not answered and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()
