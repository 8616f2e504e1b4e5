"""The leader's ZAP handler: admit only configured follower keys and name each connection by its key's party.

pyzmq's ThreadAuthenticator answers libzmq's ZAP requests. It must run on the *same* zmq.Context as
the socket it guards (its default, Context.instance(), is another one: libzmq then finds no handler
and, without ZAP_ENFORCE_DOMAIN, admits every CURVE client). The party name it returns becomes each
message's `User-Id` property, which is the only sender identity the leader trusts.
"""

from __future__ import annotations

import logging

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

ZAP_DOMAIN = "vfl"


class Admission(ThreadAuthenticator):
    """ZAP for one ROUTER socket: z85 public key -> party name; every other key is refused."""

    def __init__(self, context: zmq.Context, parties: dict[bytes, str]):
        super().__init__(context=context, log=logging.getLogger("vfl.wire.admission"))
        self.parties = dict(parties)
        self.refused = 0
        self.configure_curve_callback(ZAP_DOMAIN, self)

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by the authenticator with the client's z85 public key."""
        ok = domain == ZAP_DOMAIN and key in self.parties
        if not ok:
            self.refused += 1
        return ok

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.parties[z85.encode(client_public_key)]


def guard(sock: zmq.Socket, public: bytes, secret: bytes) -> None:
    """Make `sock` a CURVE server whose clients must pass the ZAP handler of its context."""
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
    sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no handler, or another domain: refuse, never admit


def pin(sock: zmq.Socket, public: bytes, secret: bytes, server: bytes) -> None:
    """Make `sock` a CURVE client that only completes a handshake with the holder of `server`'s secret key."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, server)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
