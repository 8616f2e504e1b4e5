"""Tests of vfl/wire: frames, typed messages, codecs, keys, the connection gate, and live attacks on the transport."""
