"""The leader's label-DP secret: one key and one ledger per labelled dataset, outside the shards;
one release per parameter set, reproduced exactly; a new release for any change, drawn independently
and added to the ledger; loose or damaged key files refused; followers' files free of label aggregates.
Statistical checks use 5.5-sigma binomial bounds (false failure < 4e-8 each)."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from privacy.label.ledger.store import LEDGER_FORMAT, LabelDPStore, LabelDPStoreError, dataset_id, read_key
from privacy.label.randomized_response import flip_probability
from tests.support.dp_stats import binomial_tolerance
from vfl.config.schema import LabelDPConfig
from vfl.data.shards import PartyShard
from vfl.data.task import Task
from vfl.labeldp.release import LabelDPRelease, leader_training_labels


def _labels(shards, store, eps=1.0, **kw):
    cfg = LabelDPConfig(eps=eps, store_dir=str(store), **kw)
    return leader_training_labels(LabelDPRelease.from_config(cfg), PartyShard(str(shards / "leader")))


def _ledger(result) -> dict:
    return json.loads(open(result.report["ledger"]).read())


def test_key_is_created_once_with_mode_0600_outside_the_shards(tmp_path, shards_small):
    # Execute
    first = _labels(shards_small, tmp_path / "store")
    key_path = str(tmp_path / "store" / "key")
    # Assert
    assert first.report["ledger"] == str(tmp_path / "store" / "ledger.json")
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(key_path)).st_mode) == 0o700
    assert not os.path.commonpath([key_path, str(shards_small)]) == str(shards_small)
    assert len(read_key(key_path)) == 32


def test_rerun_reuses_the_release_and_the_ledger_counts_its_eps_once(tmp_path, shards_small):
    # Execute
    a = _labels(shards_small, tmp_path / "store")
    b = _labels(shards_small, tmp_path / "store")
    # Assert
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.release == b.release and a.report["new_release"] is True and b.report["new_release"] is False
    ledger = _ledger(b)
    assert len(ledger["releases"]) == 1 and ledger["releases"][0]["uses"] == 2
    assert b.report["dataset_total_eps"] == 1.0 and b.report["dataset_releases"] == 1


def test_re_preparing_the_data_with_force_keeps_the_key_and_the_release(tmp_path, synth_small):
    # Prepare: the local script re-prepares with --force on every run
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    out = tmp_path / "shards"
    prepare(str(synth_small), str(out), load_parties(None), PrepareOptions(hash_buckets=500))
    a = _labels(out, tmp_path / "store")
    # Execute
    prepare(str(synth_small), str(out), load_parties(None), PrepareOptions(hash_buckets=500, force=True))
    b = _labels(out, tmp_path / "store")
    # Assert
    np.testing.assert_array_equal(a.labels, b.labels)
    assert len(_ledger(b)["releases"]) == 1


def test_two_keys_for_one_dataset_disagree_at_2_rho_1_minus_rho(tmp_path, shards_small):
    # Prepare: two leader stores (two keys); everything a follower knows is equal
    rho = flip_probability(1.0)
    # Execute
    a = _labels(shards_small, tmp_path / "store_a")
    b = _labels(shards_small, tmp_path / "store_b")
    # Assert
    n = a.labels.size
    want = 2 * rho * (1 - rho)
    assert abs(np.mean(a.labels != b.labels) - want) < binomial_tolerance(n, want)


def test_a_new_eps_is_a_new_independent_release_that_the_ledger_adds(tmp_path, shards_small):
    # Execute
    low = _labels(shards_small, tmp_path / "store", eps=1.0)
    high = _labels(shards_small, tmp_path / "store", eps=2.0)
    truth = PartyShard(str(shards_small / "leader")).split("train").labels.astype(np.float32)
    # Assert: independent draws disagree at r1 (1 - r2) + r2 (1 - r1); nested ones at r1 - r2
    r1, r2 = flip_probability(1.0), flip_probability(2.0)
    n = truth.size
    want = r1 * (1 - r2) + r2 * (1 - r1)
    assert abs(np.mean(low.labels != high.labels) - want) < binomial_tolerance(n, want)
    assert low.release != high.release
    ledger = _ledger(high)
    assert [r["eps"] for r in ledger["releases"]] == [1.0, 2.0]
    assert high.report["dataset_total_eps"] == 3.0 and high.report["dataset_releases"] == 2
    assert abs(np.mean(low.labels != truth) - r1) < binomial_tolerance(n, r1)


def test_a_deleted_key_means_a_new_release_a_warning_and_a_larger_total(tmp_path, shards_small):
    # Prepare
    a = _labels(shards_small, tmp_path / "store")
    os.remove(tmp_path / "store" / "key")
    # Execute
    b = _labels(shards_small, tmp_path / "store")
    # Assert
    assert b.report["new_release"] is True and b.report["key_fingerprint"] != a.report["key_fingerprint"]
    assert b.report["dataset_total_eps"] == 2.0
    assert any("new key" in w and "already has releases" in w for w in b.warnings)


def test_a_re_exported_source_is_charged_with_the_releases_of_the_overlapping_one(tmp_path, synth_small):
    # Prepare: the same rows plus one appended line: another file digest, the same sample ids
    a, b = _reexport_with_one_more_row(tmp_path, synth_small)
    first = _labels(a, tmp_path / "store")
    # Execute
    second = _labels(b, tmp_path / "store")
    # Assert: a new dataset (new release), but the ledger charges the overlapping dataset's release to it
    assert second.report["dataset_id"] != first.report["dataset_id"] and second.report["new_release"] is True
    assert second.report["dataset_total_eps"] == 2.0 and second.report["overlapping_datasets"] == [
        first.report["dataset_id"]
    ]
    assert any("shares sample ids" in w for w in second.warnings)


def _reexport_with_one_more_row(tmp_path, synth_small):
    """Two labelled datasets with different digests and the same sample ids (one appended line)."""
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    copy = tmp_path / "reexport.tsv"
    text = synth_small.read_text()
    first_id, rest = text.splitlines()[0].split("\t", 1)
    copy.write_text(text + f"{int(first_id) ^ 1}\t{rest}\n")  # the file's leading id column: a new id
    prepare(str(synth_small), str(tmp_path / "a"), load_parties(None), PrepareOptions(hash_buckets=500))
    prepare(str(copy), str(tmp_path / "b"), load_parties(None), PrepareOptions(hash_buckets=500))
    return tmp_path / "a", tmp_path / "b"


def test_a_re_export_after_a_key_change_is_still_charged_with_the_earlier_release(tmp_path, synth_small):
    """The overlap sketch is keyed by the ledger's own secret, not the label key: a new key does not hide it."""
    # Prepare
    a, b = _reexport_with_one_more_row(tmp_path, synth_small)
    first = _labels(a, tmp_path / "store")
    os.remove(tmp_path / "store" / "key")
    # Execute
    second = _labels(b, tmp_path / "store")
    # Assert
    assert second.report["key_fingerprint"] != first.report["key_fingerprint"]
    assert second.report["overlapping_datasets"] == [first.report["dataset_id"]]
    assert second.report["dataset_total_eps"] == 2.0
    secret = tmp_path / "store" / "ledger_secret"
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600 and len(read_key(str(secret))) == 32


