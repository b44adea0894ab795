"""The git adapter over real HTTPS (git smart HTTP via git http-backend) with a credential."""

from __future__ import annotations

import base64
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from metallo.repository_policy import RepositoryPolicy
from tests.git_cgi import serve_git
from tests.unit.workload_portfolio_repos import ACTIONS, git, make_repo
from workload_portfolio.adaptors.git_source import Credential, GitSourceControl, HostCredentials
from workload_portfolio.domain.errors import SourceError

pytestmark = pytest.mark.integration

USER, SECRET = "deploy", "s3cret-token"


class _GitHandler(BaseHTTPRequestHandler):
    """Basic-auth gate in front of ``git http-backend`` (CGI)."""

    root: Path
    seen_auth: list[str]

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _serve(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.seen_auth.append(auth)
        if auth != "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode():
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        serve_git(self, self.root, USER, path, query)

    do_GET = _serve
    do_POST = _serve


@pytest.fixture
def https_git(tmp_path):
    root = tmp_path / "srv"
    make_repo(root / "lab" / "models", {"actions.yaml": ACTIONS})
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    handler = type("H", (_GitHandler,), {"root": root, "seen_auth": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert.configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.server_address[1]}"
    yield host, str(ca_file), root / "lab" / "models", handler
    server.shutdown()
    server.server_close()


async def test_https_read_with_a_credential(https_git):
    host, ca_file, repo, handler = https_git
    url = f"https://{host}/lab/models"
    creds = HostCredentials({host: Credential(USER, SECRET)})
    source = GitSourceControl(policy=RepositoryPolicy.of([host]), timeout_seconds=30,
                              credentials=creds, ca_file=ca_file)
    f = await source.read_file(url, branch="main", commit=None, path="actions.yaml", max_bytes=10**6)
    assert f.commit == git(repo, "rev-parse", "HEAD") and f.content.decode() == ACTIONS
    assert any(a.startswith("Basic ") for a in handler.seen_auth)
    with pytest.raises(SourceError) as exc:
        await source.read_file(url, branch="nope", commit=None, path="actions.yaml", max_bytes=10**6)
    assert exc.value.code == "branch-not-found"
    with pytest.raises(SourceError) as exc:
        await source.read_file(f"https://{host}/lab/missing", branch="main", commit=None,
                               path="actions.yaml", max_bytes=10**6)
    assert exc.value.code == "repository-not-found"


async def test_https_without_the_credential_is_refused_without_prompting(https_git):
    host, ca_file, _repo, _handler = https_git
    source = GitSourceControl(policy=RepositoryPolicy.of([host]), timeout_seconds=30,
                              ca_file=ca_file)  # no credentials, no prompt possible
    with pytest.raises(SourceError) as exc:
        await source.read_file(f"https://{host}/lab/models", branch="main", commit=None,
                               path="actions.yaml", max_bytes=10**6)
    assert exc.value.code == "repository-not-found"
    assert SECRET not in exc.value.message


async def test_https_branches_with_the_credential_and_refused_without(https_git):
    host, ca_file, repo, handler = https_git
    git(repo, "branch", "dev")
    git(repo, "branch", "feature/x")
    url = f"https://{host}/lab/models"
    creds = HostCredentials({host: Credential(USER, SECRET)})
    source = GitSourceControl(policy=RepositoryPolicy.of([host]), timeout_seconds=30,
                              credentials=creds, ca_file=ca_file)
    found = await source.list_branches(url)
    tip = git(repo, "rev-parse", "HEAD")
    assert found.branches == (("dev", tip), ("feature/x", tip), ("main", tip))
    assert found.default_branch == "main" and found.truncated is False
    with pytest.raises(SourceError) as exc:
        await source.list_branches(f"https://{host}/lab/missing")
    assert exc.value.code == "repository-not-found"
    anonymous = GitSourceControl(policy=RepositoryPolicy.of([host]), timeout_seconds=30,
                                 ca_file=ca_file)
    with pytest.raises(SourceError) as exc:
        await anonymous.list_branches(url)
    assert exc.value.code == "repository-not-found" and SECRET not in exc.value.message
