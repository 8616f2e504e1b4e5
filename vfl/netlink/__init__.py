"""The network between parties, emulated and budgeted: a WAN relay for tests and benchmarks, and a link's bounds."""
