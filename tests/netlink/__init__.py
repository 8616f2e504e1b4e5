"""Tests of vfl/netlink: a link's bounds, the shipped WAN relay, and training across it."""
