"""The label-DP ledger's seal (privacy/label/ledger/ledger_seal.py): a ledger deleted, rolled back or altered is refused when
the store opens, before anything is drawn; `python -m privacy.label ack-reset` records the loss and draws new coins, so
a lost ledger or lost label pins never let the same coins meet changed labels. The attacks are the issue's: the key
and the ledger secret stay, the ledger (and the pins) go or an older copy comes back. The one statistical check (the
coins after a reset are independent of the coins before) is a 5.5-sigma binomial bound: false failure < 4e-8."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from privacy import LabelDP
from privacy.label.ledger.secret_files import LabelDPStoreError, read_key
from privacy.label.ledger.store import LabelDPBudgetError, LabelDPStore, Release
from privacy.label.release_draws import randomize_binary_once
from tests.support.dp_stats import binomial_tolerance

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.filterwarnings("ignore:label DP. (created a new key store|dataset|the ledger of)")


def _release(dataset: str, eps: float, name: str) -> Release:
    return Release(f"{name}{dataset}{eps}".replace(".", ""), dataset, "binary_rr", eps, {"eps": eps}, 100)


def _spent(store_dir, *eps: float) -> LabelDPStore:
    """A store whose dataset A has one release per eps, each recorded over ids 0..99."""
    store = LabelDPStore(str(store_dir))
    key = store.key()
    for i, e in enumerate(eps):
        store.record(_release("A", e, f"r{i}"), key, np.arange(100), budget=8.0)
    return store


def _ack_reset(store_dir) -> subprocess.CompletedProcess:
    """The documented command, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "privacy.label", "ack-reset", "--store", str(store_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_deleted_ledger_is_refused_at_open_with_the_key_and_secret_still_there(tmp_path):
    # Prepare: eps 4 spent, then the ledger deleted (the key and the ledger secret stay)
    _spent(tmp_path / "store", 4.0)
    os.remove(tmp_path / "store" / "ledger.json")
    # Execute / Assert: the store does not open (before this, it opened empty and accepted eps 7.5 as total 7.5)
    with pytest.raises(LabelDPStoreError, match=r"ledger\.json is missing but its seal .* records it \(write 1\)") as e:
        LabelDPStore(str(tmp_path / "store"))
    assert "python -m privacy.label ack-reset --store" in str(e.value) and "\n" not in str(e.value)


def test_a_rolled_back_ledger_is_refused_at_open_and_in_a_store_already_open(tmp_path):
    """The issue's repro: 1.0 + 1.0 spent, the ledger rolled back to after the first, then eps 6.5 (true total 8.5,
    over the budget of 8) was accepted as total 7.5."""
    # Prepare
    store = _spent(tmp_path / "store", 1.0)
    copy = (tmp_path / "store" / "ledger.json").read_bytes()
    store.record(_release("A", 1.0, "second"), store.key(), np.arange(100), budget=8.0)
    (tmp_path / "store" / "ledger.json").write_bytes(copy)
    # Execute / Assert: refused at open, and by a store opened before the rollback, with nothing recorded
    with pytest.raises(LabelDPStoreError, match=r"is an older copy \(write 1 of the 2 its seal records\)"):
        LabelDPStore(str(tmp_path / "store"))
    with pytest.raises(LabelDPStoreError, match="ack-reset"):
        store.record(_release("A", 6.5, "third"), store.key(), np.arange(100), budget=8.0)
    assert (tmp_path / "store" / "ledger.json").read_bytes() == copy


def test_an_altered_ledger_a_deleted_seal_or_a_forged_seal_is_refused(tmp_path):
    # Prepare
    from privacy.label.ledger.ledger_seal import ledger_digest

    _spent(tmp_path / "store", 3.0)
    ledger, seal = tmp_path / "store" / "ledger.json", tmp_path / "store" / "ledger_seal"
    good_ledger, good_seal = ledger.read_bytes(), seal.read_bytes()
    doc = json.loads(good_ledger)
    doc["releases"][0]["eps"] = 0.5
    forged = json.loads(good_seal)
    forged["ledger_sha256"] = ledger_digest(good_ledger.replace(b"3.0", b"0.5"))
    damages = {
        "not the one its seal records": lambda: ledger.write_text(json.dumps(doc, indent=1) + "\n"),
        "was sealed but its seal .* is missing": seal.unlink,
        "seal .* is damaged or not sealed by this store's ledger secret": lambda: seal.write_text(json.dumps(forged)),
    }
    for message, damage in damages.items():
        damage()
        # Execute / Assert
        with pytest.raises(LabelDPStoreError, match=message):
            LabelDPStore(str(tmp_path / "store"))
        ledger.write_bytes(good_ledger)
        seal.write_bytes(good_seal)
        seal.chmod(0o600)
    assert LabelDPStore(str(tmp_path / "store")).ledger()["releases"][0]["eps"] == 3.0  # restored: opens again


def test_a_store_whose_ledger_and_seal_are_deleted_but_whose_secret_stays_is_refused(tmp_path):
    # Prepare
    _spent(tmp_path / "store", 2.0)
    os.remove(tmp_path / "store" / "ledger.json")
    os.remove(tmp_path / "store" / "ledger_seal")
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="and its seal .* are missing while the ledger secret .* exists"):
        LabelDPStore(str(tmp_path / "store"))


