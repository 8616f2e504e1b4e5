"""Private set intersection of sample ids between the leader and each follower (ECDH, before training)."""
