"""The follower's write-ahead send ledger (privacy/embedding_ledger.py): counts across processes, caps before the
send, and refuses a ledger deleted, rolled back, edited or missing its seal."""

from __future__ import annotations

import json
import multiprocessing
import os

import numpy as np
import pytest

from privacy.embedding_ledger import JOURNAL, SEAL, ReleaseCapError, SendLedger, SendLedgerError, marker_path

KEY = b"L" * 32


def _ledger(tmp_path) -> SendLedger:
    return SendLedger(str(tmp_path / "ledger"), KEY, marker_path(str(tmp_path / "f.key_secret")))


def _digests(*values: int) -> np.ndarray:
    return np.array([[v, v] for v in values], np.uint64)


def test_counts_survive_a_reopen_and_the_cap_refuses_before_writing(tmp_path):
    # Prepare
    ledger = _ledger(tmp_path)
    ledger.charge("train/r", "train", [0, 1, 2], cap=2)
    ledger.charge("train/r", "train", [1, 2], cap=2)
    size = os.path.getsize(tmp_path / "ledger" / JOURNAL)
    # Execute / Assert: a third send of row 2 is refused and nothing is written; row 0 still passes
    with pytest.raises(ReleaseCapError, match="released 3 times for this model, over the cap of 2"):
        ledger.charge("train/r", "train", [0, 2], cap=2)
    assert os.path.getsize(tmp_path / "ledger" / JOURNAL) == size
    reopened = _ledger(tmp_path)
    assert reopened.most("train/r") == 2 and reopened.most_in("train/r", "valid") == 0
    assert reopened.charge("train/r", "train", [0], cap=2) == 2


def test_a_repeated_value_is_free_and_a_new_value_of_the_same_id_is_charged(tmp_path):
    ledger = _ledger(tmp_path)
    assert ledger.charge("model/m", "id", [5, 5, 5], cap=1, digests=_digests(9, 9, 9)) == 1
    assert ledger.charge("model/m", "id", [5], cap=1, digests=_digests(9)) == 1  # the same bytes again: free
    with pytest.raises(ReleaseCapError):
        ledger.charge("model/m", "id", [5], cap=1, digests=_digests(10))
    assert ledger.releases("model/m") == 1


def _charge_in_child(path: str, marker: str, row: int, q) -> None:
    try:
        SendLedger(path, KEY, marker).charge("model/m", "id", [row], cap=1, digests=_digests(row + 100))
        q.put("ok")
    except ReleaseCapError:
        q.put("refused")


def test_two_processes_count_together(tmp_path):
    # Prepare: this process released id 1 once; a second process opens the same ledger
    ledger = _ledger(tmp_path)
    ledger.charge("model/m", "id", [1], cap=1, digests=_digests(101))
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    # Execute: the child tries a new value of id 1, then a first value of id 2
    for row in (1, 2):
        p = ctx.Process(target=_charge_in_child, args=(str(tmp_path / "ledger"), ledger.marker, row, q))
        p.start()
        p.join(30)
    # Assert: the child's repeat of id 1 with another value passes only if it is the same value (it is: digest 101)
    assert [q.get(timeout=5), q.get(timeout=5)] == ["ok", "ok"]
    with pytest.raises(ReleaseCapError):  # and this process sees the child's release of id 2
        ledger.charge("model/m", "id", [2], cap=1, digests=_digests(7))


def test_a_deleted_journal_a_deleted_seal_or_a_deleted_ledger_is_refused(tmp_path):
    # Prepare
    ledger = _ledger(tmp_path)
    ledger.charge("train/r", "train", [0], cap=5)
    ledger.charge("train/r", "train", [0], cap=5)
    journal, seal = tmp_path / "ledger" / JOURNAL, tmp_path / "ledger" / SEAL
    raw_journal, raw_seal = journal.read_bytes(), seal.read_bytes()
    # Execute / Assert
    journal.unlink()
    with pytest.raises(SendLedgerError, match="journal .* is missing"):
        _ledger(tmp_path)
    journal.write_bytes(raw_journal)
    seal.unlink()
    with pytest.raises(SendLedgerError, match="seal .* is missing"):
        _ledger(tmp_path)
    journal.unlink()
    with pytest.raises(SendLedgerError, match="records that this key has one"):
        _ledger(tmp_path)
    journal.write_bytes(raw_journal)
    seal.write_bytes(raw_seal)
    assert _ledger(tmp_path).most("train/r") == 2


