"""CurveZMQ key pairs of the parties: created owner-only (0600 in a 0700 directory), loaded strictly.

A party's key pair is two zmq.auth certificate files: `<party>.key` (public, given to the peers)
and `<party>.key_secret` (public + secret key, never leaves its host). A secret key file that any
other user could read is refused, and so is a public key that two parties would share.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
from dataclasses import dataclass, field

import zmq
from zmq.utils import z85

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
_PARTY = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_Z85_KEY = re.compile(rb"^[0-9A-Za-z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")
_MAX_CERT_BYTES = 64 * 1024


class KeyFileError(ValueError):
    """A key file that cannot be used; the text names the path and how to fix it."""


@dataclass(frozen=True)
class LeaderKeys:
    """The leader's own key pair and the admitted followers: z85 public key -> party name."""

    public: bytes
    secret: bytes
    followers: dict[bytes, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FollowerKeys:
    """A follower's own key pair and the leader's pinned public key (all z85)."""

    public: bytes
    secret: bytes
    leader: bytes
    leader_file: str = ""  # where the pinned key came from (named when the leader's key does not match it)


def key_paths(directory: str, party: str) -> tuple[str, str]:
    """(public, secret) certificate paths of `party` in `directory`."""
    return os.path.join(directory, party + PUBLIC_SUFFIX), os.path.join(directory, party + SECRET_SUFFIX)


def _certificate(public: bytes, secret: bytes | None, party: str) -> str:
    kind = "Secret" if secret else "Public"
    lines = [
        f"#   ZeroMQ CURVE {kind} Certificate of party {party} (python -m vfl.keys, {datetime.date.today()})",
        "#   "
        + (
            "KEEP THIS FILE PRIVATE: mode 0600, never copied to another host."
            if secret
            else "Give this file to the peers of this party."
        ),
        "",
        "metadata",
        f'    party = "{party}"',
        "curve",
        f'    public-key = "{public.decode()}"',
    ]
    if secret:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def _private_directory(directory: str) -> None:
    """Create `directory` 0700, or check that an existing one is closed to group and others."""
    try:
        os.makedirs(directory, mode=0o700, exist_ok=False)
        return
    except FileExistsError:
        pass
    if not os.path.isdir(directory):
        raise KeyFileError(f"--dir {directory} exists and is not a directory")
    mode = stat.S_IMODE(os.stat(directory).st_mode)
    if mode & 0o077:
        raise KeyFileError(
            f"key directory {directory} has mode {mode:04o}; secret keys need a directory only "
            f"its owner can open (chmod 700 {directory})"
        )


def create_key_pair(party: str, directory: str, force: bool = False) -> tuple[str, str]:
    """Write `party`'s new key pair into `directory`; return (public path, secret path)."""
    if not isinstance(party, str) or not _PARTY.match(party):
        raise KeyFileError(f"party must be a name matching {_PARTY.pattern}, got {party!r}")
    _private_directory(directory)
    public, secret = zmq.curve_keypair()
    pub_path, sec_path = key_paths(directory, party)
    for path in (pub_path, sec_path):
        if os.path.lexists(path):
            if not force:
                raise KeyFileError(f"{path} already exists; keep it, or pass --force to replace {party}'s key pair")
            os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(sec_path, flags, 0o600)  # created 0600: never readable by others, not even for an instant
    with os.fdopen(fd, "w") as f:
        f.write(_certificate(public, secret, party))
    fd = os.open(pub_path, flags, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(_certificate(public, None, party))
    return pub_path, sec_path


def _read_certificate(path: str, what: str, owner: str | None = None) -> tuple[bytes, bytes | None]:
    """(public, secret or None) from a zmq.auth certificate, each a validated z85 key. owner: the peer whose public
    key this is, named when the file is missing (only that peer can give it)."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_CERT_BYTES + 1)
    except FileNotFoundError:
        if owner is not None:
            raise KeyFileError(
                f"{what} {path} does not exist: obtain {owner}'s public key ({os.path.basename(path)}, written by "
                f"`python -m vfl.keys new` on {owner}'s host; only that public file, never its {SECRET_SUFFIX}) "
                f"and put it at {path}"
            ) from None
        raise KeyFileError(
            f"{what} {path} does not exist; create key pairs with `python -m vfl.keys new PARTY --dir DIR`"
        ) from None
    except OSError as e:
        raise KeyFileError(f"{what} {path} cannot be read: {e.strerror}") from None
    return _parse_certificate(data, path, what)


def _parse_certificate(data: bytes, path: str, what: str) -> tuple[bytes, bytes | None]:
    if len(data) > _MAX_CERT_BYTES:
        raise KeyFileError(f"{what} {path} is larger than {_MAX_CERT_BYTES} bytes: not a key certificate")
    found: dict[bytes, bytes] = {}
    for line in data.splitlines():
        line = line.strip()
        for name in (b"public-key", b"secret-key"):
            if line.startswith(name) and b"=" in line:
                found.setdefault(name, line.split(b"=", 1)[1].strip(b" \t'\""))
    public, secret = found.get(b"public-key"), found.get(b"secret-key")
    for label, key in (("public", public), ("secret", secret)):
        if key is not None and not _Z85_KEY.match(key):
            raise KeyFileError(f"{what} {path}: the {label} key is not a 40-character Z85 CURVE key")
    if public is None:
        raise KeyFileError(
            f"{what} {path} holds no public-key line: not a zmq.auth certificate "
            f"(create one with `python -m vfl.keys new PARTY --dir DIR`)"
        )
    return public, secret


def load_secret_key(path: str) -> tuple[bytes, bytes]:
    """This party's (public, secret) key pair; refused when the file is readable by anyone but its owner."""
    try:  # the checks and the read are on one open file: no window between them, no symlink followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise KeyFileError(
            f"secret key file {path} does not exist; create it with `python -m vfl.keys new PARTY --dir DIR`"
        ) from None
    except OSError as e:
        raise KeyFileError(
            f"secret key file {path} cannot be read: {e.strerror} (a symbolic link is refused)"
        ) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.geteuid():
            raise KeyFileError(f"secret key file {path} is owned by uid {st.st_uid}, not by this user ({os.geteuid()})")
        if mode & 0o077:
            raise KeyFileError(
                f"secret key file {path} has mode {mode:04o}; it must be readable by its owner only (chmod 600 {path})"
            )
        data = f.read(_MAX_CERT_BYTES + 1)
    public, secret = _parse_certificate(data, path, "secret key file")
    if secret is None:
        raise KeyFileError(
            f"secret key file {path} holds only a public key (give the {SECRET_SUFFIX} file, not {PUBLIC_SUFFIX})"
        )
    if zmq.curve_public(secret) != public:
        raise KeyFileError(f"secret key file {path}: its public key does not belong to its secret key")
    return public, secret


def load_public_key(path: str, owner: str | None = None) -> bytes:
    """A peer's z85 public key from its certificate (owner: that peer's name, for the error of a missing file)."""
    return _read_certificate(path, "public key file", owner)[0]


def load_leader_keys(secret_file: str, follower_files: dict[str, str]) -> LeaderKeys:
    """The leader's key pair and its admitted followers; one key per party, none shared or the leader's own."""
    public, secret = load_secret_key(secret_file)
    followers: dict[bytes, str] = {}
    for party, path in follower_files.items():
        key = load_public_key(path, party)
        if key == public:
            raise KeyFileError(f"public key file {path} of {party} holds the leader's own public key")
        if key in followers:
            raise KeyFileError(
                f"{followers[key]} and {party} have the same public key ({path}); every party needs its own key pair"
            )
        followers[key] = party
    return LeaderKeys(public, secret, followers)


def load_follower_keys(secret_file: str, leader_file: str) -> FollowerKeys:
    """A follower's key pair and the leader's public key that it pins."""
    public, secret = load_secret_key(secret_file)
    leader = load_public_key(leader_file, "the leader")
    if leader == public:
        raise KeyFileError(f"leader public key file {leader_file} holds this follower's own public key")
    return FollowerKeys(public, secret, leader, leader_file)


def fingerprint(public: bytes) -> str:
    """A short printable tag of a public key, for logs and errors (never the secret)."""
    return z85.decode(public).hex()[:16]