def test_a_format_2_ledger_is_migrated_and_its_unmeasurable_sketches_are_charged(tmp_path, synth_small):
    """A format-2 sketch was keyed by the label key of its time: compared exactly while that key is held, charged
    in full once it is not (never silently dropped)."""
    # Prepare: the ledger as format 2 wrote it (the sketch under the label key, no ledger secret)
    from privacy.label.ledger.store import id_sketch

    a, b = _reexport_with_one_more_row(tmp_path, synth_small)
    _labels(a, tmp_path / "store")
    ledger_path = tmp_path / "store" / "ledger.json"
    doc = json.loads(ledger_path.read_text())
    train, valid = PartyShard(str(a / "leader")).split("train"), PartyShard(str(a / "leader")).split("valid")
    (ds,) = doc["datasets"].values()
    ds["sketch"] = id_sketch(read_key(str(tmp_path / "store" / "key")), np.concatenate([train.ids, valid.ids]))
    doc["format"] = 2
    doc.pop("ledger_secret")
    doc.pop("generation")  # written before seals: no write count, no seal
    ledger_path.write_text(json.dumps(doc))
    os.remove(tmp_path / "store" / "ledger_secret")
    os.remove(tmp_path / "store" / "ledger_seal")
    os.remove(tmp_path / "store" / "ledger_sealed")
    os.remove(tmp_path / "store" / "key")
    # Execute
    second = _labels(b, tmp_path / "store")
    # Assert
    assert second.report["dataset_total_eps"] == 2.0 and len(second.report["overlapping_datasets"]) == 1
    assert any("format-2 ledger" in w for w in second.warnings)
    assert json.loads(ledger_path.read_text())["format"] == LEDGER_FORMAT


