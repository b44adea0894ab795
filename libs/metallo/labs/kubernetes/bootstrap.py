"""The lab's credentials and client files under its state directory.

    <state>/ca.pem                 the lab CA (clients trust it)
    <state>/server.pem, server-key.pem   the API server's certificate (127.0.0.1, localhost)
    <state>/runtime-token          the Site Runtime's bearer token (mode 0600)
    <state>/admin-token            the lab administrator's token (system:masters; tests only)
    <state>/kubeconfig             the Runtime's kubeconfig (mode 0600): server, CA, token
    <state>/admin.kubeconfig       the administrator's kubeconfig (mode 0600)

Certificates and tokens are made once and kept; kubeconfigs are rewritten at each
start (the port may change).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from ruamel.yaml import YAML


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def ensure_certificates(state: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server-key.pem), created with trustme when missing."""
    ca, cert, key = state / "ca.pem", state / "server.pem", state / "server-key.pem"
    if not (ca.exists() and cert.exists() and key.exists()):
        import trustme  # development dependency: the lab is development software

        authority = trustme.CA(organization_name="Metallo Kubernetes lab CA")
        issued = authority.issue_cert("127.0.0.1", "localhost", "kubernetes.default.svc")
        authority.cert_pem.write_to_path(str(ca))
        cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
        _write_private(key, issued.private_key_pem.bytes().decode())
        os.chmod(ca, 0o644)
        os.chmod(cert, 0o644)
    return ca, cert, key


def ensure_token(path: Path) -> str:
    """The token in ``path``, made (32 random bytes, URL-safe) when missing."""
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(32) + "\n")
    return path.read_text(encoding="utf-8").strip()


def write_kubeconfig(path: Path, server: str, ca: Path, user: str, token: str,
                     namespace: str = "default") -> None:
    """A kubeconfig with one cluster ``metallo-lab``, one user and one context."""
    doc = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "metallo-lab", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": f"{user}@metallo-lab",
                      "context": {"cluster": "metallo-lab", "user": user, "namespace": namespace}}],
        "current-context": f"{user}@metallo-lab",
    }
    import io

    out = io.StringIO()
    YAML().dump(doc, out)
    _write_private(path, out.getvalue())
