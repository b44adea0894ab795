"""TLS material for the Site edge and the lab Git server (DESIGN.md, The Site edge).

``make_dev_certificates`` writes a local development CA and a server certificate
for ``127.0.0.1``/``localhost`` (``python -m site_coordination dev-cert DIR``).
Production certificates come from the operator as files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DevCertificates:
    """Paths of the development CA certificate and the server certificate/key."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_dev_certificates(directory: Path, names: tuple[str, ...] = ("127.0.0.1", "localhost")
                          ) -> DevCertificates:
    """Create ``ca.pem``, ``server.pem`` (chain) and ``server-key.pem`` (mode 0600) in
    ``directory`` with trustme; existing files are replaced. Development only.
    """
    import trustme  # development dependency: only this command needs it

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Metallo development CA")
    cert = ca.issue_cert(*names)
    paths = DevCertificates(directory / "ca.pem", directory / "server.pem",
                            directory / "server-key.pem")
    ca.cert_pem.write_to_path(str(paths.ca_cert))
    with open(paths.server_cert, "wb") as fh:
        fh.writelines(blob.bytes() for blob in cert.cert_chain_pems)
    fd = os.open(paths.server_key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(cert.private_key_pem.bytes())
    return paths
