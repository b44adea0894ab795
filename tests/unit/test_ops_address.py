"""METALLO_OPS_ADDRESS parsing: host:port, loopback with a system-picked port by
default, a clear error naming the variable otherwise."""

import pytest

from metallo.operations.server import ops_address


def test_default_is_loopback_with_a_picked_port():
    assert ops_address({}) == ("127.0.0.1", 0)


@pytest.mark.parametrize(("raw", "want"), [("127.0.0.1:9464", ("127.0.0.1", 9464)),
                                           ("0.0.0.0:9100", ("0.0.0.0", 9100)),
                                           ("[::1]:9100", ("::1", 9100))])
def test_host_and_port(raw, want):
    assert ops_address({"METALLO_OPS_ADDRESS": raw}) == want


@pytest.mark.parametrize("raw", ["9100", "localhost:", ":9100", "host:99999", "host:http"])
def test_bad_address_names_the_variable(raw):
    with pytest.raises(ValueError, match="METALLO_OPS_ADDRESS"):
        ops_address({"METALLO_OPS_ADDRESS": raw})
