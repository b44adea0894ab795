"""A Git smart-HTTP server over HTTPS for the kubernetes executor's tests: the
repository is fetched and pushed with the stage grant the helper Pod received through
its Secret, as from the lab Git server of the dev stack.

HTTP Basic is required: the username is the grant's (``grant-stage-in`` may fetch only,
``grant-stage-out`` fetch and push) and the password a ``prt_`` token; anything else
gets 401 (403 for a push with a stage-in grant). ``git http-backend`` serves
:data:`tests.k8s.lab.REPOS`; the TLS certificate comes from a test CA whose file the
helper Pods (running as the member) can read.
"""

from __future__ import annotations

import base64
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trustme

from tests.git_cgi import serve_git

FETCH_ONLY = "grant-stage-in"
FETCH_AND_PUSH = "grant-stage-out"


class _Handler(BaseHTTPRequestHandler):
    server: GitHttpsServer  # type: ignore[assignment]

    def log_message(self, *args) -> None:  # the test output stays quiet
        pass

    def _user(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return None
        try:
            user, _, token = base64.b64decode(auth[6:]).decode().partition(":")
        except ValueError:
            return None
        if user in (FETCH_ONLY, FETCH_AND_PUSH) and token.startswith("prt_"):
            return user
        return None

    def _serve(self) -> None:
        user = self._user()
        path, _, query = self.path.partition("?")
        pushing = path.endswith("/git-receive-pack") or "service=git-receive-pack" in query
        self.server.seen.append((user or "-", "push" if pushing else "fetch"))
        if user is None or (pushing and user != FETCH_AND_PUSH):
            self.send_response(403 if user else 401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        serve_git(
            self,
            self.server.root,
            user,
            path.removeprefix("/git"),
            query,
            {
                "GIT_CONFIG_NOSYSTEM": "1",
                # The bare repositories belong to the member; the server runs as root.
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "safe.directory",
                "GIT_CONFIG_VALUE_0": "*",
            },
        )

    do_GET = _serve
    do_POST = _serve


class GitHttpsServer(ThreadingHTTPServer):
    """Serves ``root``'s bare repositories at ``https://127.0.0.1:<port>/git/<name>.git``;
    ``seen`` lists (username, ``fetch``/``push``) per request. A context manager."""

    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.seen: list[tuple[str, str]] = []
        ca = trustme.CA()
        root.mkdir(parents=True, exist_ok=True)
        self.ca_file = root / f"ca-{self.server_address[1]}.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self.ca_file.chmod(0o644)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def url(self, bare: Path) -> str:
        """The HTTPS URL of the bare repository ``bare`` (under ``root``)."""
        return f"https://127.0.0.1:{self.server_address[1]}/git/{bare.relative_to(self.root)}"

    def __enter__(self) -> GitHttpsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()
        self.ca_file.unlink(missing_ok=True)