def test_a_missing_ledger_secret_is_refused_while_the_ledger_holds_its_sketches(tmp_path, shards_small):
    # Prepare
    _labels(shards_small, tmp_path / "store")
    os.remove(tmp_path / "store" / "ledger_secret")
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="ledger secret .* is missing"):
        _labels(shards_small, tmp_path / "store", eps=2.0)


def test_a_release_over_the_budget_is_refused_before_any_label_is_drawn_and_nothing_is_recorded(
    tmp_path, shards_small, monkeypatch
):
    # Prepare: eps 4 then 3 on one dataset (total 7); the budget is 8
    import vfl.labeldp.mechanisms as mechanisms_module
    from privacy.label.ledger.store import LabelDPBudgetError
    from vfl.labeldp.release import open_label_key

    _labels(shards_small, tmp_path / "store", eps=4.0, budget=8.0)
    _labels(shards_small, tmp_path / "store", eps=3.0, budget=8.0)
    before = (tmp_path / "store" / "ledger.json").read_bytes()
    drawn = []
    real = mechanisms_module.randomize_binary_once
    monkeypatch.setattr(mechanisms_module, "randomize_binary_once", lambda *a: drawn.append(a) or real(*a))
    release = LabelDPRelease.from_config(LabelDPConfig(eps=2.0, store_dir=str(tmp_path / "store"), budget=8.0))
    # Execute
    with pytest.raises(LabelDPBudgetError) as early:  # before any follower connects (leader/train.py)
        release.check_budget(open_label_key(str(tmp_path / "store"), None, PartyShard(str(shards_small / "leader"))))
    with pytest.raises(LabelDPBudgetError) as at_draw:
        _labels(shards_small, tmp_path / "store", eps=2.0, budget=8.0)
    # Assert: one line naming the total and the budget; no label drawn; the ledger untouched; a replay is still free
    for e in (early, at_draw):
        text = str(e.value)
        assert "\n" not in text and "to 9," in text and "over privacy.label_dp.budget 8;" in text
    assert drawn == [] and (tmp_path / "store" / "ledger.json").read_bytes() == before
    replay = _labels(shards_small, tmp_path / "store", eps=4.0, budget=8.0)
    assert replay.report["new_release"] is False and replay.report["dataset_total_eps"] == 7.0


