"""The follower's write-ahead send ledger: every release of a row's cut, in every process, charged before it is sent.

    <dir>/sends.journal   append-only records, each MACed into a chain (HMAC-SHA256 under the ledger key)
    <dir>/sends.seal      JSON {format, generation, size, tail, mac}: how many records and bytes, the chain's tail
    <dir>/lock            flock'ed around every charge, so concurrent processes (serving, prediction) count together
    <marker>              `<secret key file>.edp-sealed`, created with the first record: this key has a ledger

A scope is one model's sends: `train/<lineage>` for a training run and every run resumed from it (row positions of
the train, valid and test splits; every training send is a new release: the weights moved) and `model/<digest>` for
a trained model scored by prediction or serving (keyed by id, with the released value's digest: a repeat of the same
value is free, privacy/embedding_noise.py). A scope's calibration (noise multiplier, the cap on releases per row) is
recorded with its first charge and fixed for the scope's life.

`charge` is write-ahead: the counts after the charge are computed, a row past the scope's cap refuses the whole
charge (`ReleaseCapError`, nothing written, nothing sent), otherwise the record is appended and fsynced and the seal
rewritten (fsync, rename, fsync of the directory) before the caller sends. At open the whole chain is checked: an
edited record, a journal shorter than the seal says (rolled back), a missing journal or seal, or a missing ledger
where the key's marker says one existed, are refused with one line. A record past the seal whose MAC verifies is a
charge whose seal write was cut short (kept: its cut may have left); a torn tail was never sent (dropped).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import struct
import time

import numpy as np

from privacy.durable_files import fsync_directory, write_bytes

JOURNAL = "sends.journal"
SEAL = "sends.seal"
LOCK = "lock"
MAGIC = b"VFLE"
SEAL_FORMAT = 1
_HEAD = struct.Struct("<4sIQ")  # magic, header bytes, body bytes
_MAC = 32
LOCK_DEADLINE_S = 60.0  # the longest a charge waits for another process's


class SendLedgerError(ValueError):
    """The send ledger cannot be trusted or written (one line naming the file and what to do)."""


class ReleaseCapError(SendLedgerError):
    """A row's cut would be released more often than its scope's cap: refused before anything is sent."""


def marker_path(secret_key_file: str) -> str:
    """The file beside the follower's secret key that records that its send ledger exists."""
    return f"{secret_key_file}.edp-sealed"


def _write_private(path: str, data: bytes) -> None:
    """`data` under `path` durably (privacy/durable_files.py: 0600, fsynced, renamed into place, the directory
    fsynced)."""
    try:
        write_bytes(path, data, mode=0o600)
    except OSError as e:
        raise SendLedgerError(f"embedding-DP send ledger {path} cannot be written: {e.strerror}") from None


