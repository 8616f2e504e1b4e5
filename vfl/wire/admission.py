"""The leader's ZAP handler: admit only configured follower keys and name each connection by its key's party.

Each refused key is named in the leader's log, once per key and for at most NAMED_KEYS keys (a stranger cannot flood
the log).

pyzmq's ThreadAuthenticator answers libzmq's ZAP requests. It must run on the *same* zmq.Context as
the socket it guards (its default, Context.instance(), is another one: libzmq then finds no handler
and, without ZAP_ENFORCE_DOMAIN, admits every CURVE client). The party name it returns becomes each
message's `User-Id` property, which is the only sender identity the leader trusts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from vfl.wire.curve_keys import fingerprint

ZAP_DOMAIN = "vfl"
NAMED_KEYS = 16  # refused keys named in the log, each once; beyond them one line says the rest go unnamed


class Admission(ThreadAuthenticator):
    """ZAP for one ROUTER socket: z85 public key -> party name; every other key is refused."""

    def __init__(self, context: zmq.Context, parties: dict[bytes, str], notice: Callable[[str], None] | None = None):
        super().__init__(context=context, log=logging.getLogger("vfl.wire.admission"))
        self.parties = dict(parties)
        self.refused = 0
        self.named: set[bytes] = set()  # refused keys already named in the log (at most NAMED_KEYS)
        # the leader's log: a RunLog's warning level where it has one (called from the authenticator's thread)
        self.notice = getattr(notice, "warning", notice)
        self._address = ""
        self.configure_curve_callback(ZAP_DOMAIN, self)

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        # the request's peer address (ZAP RFC 27: version, id, domain, address, ...), for the refusal's log line;
        # the callback runs before the request's first await, so no other request overwrites it meanwhile
        self._address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else ""
        await super().handle_zap_message(msg)

    def callback(self, domain: str, key: bytes) -> bool:
        """Called by the authenticator with the client's z85 public key."""
        ok = domain == ZAP_DOMAIN and key in self.parties
        if not ok:
            self.refused += 1
            self._name_refused(key)
        return ok

    def _name_refused(self, key: bytes) -> None:
        """One log line for a refused key the first time it is seen, for NAMED_KEYS keys; then one line that says
        further keys go unnamed. A follower refused here completed the CURVE handshake (it pins this leader's key), so
        its key is known and only the leader's list lacks it."""
        if self.notice is None or key in self.named or len(self.named) > NAMED_KEYS:
            return
        self.named.add(key)
        if len(self.named) > NAMED_KEYS:
            self.notice(f"refused CURVE keys: {NAMED_KEYS} named above; further refused keys are not named")
            return
        admitted = ", ".join(f"{p} {fingerprint(k)}" for k, p in sorted(self.parties.items(), key=lambda kv: kv[1]))
        self.notice(
            f"refused a CURVE handshake from {self._address or 'an unknown address'}: its key (fingerprint "
            f"{fingerprint(key)}) is not in network.follower_keys (admitted: {admitted}); if it is a follower of this "
            f"run, its public key file here is not the one it holds: compare `python -m vfl.keys show` on both hosts"
        )

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