def test_a_rolled_back_or_edited_ledger_is_refused(tmp_path):
    # Prepare: a copy taken after one charge, then a second charge
    ledger = _ledger(tmp_path)
    ledger.charge("train/r", "train", [0, 1], cap=5)
    journal, seal = tmp_path / "ledger" / JOURNAL, tmp_path / "ledger" / SEAL
    old_journal = journal.read_bytes()
    ledger.charge("train/r", "train", [0], cap=5)
    new_journal = journal.read_bytes()
    # Execute / Assert: the older journal under the newer seal is rolled back
    journal.write_bytes(old_journal)
    with pytest.raises(SendLedgerError, match="rolled back|shorter"):
        _ledger(tmp_path)
    # an edited row position fails the chain
    edited = bytearray(new_journal)
    edited[-40] ^= 1
    journal.write_bytes(bytes(edited))
    with pytest.raises(SendLedgerError, match="does not verify"):
        _ledger(tmp_path)
    # a seal rewritten without the key fails its MAC
    journal.write_bytes(new_journal)
    doc = json.loads(seal.read_text())
    doc["generation"] = 1
    seal.write_text(json.dumps(doc))
    with pytest.raises(SendLedgerError, match="does not verify under this follower's key"):
        _ledger(tmp_path)


def test_a_torn_tail_past_the_seal_is_dropped_and_a_whole_record_past_it_is_kept(tmp_path):
    # Prepare
    ledger = _ledger(tmp_path)
    ledger.charge("train/r", "train", [0], cap=5)
    journal, seal = tmp_path / "ledger" / JOURNAL, tmp_path / "ledger" / SEAL
    sealed = seal.read_bytes()
    ledger.charge("train/r", "train", [0], cap=5)  # a whole record whose seal write is lost below
    whole = journal.read_bytes()
    # Execute: the seal of one record, the journal of two, plus half a record
    seal.write_bytes(sealed)
    journal.write_bytes(whole + whole[:20])
    reopened = _ledger(tmp_path)
    # Assert
    assert reopened.most("train/r") == 2 and journal.read_bytes() == whole


def test_the_first_plan_of_a_scope_wins(tmp_path):
    ledger = _ledger(tmp_path)
    assert ledger.plan("train/r", {"releases": 3})["releases"] == 3
    assert _ledger(tmp_path).plan("train/r", {"releases": 9})["releases"] == 3


def test_a_first_charge_cut_short_before_its_seal_opens_and_a_shed_seal_is_refused(tmp_path):
    # Prepare: one record, then the seal lost before it was written (and no marker yet)
    ledger = _ledger(tmp_path)
    ledger.plan("train/r", {"releases": 2})
    seal = tmp_path / "ledger" / SEAL
    marker = ledger.marker
    seal.unlink()
    os.remove(marker)
    # Execute / Assert: that crash opens; once the seal and the marker exist, removing the seal and truncating the
    # journal to its first record is refused (the counts after it would be lost)
    reopened = _ledger(tmp_path)
    reopened.charge("train/r", "train", [0], cap=2)
    assert os.path.exists(marker)
    journal = tmp_path / "ledger" / JOURNAL
    first = journal.read_bytes()[: os.path.getsize(journal) // 2]
    seal.unlink()
    journal.write_bytes(first)
    with pytest.raises(SendLedgerError, match="seal .* is missing"):
        _ledger(tmp_path)


def test_a_deleted_marker_is_written_again_at_open(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.charge("train/r", "train", [0], cap=2)
    os.remove(ledger.marker)
    _ledger(tmp_path)
    assert os.path.exists(ledger.marker)


def test_a_lock_held_past_its_deadline_is_one_line_not_a_hang(tmp_path, monkeypatch):
    import fcntl

    import privacy.embedding_ledger as module

    ledger = _ledger(tmp_path)
    monkeypatch.setattr(module, "LOCK_DEADLINE_S", 0.2)
    fd = os.open(tmp_path / "ledger" / "lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: flock excludes it
        with pytest.raises(SendLedgerError, match="held its lock for 0.2 s"):
            ledger.charge("train/r", "train", [0], cap=2)
    finally:
        os.close(fd)


def test_the_refusal_the_leader_reads_names_counts_not_paths(tmp_path):
    ledger = _ledger(tmp_path)
    ledger.charge("model/m", "id", [1], cap=1, digests=_digests(1))
    with pytest.raises(ReleaseCapError) as refused:
        ledger.charge("model/m", "id", [1], cap=1, digests=_digests(2))
    assert str(tmp_path) not in str(refused.value)