def test_disjoint_datasets_are_not_charged_to_each_other(tmp_path, synth_small):
    # Prepare: two halves of one file (its leading id column keeps the halves' ids apart)
    from vfl.data.parties import load_parties
    from vfl.data.prepare import PrepareOptions, prepare

    lines = synth_small.read_text().splitlines(keepends=True)
    (tmp_path / "second.tsv").write_text("".join(lines[6000:]))
    (tmp_path / "first_ids.tsv").write_text("".join(lines[:6000]))
    prepare(str(tmp_path / "first_ids.tsv"), str(tmp_path / "a"), load_parties(None), PrepareOptions(hash_buckets=500))
    prepare(str(tmp_path / "second.tsv"), str(tmp_path / "b"), load_parties(None), PrepareOptions(hash_buckets=500))
    _labels(tmp_path / "a", tmp_path / "store")
    # Execute
    second = _labels(tmp_path / "b", tmp_path / "store")
    # Assert
    assert second.report["dataset_total_eps"] == 1.0 and second.report["overlapping_datasets"] == []


def test_a_key_file_others_can_read_is_refused_naming_path_and_mode(tmp_path, shards_small):
    # Prepare
    key = tmp_path / "leader.key"
    key.write_text("ab" * 32 + "\n")
    os.chmod(key, 0o644)
    # Execute
    with pytest.raises(LabelDPStoreError) as e:
        _labels(shards_small, tmp_path / "store", key_file=str(key))
    # Assert
    assert str(key) in str(e.value) and "mode 0644" in str(e.value) and "chmod 600" in str(e.value)


@pytest.mark.parametrize(
    "content, needle", [("zz" * 32, "64 hex digits"), ("ab" * 8, "64 hex digits"), ("", "64 hex digits")]
)
def test_a_damaged_key_file_is_refused(tmp_path, shards_small, content, needle):
    # Prepare
    key = tmp_path / "leader.key"
    key.write_text(content)
    os.chmod(key, 0o600)
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match=needle):
        _labels(shards_small, tmp_path / "store", key_file=str(key))


def test_an_unreadable_key_file_is_refused(tmp_path, shards_small):
    # Prepare
    if os.getuid() == 0:
        pytest.skip("root reads every file")
    key = tmp_path / "leader.key"
    key.write_text("ab" * 32)
    os.chmod(key, 0o000)
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="cannot be read"):
        _labels(shards_small, tmp_path / "store", key_file=str(key))


def test_a_configured_key_file_is_used_and_created_private(tmp_path, shards_small):
    # Execute
    key = tmp_path / "keys" / "leader.key"
    a = _labels(shards_small, tmp_path / "store", key_file=str(key))
    b = _labels(shards_small, tmp_path / "store2", key_file=str(key))
    # Assert: one key, so the same noisy labels even with another ledger directory
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    np.testing.assert_array_equal(a.labels, b.labels)


def test_a_store_directory_others_can_enter_is_refused(tmp_path):
    # Prepare
    root = tmp_path / "store"
    root.mkdir()
    os.chmod(root, 0o755)
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="mode 0755"):
        LabelDPStore(str(root))


def test_a_store_inside_a_directory_others_can_write_is_refused(tmp_path):
    # Prepare: another user could rename the store away and the leader would start a fresh ledger
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    # Execute / Assert
    with pytest.raises(LabelDPStoreError, match="can be modified by other users"):
        LabelDPStore(str(shared / "store"))


def test_a_store_problem_reaches_followers_only_as_a_generic_reason(tmp_path):
    # Prepare
    from vfl.cli import run_party
    from vfl.obs.metrics import RunLog

    sent = []

    def body():
        raise LabelDPStoreError("label-DP key file /home/leader/secret/key has mode 0644")

    cfg = type("Cfg", (), {"party": "leader"})()
    # Execute
    code = run_party(cfg, RunLog(str(tmp_path / "leader.log")), body, sent.append)
    # Assert
    assert code == 1 and len(sent) == 1 and "/home/leader" not in sent[0] and "0644" not in sent[0]
    assert "/home/leader/secret/key" in (tmp_path / "leader.log").read_text()


def test_dataset_identity_needs_the_source_digest():
    with pytest.raises(LabelDPStoreError, match="sha256"):
        dataset_id(None)


