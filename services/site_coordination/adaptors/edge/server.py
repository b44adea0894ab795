"""Serving an ASGI app with uvicorn over TLS (plain HTTP only on loopback, when the
operator explicitly asks for development mode; DESIGN.md, The Site edge).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

import uvicorn


class InsecureServing(Exception):
    """Refusal to serve: no TLS material, or plain HTTP asked for on a non-loopback host."""


@dataclass(frozen=True)
class ServeOptions:
    """Where and how to listen. ``port`` 0 picks a free port."""

    host: str = "127.0.0.1"
    port: int = 8443
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_loopback: bool = False
    #: SO_REUSEPORT: several replicas on one host share the port and the kernel spreads
    #: new connections over them (the dev stack's ``--replicas``); off by default, so a
    #: second edge started by mistake fails to bind instead of taking half the traffic.
    reuse_port: bool = False


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_server(app, options: ServeOptions) -> tuple[uvicorn.Server, socket.socket]:
    """A uvicorn server and its bound socket (``sock.getsockname()[1]`` is the port).

    Raises :class:`InsecureServing` when TLS files are missing without the loopback
    development flag, or the flag is set for a non-loopback host.
    """
    tls = options.cert_file is not None and options.key_file is not None
    if not tls:
        if not options.insecure_loopback:
            raise InsecureServing("TLS certificate and key files are required "
                                  "(or the explicit loopback development flag)")
        if not _is_loopback(options.host):
            raise InsecureServing("plain HTTP is only allowed on a loopback address")
    config = uvicorn.Config(
        app, host=options.host, port=options.port, log_level="warning", access_log=False,
        ssl_certfile=str(options.cert_file) if tls else None,
        ssl_keyfile=str(options.key_file) if tls else None,
        timeout_graceful_shutdown=5, lifespan="on",
    )
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if options.reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    # Accepted connections inherit this; without it small TLS records wait for
    # delayed ACKs (about 40 ms per request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((options.host, options.port))
    sock.listen(128)
    sock.set_inheritable(True)
    return uvicorn.Server(config), sock
