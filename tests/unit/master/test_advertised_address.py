"""How a master names itself in the lease row, which standbys quote as the active master."""

from __future__ import annotations

import socket

from master.daemon import advertised_address


def test_a_wildcard_listen_host_is_named_by_this_hosts_name_and_others_are_kept() -> None:
    """0.0.0.0, :: and an empty host become this host's name (a standby's "the active master
    is ..." must be reachable); a specific host stays as configured."""
    name = socket.getfqdn()
    assert advertised_address("0.0.0.0:50051") == f"{name}:50051"
    assert advertised_address("[::]:50051") == f"{name}:50051"
    assert advertised_address(":50051") == f"{name}:50051"
    assert advertised_address("10.0.0.2:50051") == "10.0.0.2:50051"
    assert advertised_address("head-a.lab.example:50051") == "head-a.lab.example:50051"
