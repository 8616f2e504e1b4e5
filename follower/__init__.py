"""A feature party: bottom model over its own columns, driven by the leader's messages."""