class _Scope:
    """One scope's counts: per space, an int array over row positions, or per id the set of released digests."""

    def __init__(self):
        self.plan: dict | None = None
        self.positions: dict[str, np.ndarray] = {}
        self.digests: dict[str, dict[int, dict[bytes, bytes]]] = {}  # space -> id -> {digest: value bytes}

    def counts_after(self, space: str, keys: np.ndarray, digests: np.ndarray | None):
        """(counts after charging, the new (key, digest) pairs or None) without changing anything."""
        if digests is None:
            have = self.positions.get(space, np.zeros(0, np.int64))
            grown = np.zeros(max(have.size, int(keys.max()) + 1 if keys.size else 0), np.int64)
            grown[: have.size] = have
            np.add.at(grown, keys, 1)
            return grown[keys], None
        seen = self.digests.get(space, {})
        fresh: dict[int, dict[bytes, int]] = {}  # id -> {new digest: its first row in this charge}
        for i, (k, d) in enumerate(zip(keys.tolist(), (bytes(r) for r in np.ascontiguousarray(digests, "<u8")))):
            if d not in seen.get(k, ()):
                fresh.setdefault(k, {}).setdefault(d, i)
        after = np.array([len(seen.get(k, ())) + len(fresh.get(k, ())) for k in keys.tolist()], np.int64)
        return after, fresh

    def apply(self, space: str, keys: np.ndarray, digests: np.ndarray | None, values: np.ndarray | None = None) -> None:
        if digests is None:
            have = self.positions.get(space, np.zeros(0, np.int64))
            if keys.size and int(keys.max()) >= have.size:
                grown = np.zeros(int(keys.max()) + 1, np.int64)
                grown[: have.size] = have
                have = grown
            np.add.at(have, keys, 1)
            self.positions[space] = have
            return
        seen = self.digests.setdefault(space, {})
        rows = (bytes(r) for r in np.ascontiguousarray(values, "<f4")) if values is not None else iter(lambda: b"", 0)
        for k, d in zip(keys.tolist(), (bytes(r) for r in np.ascontiguousarray(digests, "<u8")), strict=True):
            seen.setdefault(k, {})[d] = next(rows)

    def most(self) -> int:
        """The most releases of any one row in this scope."""
        tops = [int(a.max()) for a in self.positions.values() if a.size]
        tops += [max((len(s) for s in d.values()), default=0) for d in self.digests.values()]
        return max(tops, default=0)

    def releases(self) -> int:
        return int(sum(int(a.sum()) for a in self.positions.values())) + sum(
            len(s) for d in self.digests.values() for s in d.values()
        )


