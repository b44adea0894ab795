"""``git http-backend`` behind a test's ``http.server`` handler (git smart HTTP as CGI):
the tests' HTTPS Git servers share it (tests/k8s/git_https.py, the workload
portfolio's HTTPS test)."""

from __future__ import annotations

import os
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path


def serve_git(
    handler: BaseHTTPRequestHandler,
    root: Path,
    user: str,
    path_info: str,
    query: str,
    extra_env: dict[str, str] | None = None,
) -> None:
    """Answer ``handler``'s request with ``git http-backend`` over the bare repositories
    of ``root`` as the authenticated ``user`` (the request body is read here). No shell:
    every request value travels in the CGI environment."""
    length = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(length) if length else b""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": path_info,
        "QUERY_STRING": query,
        "REQUEST_METHOD": handler.command,
        "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_USER": user,
        "GIT_PROTOCOL": handler.headers.get("Git-Protocol", ""),
        "HTTP_CONTENT_ENCODING": handler.headers.get("Content-Encoding", ""),
        **(extra_env or {}),
    }
    out = subprocess.run(
        ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
    ).stdout
    head, _, payload = out.partition(b"\r\n\r\n")
    status, headers = 200, []
    for line in head.decode(errors="replace").split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split()[0])
        elif name:
            headers.append((name, value.strip()))
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