@pytest.mark.parametrize("stop_at", ["ledger rename", "last seal"])
def test_a_write_stopped_between_the_seal_and_the_ledger_leaves_a_store_that_opens(tmp_path, monkeypatch, stop_at):
    """A failure of the ledger's rename (the seal announced the write) leaves the old ledger, a failure of the last
    seal write (the ledger renamed) the new one: each is accepted, and the next write seals on from there."""
    # Prepare
    from privacy.label.ledger import ledger_seal

    store = _spent(tmp_path / "store", 1.0)
    real, calls = ledger_seal.write_seal, []

    def fail_second(path, secret, seal, **kw):
        calls.append(seal)
        if len(calls) == 2:
            raise LabelDPStoreError("planted failure")
        real(path, secret, seal, **kw)

    def fail(data):
        raise LabelDPStoreError("planted failure")

    if stop_at == "ledger rename":
        monkeypatch.setattr(store, "_put", fail)
    else:
        monkeypatch.setattr(ledger_seal, "write_seal", fail_second)
    # Execute
    try:
        store.record(_release("A", 2.0, "second"), store.key(), np.arange(100), budget=8.0)
        raised = False
    except LabelDPStoreError:
        raised = True
    monkeypatch.undo()
    reopened = LabelDPStore(str(tmp_path / "store"))
    _, summary = reopened.record(_release("A", 3.0, "third"), reopened.key(), np.arange(100), budget=8.0)
    # Assert: a failed rename is an error and records nothing; a failed last seal is no error (the ledger is in place)
    assert raised == (stop_at == "ledger rename")
    assert summary["total_eps"] == (4.0 if stop_at == "ledger rename" else 6.0)
    assert LabelDPStore(str(tmp_path / "store")).ledger()["generation"] == (2 if stop_at == "ledger rename" else 3)


def _as_written_before_seals(store_dir) -> None:
    """The ledger secret as the versions before seals wrote it: its 64 hex digits alone, no `sealed` line."""
    path = store_dir / "ledger_secret"
    path.write_text(path.read_text().split()[0] + "\n")


def test_a_ledger_written_before_seals_is_sealed_at_open_and_checked_from_then_on(tmp_path):
    # Prepare: a store as the version before seals left it (no write count in the ledger, no seal file, no marker,
    # a ledger secret without its `sealed` line)
    store = _spent(tmp_path / "store", 2.0)
    doc = store.ledger()
    doc.pop("generation")
    (tmp_path / "store" / "ledger.json").write_text(json.dumps(doc))
    os.remove(tmp_path / "store" / "ledger_seal")
    os.remove(tmp_path / "store" / "ledger_sealed")
    _as_written_before_seals(tmp_path / "store")
    # Execute
    opened = LabelDPStore(str(tmp_path / "store"))
    kept, sealed = [r["eps"] for r in opened.ledger()["releases"]], (tmp_path / "store" / "ledger_seal").exists()
    marked = (tmp_path / "store" / "ledger_sealed").exists()
    recorded = (tmp_path / "store" / "ledger_secret").read_text().split()[1:2] == ["sealed"]
    os.remove(tmp_path / "store" / "ledger.json")
    # Assert: opened (its releases as they were), sealed, marked and recorded in its secret; the deletion after it is
    # refused
    assert kept == [2.0] and sealed and marked and recorded
    with pytest.raises(LabelDPStoreError, match=r"is missing but its seal .* records it \(write 0\)"):
        LabelDPStore(str(tmp_path / "store"))