class SendLedger:
    """The follower's send ledger in `directory`, MACed under `key` (privacy/embedding_noise.ledger_key)."""

    def __init__(self, directory: str, key: bytes, marker: str):
        self.dir, self.key, self.marker = os.path.abspath(directory), key, marker
        self.journal = os.path.join(self.dir, JOURNAL)
        self.seal = os.path.join(self.dir, SEAL)
        self.scopes: dict[str, _Scope] = {}
        self.offset = 0
        self.generation = 0
        self.tail = hmac.new(key, b"vfl/embedding-dp/send-ledger/genesis", hashlib.sha256).digest()
        with self._locked():
            self._open()

    # -- files -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            fd = os.open(os.path.join(self.dir, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise SendLedgerError(f"embedding-DP send ledger: {self.dir} cannot be opened: {e.strerror}") from None
        try:
            deadline = time.monotonic() + LOCK_DEADLINE_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise SendLedgerError(
                            f"embedding-DP send ledger {self.dir}: another process has held its lock for "
                            f"{LOCK_DEADLINE_S:g} s (a stopped prediction or serving process?); nothing sent"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)

    def _refuse(self, what: str) -> SendLedgerError:
        return SendLedgerError(
            f"embedding-DP send ledger {self.dir}: {what}; every cut this follower sent for its models is counted "
            f"there, so nothing is sent until it is restored (or, knowing that every earlier release is then "
            f"uncounted, remove {self.marker} and the ledger directory)"
        )

    def _read_seal(self) -> dict | None:
        if not os.path.exists(self.seal):
            return None
        try:
            doc = json.loads(open(self.seal, "rb").read())
            fields = {k: doc[k] for k in ("format", "generation", "size", "tail")}
        except (OSError, ValueError, KeyError, TypeError):
            raise self._refuse(f"its seal {self.seal} is damaged") from None
        if not hmac.compare_digest(str(doc.get("mac", "")), self._seal_mac(fields)):
            raise self._refuse(f"its seal {self.seal} does not verify under this follower's key (edited or foreign)")
        return fields

    def _seal_mac(self, fields: dict) -> str:
        return hmac.new(self.key, b"seal|" + json.dumps(fields, sort_keys=True).encode(), hashlib.sha256).hexdigest()

    def _open(self) -> None:
        seal = self._read_seal()
        exists = os.path.exists(self.journal)
        if not exists:
            if seal is not None and seal["generation"] > 0:
                raise self._refuse(f"its journal {self.journal} is missing (deleted) while its seal names one")
            if os.path.exists(self.marker):
                raise self._refuse(f"the journal is missing although {self.marker} records that this key has one")
            return
        if seal is None and os.path.exists(self.marker):
            raise self._refuse(f"its seal {self.seal} is missing (deleted) while {self.marker} records one")
        self._catch_up(seal)
        if seal is None and self.generation > 1:  # one record: the first seal write may have been cut short
            raise self._refuse(f"its seal {self.seal} is missing (deleted) while the journal exists")
        if seal is not None and (self.generation < seal["generation"] or self.offset < seal["size"]):
            raise self._refuse(
                f"its journal holds {self.generation} records but its seal names {seal['generation']} (rolled back)"
            )
        if seal is not None:
            self._mark()  # a marker deleted by hand is written again: the ledger's existence stays recorded

    def _catch_up(self, seal: dict | None = None) -> None:
        """Read and verify the records past `self.offset` (written by this or another process)."""
        if not os.path.exists(self.journal):
            if self.generation:
                raise self._refuse(f"its journal {self.journal} was deleted while this process used it")
            return
        if os.path.getsize(self.journal) < self.offset:
            raise self._refuse(f"its journal {self.journal} shrank while this process used it (rolled back)")
        with open(self.journal, "rb") as f:
            f.seek(self.offset)
            while True:
                start = f.tell()
                head = f.read(_HEAD.size)
                if not head:
                    return
                torn = len(head) < _HEAD.size
                if not torn:
                    magic, hlen, blen = _HEAD.unpack(head)
                    if magic != MAGIC or hlen > 1 << 20 or blen > 1 << 40:
                        raise self._refuse(f"record {self.generation} of {self.journal} is damaged")
                    rest = f.read(hlen + blen + _MAC)
                    torn = len(rest) < hlen + blen + _MAC
                if torn:
                    if seal is not None and start < seal["size"]:
                        raise self._refuse(f"{self.journal} is shorter than its seal says (truncated)")
                    os.truncate(self.journal, start)  # a charge cut short before its record was whole: never sent
                    return
                header, body, mac = rest[:hlen], rest[hlen : hlen + blen], rest[hlen + blen :]
                tail = hmac.new(self.key, self.tail + header + body, hashlib.sha256).digest()
                if not hmac.compare_digest(tail, mac):
                    raise self._refuse(f"record {self.generation} of {self.journal} does not verify (edited)")
                if seal is not None and f.tell() == seal["size"] and tail.hex() != seal["tail"]:
                    raise self._refuse(f"{self.journal} does not end where its seal says (replaced)")
                self._apply(json.loads(header), body)
                self.tail, self.offset, self.generation = tail, f.tell(), self.generation + 1

    def _apply(self, header: dict, body: bytes) -> None:
        scope = self.scopes.setdefault(header["scope"], _Scope())
        if header["kind"] == "plan":
            scope.plan = scope.plan or header["plan"]
            return
        n, dim = int(header["n"]), int(header.get("dim", 0))
        keys = np.frombuffer(body[: 8 * n], "<i8")
        digests = values = None
        if header.get("digests"):
            digests = np.frombuffer(body[8 * n : 24 * n], "<u8").reshape(n, 2)
            values = np.frombuffer(body[24 * n :], "<f4").reshape(n, dim) if dim else None
        scope.apply(header["space"], keys, digests, values)

    def _append(self, header: dict, body: bytes = b"") -> None:
        raw = json.dumps(header, sort_keys=True).encode()
        tail = hmac.new(self.key, self.tail + raw + body, hashlib.sha256).digest()
        try:
            fd = os.open(self.journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "ab") as f:
                f.write(_HEAD.pack(MAGIC, len(raw), len(body)) + raw + body + tail)
                f.flush()
                os.fsync(f.fileno())
            if self.generation == 0:
                fsync_directory(self.dir)
        except OSError as e:
            raise SendLedgerError(f"embedding-DP send ledger: {self.journal} cannot be written: {e.strerror}") from None
        self._apply(header, body)
        self.tail, self.generation = tail, self.generation + 1
        self.offset = os.path.getsize(self.journal)
        fields = {"format": SEAL_FORMAT, "generation": self.generation, "size": self.offset, "tail": tail.hex()}
        _write_private(self.seal, json.dumps({**fields, "mac": self._seal_mac(fields)}).encode())
        self._mark()  # after the first seal: a marker without a seal would refuse a crash between the two

    def _mark(self) -> None:
        if not os.path.exists(self.marker):
            _write_private(self.marker, f"embedding-DP send ledger: {self.dir}\n".encode())

    # -- scopes ----------------------------------------------------------------------------------
    def plan(self, scope: str, plan: dict) -> dict:
        """The scope's calibration: the one recorded first (by any process), else `plan`, recorded now."""
        with self._locked():
            self._catch_up()
            have = self.scopes.get(scope)
            if have is not None and have.plan is not None:
                return have.plan
            self._append({"kind": "plan", "scope": scope, "plan": plan})
            return plan

    def charge(
        self,
        scope: str,
        space: str,
        keys,
        cap: int,
        digests: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> int:
        """Charge one release per key (per new (key, digest) pair with `digests`, kept with its released value
        `values` before noise), refusing the whole charge when a row would pass `cap`; returns the most releases of
        a charged row. Written and fsynced before it returns."""
        keys = np.ascontiguousarray(keys, "<i8").ravel()
        with self._locked():
            self._catch_up()
            scope_state = self.scopes.setdefault(scope, _Scope())
            after, fresh = scope_state.counts_after(space, keys, digests)
            worst = int(after.max()) if after.size else 0
            if worst > cap:  # the text reaches the leader: counts only, no path
                raise ReleaseCapError(
                    f"embedding DP: a row's cut would be released {worst} times for this model, over the cap of {cap} "
                    f"(privacy.embedding_dp, counted across every process by the follower's send ledger); no cut sent"
                )
            dim = 0
            if digests is not None:
                first = [i for ds in fresh.values() for i in ds.values()]
                if not first:
                    return worst  # every value was released before: a repeat is the same bytes, charged nothing
                keys, digests = keys[first], np.ascontiguousarray(digests, "<u8")[first]
                body = keys.tobytes() + digests.tobytes()
                if values is not None:
                    values = np.ascontiguousarray(values, "<f4")[first]
                    dim = values.shape[1]
                    body += values.tobytes()
            else:
                body = keys.tobytes()
            self._append({"kind": "charge", "scope": scope, "space": space, "n": int(keys.size),
                          "digests": digests is not None, "dim": dim}, body)  # fmt: skip
            return worst

    def released_values(self, scope: str, space: str, key: int) -> list[np.ndarray]:
        """The values (before noise) already released for `key` in `scope`'s `space` (what a repeat may reuse)."""
        s = self.scopes.get(scope)
        held = s.digests.get(space, {}).get(int(key), {}) if s else {}
        return [np.frombuffer(v, "<f4") for v in held.values() if v]

    def refresh(self) -> None:
        """Read what other processes charged since this one last looked."""
        with self._locked():
            self._catch_up()

    def most(self, scope: str) -> int:
        """The most releases of any one row of `scope` (after reading what other processes charged)."""
        with self._locked():
            self._catch_up()
        s = self.scopes.get(scope)
        return s.most() if s else 0

    def most_in(self, scope: str, space: str) -> int:
        """The most releases of any one row of `space` in `scope`."""
        with self._locked():
            self._catch_up()
        s = self.scopes.get(scope)
        if s is None:
            return 0
        if space in s.positions:
            return int(s.positions[space].max()) if s.positions[space].size else 0
        return max((len(d) for d in s.digests.get(space, {}).values()), default=0)

    def plan_of(self, scope: str) -> dict | None:
        """The calibration recorded for `scope` (None: none)."""
        s = self.scopes.get(scope)
        return s.plan if s else None

    def releases(self, scope: str) -> int:
        s = self.scopes.get(scope)
        return s.releases() if s else 0
