"""Wire: authenticated ZeroMQ framing and channels with deadlines."""

from vfl.wire.endpoint import PeerAbort, PeerLost, PeerTimeout
from vfl.wire.follower_channel import FollowerChannel
from vfl.wire.frames import PROTOCOL_VERSION, Message, WireError
from vfl.wire.leader_channel import LeaderChannel

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