def test_ack_reset_refuses_an_intact_store_and_records_a_reset_that_keeps_what_is_left(tmp_path):
    # Prepare: 1.0 + 1.0 spent, the ledger rolled back to after the first
    store = _spent(tmp_path / "store", 1.0)
    copy = (tmp_path / "store" / "ledger.json").read_bytes()
    old_key = store.key()
    store.record(_release("A", 1.0, "second"), old_key, np.arange(100), budget=8.0)
    intact = _ack_reset(tmp_path / "store")
    (tmp_path / "store" / "ledger.json").write_bytes(copy)
    # Execute
    done = _ack_reset(tmp_path / "store")
    reopened = LabelDPStore(str(tmp_path / "store"))
    new_key = reopened.key()
    _, summary = reopened.record(_release("A", 6.0, "third"), new_key, np.arange(100), budget=8.0)
    # Assert: an intact store has nothing to acknowledge (exit 2, one line); the reset is recorded with what it
    # means, the rolled-back ledger's release still counts (a lower bound), and the store draws under a new key
    assert intact.returncode == 2 and "there is no reset to acknowledge" in intact.stderr
    assert intact.stderr.count("\n") == 1
    assert done.returncode == 0, done.stderr
    assert "reset acknowledged" in done.stdout and "you take responsibility for that spend" in done.stdout
    (reset,) = reopened.ledger()["resets"]
    assert reset["releases_kept"] == 1 and reset["lost_spend"].startswith("unknown")
    assert "is an older copy" in reset["found"]
    assert summary["total_eps"] == 7.0 and new_key != old_key and read_key(reopened.key_path) == old_key
    assert any("was reset 1 time(s)" in w for w in reopened.warnings)
    with pytest.raises(LabelDPBudgetError):  # the budget still caps what the new ledger counts
        reopened.record(_release("A", 1.5, "fourth"), new_key, np.arange(100), budget=8.0)


def test_lost_ledger_and_pins_never_give_the_same_coins_to_changed_labels(tmp_path):
    """The issue's repro: with ledger.json and label_pins/ deleted, the standalone API drew the same coins on 500
    changed labels, so the XOR of the two outputs was the XOR of the labels (charged 1.0 in all). Now the second call
    is refused before anything is drawn, and after ack-reset it draws independent coins: its XOR with the first
    output matches the labels' XOR only where both flips agree, rho^2 + (1-rho)^2 of the rows (5.5-sigma bound).
    Power: the first release's coins (per id alone) applied to both label sets (the planted leak) match on every row."""
    # Prepare
    store = tmp_path / "store"
    rng = np.random.default_rng(42)
    ids = np.arange(2_000, dtype=np.int64) * 3 + 1
    labels = rng.integers(0, 2, ids.size)
    changed = labels.copy()
    changed[rng.choice(ids.size, 500, replace=False)] ^= 1
    first = LabelDP(1.0, dataset="clicks", store_dir=str(store))
    out1 = first(labels, ids=ids)
    old_key, old_release = read_key(str(store / "key")), first.last_release["release_id"]
    os.remove(store / "ledger.json")
    shutil.rmtree(store / "label_pins")
    # Execute
    refused = LabelDP(1.0, dataset="clicks", store_dir=str(store))
    with pytest.raises(LabelDPStoreError, match="ack-reset"):
        refused(changed, ids=ids)
    assert _ack_reset(store).returncode == 0
    after = LabelDP(1.0, dataset="clicks", store_dir=str(store))
    out2 = after(changed, ids=ids)
    leak = [randomize_binary_once(y, ids, 1.0, old_key, old_release) for y in (labels, changed)]
    # Assert
    assert refused.last_release is None
    rho = 1 / (1 + math.e)
    agree = rho**2 + (1 - rho) ** 2
    assert abs(np.mean((out1 ^ out2) == (labels ^ changed)) - agree) < binomial_tolerance(ids.size, agree)
    np.testing.assert_array_equal(leak[0] ^ leak[1], labels ^ changed)  # the planted leak: same coins, new labels
    assert after.last_release["release_id"] != old_release and after.last_release["new_release"] is True