def test_the_follower_manifest_holds_only_allow_listed_keys(shards_small):
    # Prepare
    from vfl.data.manifest import FOLLOWER_MANIFEST_KEYS

    follower = json.loads((shards_small / "follower0/manifest.json").read_text())
    leader = json.loads((shards_small / "leader/manifest.json").read_text())
    # Assert: nothing computed from labels (positives, Bayes AUC, the labelled source's digest, truth file)
    assert set(follower) == set(FOLLOWER_MANIFEST_KEYS) | {"party"}
    text = json.dumps(follower)
    for leak in ("positives", "bayes_test_auc", "sha256", "truth", "source", "options"):
        assert leak not in text, leak
    assert "positives" in leader and "bayes_test_auc" in leader  # the labelled party keeps its own facts
    assert follower["id_digest"] == leader["id_digest"] and follower["party"]["has_labels"] is False


def test_a_follower_rerunning_synth_with_the_public_seed_does_not_regenerate_the_labels(tmp_path):
    # Prepare
    from vfl.data.synth.criteo import write_synthetic

    n = 20_000
    write_synthetic(str(tmp_path / "leader.tsv"), n, seed=0, max_vocab=500)
    # Execute: the follower knows the seed, the code and the row count
    write_synthetic(str(tmp_path / "follower.tsv"), n, seed=0, max_vocab=500)
    a = (tmp_path / "leader.tsv").read_text().splitlines()
    b = (tmp_path / "follower.tsv").read_text().splitlines()
    # Assert: the feature columns are the same, the labels and the truth are not (fields: id, label, features)
    assert [x.split("\t", 2)[2] for x in a] == [x.split("\t", 2)[2] for x in b]
    la = np.array([int(x.split("\t", 2)[1]) for x in a])
    lb = np.array([int(x.split("\t", 2)[1]) for x in b])
    assert np.mean(la == lb) < 0.9  # 1.0 before; independent label worlds agree on ~0.6-0.7
    ta, tb = np.load(str(tmp_path / "leader.tsv.truth.npy")), np.load(str(tmp_path / "follower.tsv.truth.npy"))
    assert np.corrcoef(ta, tb)[0, 1] < 0.5
    assert "secret" in json.loads((tmp_path / "leader.tsv.meta.json").read_text())["label_seed"]


def test_the_release_object_derives_every_number_from_the_config_once():
    """LabelDPRelease is the one reader of privacy.label_dp: its flip probability and transition are those of the
    mechanism functions, its loss follows debias/correction, and no label DP means no release."""
    # Prepare
    from privacy.label.randomized_response import kary_transition, keep_probability
    from vfl.labeldp.release import LabelDPRelease

    binary = LabelDPRelease.from_config(LabelDPConfig(eps=1.5, prior_fraction=0.3, prior_epochs=4))
    classes = LabelDPRelease.from_config(LabelDPConfig(eps=1.5, mechanism="rr_prior"), Task("multiclass", 5))
    # Execute / Assert
    assert LabelDPRelease.from_config(None) is None
    assert binary.flip_probability == flip_probability(1.5) and binary.eps == 1.5
    assert (binary.prior_fraction, binary.prior_epochs, binary.uses_prior) == (0.3, 4, False)
    assert classes.flip_probability == 1.0 - keep_probability(1.5, 5) and classes.uses_prior
    np.testing.assert_array_equal(classes.transition, kary_transition(5, 1.5))
    assert binary.training_loss() is not None and classes.training_loss() is None  # rr_prior: debias off by default


