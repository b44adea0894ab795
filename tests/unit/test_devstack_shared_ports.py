"""``metallo dev up`` never prepares over another checkout's running stack: the dev
databases, broker users and ports are shared by every checkout on the machine."""

from __future__ import annotations

import socket

import pytest

from metallo.devstack import control


def test_a_taken_edge_port_without_a_stack_here_is_refused_before_anything_changes():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(control.StackError) as refused:
            control.refuse_a_stack_of_another_checkout(port)
    e = refused.value
    assert e.code == "dev-stack-elsewhere" and f"127.0.0.1:{port} is taken" in str(e)
    assert "nothing was changed" in str(e) and "metallo dev down" in e.hint


def test_a_free_edge_port_lets_up_go_on():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert control.port_taken(port) is False
    control.refuse_a_stack_of_another_checkout(port)  # no exception