def test_training_on_a_store_whose_ledger_was_deleted_is_refused_before_any_label_is_drawn(
    tmp_path, shards_small, monkeypatch
):
    """The issue's repro: eps 1 trained, the ledger deleted, then training at eps 7.5 was accepted as total 7.5."""
    # Prepare
    import vfl.labeldp.release as release_module
    from vfl.config.schema import LabelDPConfig
    from vfl.data.shards import PartyShard

    labels = lambda eps: release_module.leader_training_labels(  # noqa: E731
        release_module.LabelDPRelease.from_config(LabelDPConfig(eps=eps, store_dir=str(tmp_path / "store"))),
        PartyShard(str(shards_small / "leader")),
    )
    labels(1.0)
    os.remove(tmp_path / "store" / "ledger.json")
    drawn = []
    monkeypatch.setattr(release_module, "training_labels", lambda *a, **k: drawn.append(a))
    # Execute / Assert: refused where the leader opens its store (before any follower connects); nothing drawn
    with pytest.raises(LabelDPStoreError, match="is missing but its seal .* ack-reset"):
        labels(7.5)
    assert drawn == []


def test_ack_reset_after_a_lost_ledger_secret_charges_every_kept_dataset_to_every_other(tmp_path):
    """The kept ledger's id sets were hashed under the lost secret: compared with nothing, so charged (over-counts)."""
    # Prepare
    _spent(tmp_path / "store", 2.0)
    os.remove(tmp_path / "store" / "ledger_secret")
    with pytest.raises(LabelDPStoreError, match="ledger secret .* is missing but the ledger is sealed by it"):
        LabelDPStore(str(tmp_path / "store"))
    # Execute
    done = _ack_reset(tmp_path / "store")
    store = LabelDPStore(str(tmp_path / "store"))
    _, summary = store.record(_release("B", 1.0, "b"), store.key(), np.arange(5_000, 5_100), budget=8.0)
    # Assert: B shares no id with A, yet is charged with it
    assert done.returncode == 0, done.stderr
    assert "partial" in store.ledger()["datasets"]["A"]
    assert summary["total_eps"] == 3.0 and summary["unverifiable_datasets"] == ["A"]


def test_a_store_whose_ledger_seal_secret_and_sealed_marker_are_all_deleted_starts_over_with_a_warning(tmp_path):
    """The boundary docs/label-dp.md states: with no ledger secret and no sealed marker the store is new (only its kept
    key warns); with the marker kept, it is refused."""
    # Prepare
    _spent(tmp_path / "store", 2.0)
    for name in ("ledger.json", "ledger_seal", "ledger_secret"):
        os.remove(tmp_path / "store" / name)
    with pytest.raises(
        LabelDPStoreError, match=r"is missing and has no seal nor ledger secret in a store sealed before"
    ):
        LabelDPStore(str(tmp_path / "store"))
    os.remove(tmp_path / "store" / "ledger_sealed")
    # Execute
    store = LabelDPStore(str(tmp_path / "store"))
    # Assert
    assert store.ledger()["releases"] == []
    assert any("has a key but no ledger, seal or ledger secret" in w for w in store.warnings)