def test_the_release_object_draws_exactly_what_the_keyed_mechanism_draws(tmp_path, shards_small):
    """Noise-free check of the plumbing: the release's noisy labels equal randomize_binary_once under the release id
    named by (dataset, key, mechanism, parameters), so the refactor keeps every release id and draw."""
    # Prepare
    from privacy.label.ledger.store import release_id
    from privacy.label.release_draws import randomize_binary_once
    from vfl.labeldp.release import LabelDPRelease, open_label_key

    shard = PartyShard(str(shards_small / "leader"))
    train = shard.split("train")
    release = LabelDPRelease.from_config(LabelDPConfig(eps=0.7, store_dir=str(tmp_path)))
    key = open_label_key(release.store_dir, release.key_file, shard)
    # Execute
    drawn = release.draw(train.labels, train.ids, key)
    # Assert
    rel = release_id(
        key.dataset, key.fingerprint, "binary_rr", {"eps": 0.7, "labels": "binary", "label_set": key.label_set}
    )
    assert drawn.release == rel
    np.testing.assert_array_equal(drawn.labels, randomize_binary_once(train.labels, train.ids, 0.7, key.key, rel))


def test_composition_charges_one_lp2st_run_once_and_each_new_prior_again():
    """Noise-free: LP-2ST's stage one and its stage two randomize disjoint rows (parallel composition); a new prior is
    a new stage-two release on the same rows; other releases add by basic composition; ledgers from before the stage
    one was recorded keep their totals."""
    # Prepare
    from privacy.label.ledger.store import STAGE_ONE, composed_eps

    stage = {"release_id": "s1", "mechanism": STAGE_ONE, "eps": 1.0, "params": {}}
    second = [
        {"release_id": f"t{i}", "mechanism": "rr_prior", "eps": 1.0, "params": {"stage_one_release": "s1"}}
        for i in range(2)
    ]
    plain = {"release_id": "b", "mechanism": "binary_rr", "eps": 2.0, "params": {"eps": 2.0}}
    # Execute / Assert
    assert composed_eps([stage]) == 1.0  # a run stopped during stage one
    assert composed_eps([stage, second[0]]) == 1.0
    assert composed_eps([stage, *second]) == 2.0
    assert composed_eps([stage, *second, plain]) == 4.0
    assert composed_eps([second[0]]) == 1.0 and composed_eps([plain, plain | {"release_id": "c"}]) == 4.0


def test_the_ledger_holds_lp2st_stage_one_before_its_prior_is_trained(tmp_path, shards_small):
    """A run that stops while the prior trains (with K classes the followers have then seen gradients of the
    stage-one labels) has spent eps; the full run afterwards replays stage one and costs eps in all, not twice."""
    # Prepare
    from vfl.labeldp.release import open_label_key

    shard = PartyShard(str(shards_small / "leader"))
    train, valid = shard.split("train"), shard.split("valid")
    release = LabelDPRelease.from_config(LabelDPConfig(eps=1.0, mechanism="rr_prior", store_dir=str(tmp_path)))

    def stopped(first, noisy):
        raise RuntimeError("follower0 aborted during stage one")

    # Execute
    with pytest.raises(RuntimeError, match="stage one"):
        release.draw(
            train.labels,
            train.ids,
            open_label_key(str(tmp_path), None, shard),
            stopped,
            valid.labels,
            valid.ids,
        )
    after_stop = json.loads((tmp_path / "ledger.json").read_text())
    full = release.draw(
        train.labels,
        train.ids,
        open_label_key(str(tmp_path), None, shard),
        lambda first, noisy: np.full(first.size, 0.5),
        valid.labels,
        valid.ids,
    )
    # Assert
    assert [(r["mechanism"], r["eps"]) for r in after_stop["releases"]] == [("lp2st_stage_one", 1.0)]
    assert after_stop["releases"][0]["rows"] == train.ids.size + valid.ids.size
    ledger = json.loads((tmp_path / "ledger.json").read_text())
    assert [r["mechanism"] for r in ledger["releases"]] == ["lp2st_stage_one", "rr_prior"]
    assert ledger["releases"][0]["uses"] == 2
    assert full.report["dataset_total_eps"] == 1.0 and full.report["dataset_releases"] == 2
