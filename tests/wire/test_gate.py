"""The connection gate's address groups: the cap on pending connections is per network (IPv4 /24, IPv6 /48), so a
stranger's connections from one network never crowd out a follower connecting from another."""

from __future__ import annotations

import ipaddress

from vfl.wire.gate import address_group


def test_addresses_of_one_ipv4_24_share_a_group_and_others_do_not():
    # Execute / Assert
    assert address_group(("10.1.2.3", 5555)) == address_group(("10.1.2.200", 1)) == ipaddress.ip_network("10.1.2.0/24")
    assert address_group(("10.1.3.3", 5555)) != address_group(("10.1.2.3", 5555))


def test_ipv6_groups_by_48_and_a_mapped_ipv4_address_is_its_ipv4_group():
    # Execute / Assert
    assert address_group(("2001:db8:1:2::5", 1, 0, 0)) == address_group(("2001:db8:1:ffff::9", 1, 0, 0))
    assert address_group(("2001:db8:2::5", 1, 0, 0)) != address_group(("2001:db8:1::5", 1, 0, 0))
    assert address_group(("::ffff:10.1.2.3", 1, 0, 0)) == ipaddress.ip_network("10.1.2.0/24")


def test_an_address_that_is_not_ip_is_its_own_group():
    # Execute / Assert
    assert address_group(None) is None and address_group("ipc://x") == "ipc://x"