def test_a_whole_store_restored_from_a_backup_never_gives_the_same_coins_to_changed_labels(tmp_path):
    """The review's repro: the whole store backed up, a release on L1, the backup restored, the same release on L2 (L1
    with about half its labels flipped). A consistent older store cannot know the first call (the ledger charges 2.0),
    but the coins are drawn per (id, label): on the changed rows the XOR of the outputs matches the labels' XOR only
    where both independent flips agree, rho^2 + (1-rho)^2 (5.5-sigma bound; it was every row); unchanged rows replay.
    Power: coins per id alone (the planted leak) match on every changed row."""
    from privacy.label.release_draws import randomize_binary_once

    # Prepare: a store in use, its backup, then a release on L1
    store, backup = tmp_path / "store", tmp_path / "backup"
    rng = np.random.default_rng(50)
    ids = np.arange(1, 4_001, dtype=np.int64)
    LabelDP(1.0, dataset="clicks", store_dir=str(store))(rng.integers(0, 2, 10), ids=ids[:10])
    shutil.copytree(store, backup)
    l1 = rng.integers(0, 2, ids.size)
    first = LabelDP(1.0, dataset="clicks2", store_dir=str(store))
    out1 = first(l1, ids=ids)
    l2 = l1 ^ (rng.random(ids.size) < 0.5)
    changed = l1 != l2
    shutil.rmtree(store)
    shutil.copytree(backup, store)
    # Execute
    second = LabelDP(1.0, dataset="clicks2", store_dir=str(store))
    out2 = second(l2, ids=ids)
    key = read_key(str(store / "key"))
    leak = [randomize_binary_once(y, ids, 1.0, key, first.last_release["release_id"]) for y in (l1, l2)]
    # Assert
    assert second.last_release["release_id"] == first.last_release["release_id"]
    rho = 1 / (1 + math.e)
    agree = rho**2 + (1 - rho) ** 2
    stat = ((out1 ^ out2) == (l1 ^ l2))[changed]
    assert abs(stat.mean() - agree) < binomial_tolerance(int(changed.sum()), agree)
    np.testing.assert_array_equal(out1[~changed], out2[~changed])
    assert ((leak[0] ^ leak[1]) == (l1 ^ l2)).all()


def test_a_labeldp_object_alive_across_an_ack_reset_draws_the_new_coins(tmp_path):
    """A LabelDP object that drew before a lost ledger and an ack-reset draws after it exactly what a new object does
    (the store's coins are read on every call), never the retired coins: a replay of the same labels is the new
    release, and on 1000 changed labels the XOR of the outputs is not the labels' XOR."""
    # Prepare
    store = tmp_path / "store"
    rng = np.random.default_rng(51)
    ids = np.arange(1_000, dtype=np.int64)
    labels = rng.integers(0, 2, ids.size)
    kept = LabelDP(1.0, dataset="a", store_dir=str(store))
    out1 = kept(labels, ids=ids)
    before = kept.last_release["release_id"]
    os.remove(store / "ledger.json")
    shutil.rmtree(store / "label_pins")
    with pytest.raises(LabelDPStoreError, match="ack-reset"):
        kept(labels, ids=ids)
    assert _ack_reset(store).returncode == 0
    # Execute
    replay = kept(labels, ids=ids)
    fresh = LabelDP(1.0, dataset="a", store_dir=str(store))
    # Assert
    assert kept.last_release["release_id"] == fresh.release_id("binary", 2) != before
    np.testing.assert_array_equal(replay, fresh(labels, ids=ids))
    assert not np.array_equal(replay, out1)


def test_an_ack_reset_between_a_calls_key_and_its_draw_refuses_the_call(tmp_path):
    """The coins are checked again under the lock that pins the labels: a reset that lands after the call read its key
    (here: inside its ledger record) refuses the call, with nothing drawn from the retired key."""
    from privacy.label.ledger.ledger_reset import acknowledge_reset

    # Prepare
    store = tmp_path / "store"
    ids = np.arange(200, dtype=np.int64)
    labels = np.random.default_rng(52).integers(0, 2, ids.size)
    dp = LabelDP(1.0, dataset="a", store_dir=str(store))
    dp(labels[:100], ids=ids[:100])
    real = LabelDPStore.record

    def record_then_reset(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        os.remove(store / "ledger.json")
        acknowledge_reset(str(store))
        return got

    dp._store.record = record_then_reset.__get__(dp._store)
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="its coins changed .* nothing was drawn: call again"):
        dp(labels, ids=ids)


