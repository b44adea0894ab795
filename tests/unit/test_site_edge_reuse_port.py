"""The Site edge's listening socket: replicas on one host share the port only when
asked (METALLO_SITE_EDGE_REUSE_PORT); otherwise a second edge fails to bind."""

from __future__ import annotations

import pytest

from site_coordination.adaptors.edge.server import ServeOptions, build_server


def _options(port: int, reuse: bool) -> ServeOptions:
    return ServeOptions(port=port, insecure_loopback=True, reuse_port=reuse)


def test_two_edges_share_a_port_with_reuse_port():
    _, first = build_server(None, _options(0, True))
    try:
        port = first.getsockname()[1]
        _, second = build_server(None, _options(port, True))
        assert second.getsockname()[1] == port
        second.close()
    finally:
        first.close()


def test_a_second_edge_without_reuse_port_fails_to_bind():
    _, first = build_server(None, _options(0, False))
    try:
        with pytest.raises(OSError):
            build_server(None, _options(first.getsockname()[1], False))
    finally:
        first.close()


def test_reuse_port_is_read_from_the_environment(monkeypatch):
    from site_coordination.adaptors.settings import Settings

    monkeypatch.setenv("METALLO_SITE_EDGE_REUSE_PORT", "1")
    assert Settings.from_environment().serve.reuse_port is True
    monkeypatch.delenv("METALLO_SITE_EDGE_REUSE_PORT")
    assert Settings.from_environment().serve.reuse_port is False
