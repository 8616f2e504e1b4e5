"""Wire: authenticated ZeroMQ framing and channels with deadlines."""

from vfl.wire.channel import FollowerChannel, LeaderChannel, PeerAbort, PeerLost, PeerTimeout
from vfl.wire.frames import PROTOCOL_VERSION, Message, WireError

__all__ = [
    "FollowerChannel",
    "LeaderChannel",
    "Message",
    "PeerAbort",
    "PeerLost",
    "PeerTimeout",
    "PROTOCOL_VERSION",
    "WireError",
]