def test_an_older_ledger_without_its_generation_and_a_deleted_seal_is_refused(tmp_path):
    """The review's repro: the ledger of after the first release (eps 3) restored with its own `generation` key
    removed and the seal deleted, after eps 4 more: it read as a ledger written before seals and let eps 4.5 through
    at total 7.5 (true spend 11.5, budget 8). The store's `ledger_sealed` marker, made with its first seal, refuses
    a missing seal whatever the ledger says; ack-reset still lifts it."""
    # Prepare
    store = tmp_path / "store"
    _spent(store, 3.0)
    older = json.loads((store / "ledger.json").read_text())
    s = LabelDPStore(str(store))
    s.record(_release("A", 4.0, "r1"), s.key(), np.arange(100), budget=8.0)
    older.pop("generation")
    (store / "ledger.json").write_text(json.dumps(older, indent=1))
    os.remove(store / "ledger_seal")
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match=r"has no seal \(.*ledger_seal is missing\) in a store sealed before"):
        LabelDPStore(str(store))
    assert not (store / "ledger_seal").exists()
    assert _ack_reset(store).returncode == 0
    assert LabelDPStore(str(store)).ledger()["resets"]


def test_a_store_sealed_before_the_marker_existed_is_marked_when_its_seal_is_accepted(tmp_path):
    """A store sealed by the version before the marker (seal, no marker) opens as before and is marked then, so a seal
    deleted afterwards is refused; a ledger written before seals (no seal, no marker) is still sealed at open."""
    # Prepare
    store = tmp_path / "store"
    _spent(store, 1.0)
    os.remove(store / "ledger_sealed")
    # Execute
    LabelDPStore(str(store))
    # Assert
    assert (store / "ledger_sealed").exists()
    doc = json.loads((store / "ledger.json").read_text())
    doc.pop("generation")
    (store / "ledger.json").write_text(json.dumps(doc, indent=1))
    os.remove(store / "ledger_seal")
    with pytest.raises(LabelDPStoreError, match="in a store sealed before"):
        LabelDPStore(str(store))


def test_a_rolled_back_ledger_shed_of_its_generation_seal_and_marker_is_refused_while_its_secret_stays(tmp_path):
    """The red team's steps (issue 48, item 4): eps 1.0 + 1.0 spent, the ledger rolled back to after the first with
    its `generation` field removed, `ledger_seal` and the `ledger_sealed` marker deleted, the ledger secret kept. It
    read as a ledger written before seals and let eps 6.5 through at total 7.5 (true 8.5, budget 8). The secret
    records that it sealed this store, so the store is refused; ack-reset still lifts it."""
    # Prepare
    store = tmp_path / "store"
    s = _spent(store, 1.0)
    older = json.loads((store / "ledger.json").read_text())
    s.record(_release("A", 1.0, "r1"), s.key(), np.arange(100), budget=8.0)
    older.pop("generation")
    (store / "ledger.json").write_text(json.dumps(older, indent=1))
    os.remove(store / "ledger_seal")
    os.remove(store / "ledger_sealed")
    # Execute / Assert
    with pytest.raises(
        LabelDPStoreError, match=r"in a store sealed before \(its ledger secret .* records a seal\)"
    ) as e:
        LabelDPStore(str(store)).record(_release("A", 6.5, "r2"), read_key(str(store / "key")), np.arange(100), 8.0)
    assert "\n" not in str(e.value) and "ack-reset" in str(e.value)
    assert _ack_reset(store).returncode == 0
    assert LabelDPStore(str(store)).ledger()["resets"]


def test_a_sealed_line_copied_from_another_stores_secret_is_refused_as_damaged(tmp_path):
    """The `sealed` line is a tag of its own secret: one pasted from another store does not count, and is refused."""
    # Prepare
    _spent(tmp_path / "a", 1.0)
    _spent(tmp_path / "b", 1.0)
    theirs = (tmp_path / "b" / "ledger_secret").read_text().split()[2]
    ours = (tmp_path / "a" / "ledger_secret").read_text().split()[0]
    (tmp_path / "a" / "ledger_secret").write_text(f"{ours}\nsealed {theirs}\n")
    doc = json.loads((tmp_path / "a" / "ledger.json").read_text())
    doc.pop("generation")
    (tmp_path / "a" / "ledger.json").write_text(json.dumps(doc, indent=1))
    os.remove(tmp_path / "a" / "ledger_seal")
    os.remove(tmp_path / "a" / "ledger_sealed")
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match=r"its `sealed` line was not made by this secret"):
        LabelDPStore(str(tmp_path / "a"))
