"""network.compression end to end: the codecs are agreed in HELLO (a mismatch is one line naming both values), coded
EMBEDDING and GRADIENT messages parse strictly, `none` sends the bytes it always sent, and a real two-process run
with int8 both ways trains to the AUC of the uncompressed run (= centralized) on about a third of the bytes."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml

from tests.support.party_processes import party_configs, run_centralized, run_split
from tests.support.wire_samples import HELLO as SAMPLE_HELLO
from vfl.config.schema import ConfigError, parse_config
from vfl.session.compression import FollowerCodecs, LeaderCodecs
from vfl.session.handshake import hello_message, hello_problems
from vfl.wire import PROTOCOL_VERSION
from vfl.wire.frames import WireError, decode, encode
from vfl.wire.messages import Embedding, Gradient, parse

HELLO = dataclasses.replace(SAMPLE_HELLO, party="f", protocol=PROTOCOL_VERSION, microbatches=1)
FIX = "set the same network.compression on every party"


def _wire(type_: str, sender: str, meta: dict, tensors: list):
    frames = encode(type_, sender, "run1", 5, meta, tensors)
    return decode([bytes(memoryview(f)) for f in frames], sender)


def _compression(**keys):
    return parse_config(
        {
            "role": "follower",
            "party": "f",
            "data": {"path": "x"},
            "network": {"connect": "tcp://127.0.0.1:5560", "compression": keys},
        }
    ).network.compression


def test_hello_carries_each_codec_with_its_parameter_and_nothing_for_none():
    # Prepare
    coded = dataclasses.replace(HELLO, embedding_codec="int8:6", gradient_codec="topk:0.25")
    # Execute
    meta_coded, meta_none = coded.to_wire()[0], HELLO.to_wire()[0]
    # Assert: the fields travel and come back equal; none leaves them out (a HELLO's bytes as before)
    assert meta_coded["embedding_codec"] == "int8:6" and meta_coded["gradient_codec"] == "topk:0.25"
    assert parse(_wire("HELLO", "f", meta_coded, [])) == coded
    assert "embedding_codec" not in meta_none and "gradient_codec" not in meta_none


@pytest.mark.parametrize("bad", ["none", "int8", "int8:9", "int8:1", "zstd", "topk:", 8, True, ""])
def test_a_hello_codec_outside_its_domain_is_refused_on_the_wire(bad):
    # Prepare
    meta = {**HELLO.to_wire()[0], "gradient_codec": bad}
    # Execute / Assert
    with pytest.raises(WireError, match=r"^HELLO from f: field 'gradient_codec' must be a codec") as e:
        parse(_wire("HELLO", "f", meta, []))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "theirs, ours, line",
    [
        (
            {},
            {"embedding": "int8"},
            f"f has network.compression.embedding=none but the leader has network.compression.embedding=int8 "
            f"(bits 8): {FIX}",
        ),
        (
            {"embedding": "int8", "bits": 4},
            {"embedding": "int8"},
            "f has network.compression.embedding=int8 (bits 4) but the leader has "
            f"network.compression.embedding=int8 (bits 8): {FIX}",
        ),
        (
            {"gradient": "topk", "topk_fraction": 0.5},
            {"gradient": "fp16"},
            "f has network.compression.gradient=topk (topk_fraction 0.5) but the leader has "
            f"network.compression.gradient=fp16: {FIX}",
        ),
    ],
)
def test_hello_problems_names_both_codecs_of_a_mismatch_in_one_line(theirs, ours, line):
    # Prepare
    mine = dataclasses.replace(HELLO, **_hello_codecs(_compression(**theirs)))
    leader = dataclasses.replace(HELLO, **_hello_codecs(_compression(**ours)))
    # Execute
    problems = hello_problems("f", mine, leader)
    # Assert
    assert problems == [line]


def test_hello_problems_accepts_the_same_codecs():
    # Prepare
    same = dataclasses.replace(HELLO, **_hello_codecs(_compression(embedding="int8", gradient="topk")))
    # Execute / Assert
    assert hello_problems("f", same, same) == []


def _hello_codecs(compression) -> dict:
    from vfl.wire.codecs import codecs_of

    embedding, gradient = codecs_of(compression)
    return {"embedding_codec": embedding.agreement, "gradient_codec": gradient.agreement}


@pytest.mark.parametrize(
    "keys, needle",
    [
        ({"embedding": "topk"}, "network.compression.embedding"),
        ({"gradient": "int4"}, "network.compression.gradient"),
        ({"bits": 1}, "network.compression.bits"),
        ({"bits": 9}, "network.compression.bits"),
        ({"topk_fraction": 0.75}, "network.compression.topk_fraction"),
        ({"topk_fraction": 0}, "network.compression.topk_fraction"),
    ],
)
def test_a_compression_key_outside_its_domain_is_a_config_error_naming_it(keys, needle):
    # Execute / Assert
    with pytest.raises(ConfigError, match=needle):
        _compression(**keys)


def test_compression_defaults_to_none_both_ways_and_sends_the_float32_tensors_themselves():
    # Prepare
    cfg = _compression()
    cut = np.arange(12, dtype=np.float32).reshape(4, 3)
    # Execute
    up = FollowerCodecs(cfg).embedding_fields(cut)
    down = LeaderCodecs(cfg, 10).gradient_fields("f", cut, np.arange(4))
    # Assert: the same array, no codec, no aux: EMBEDDING and GRADIENT carry the bytes they always carried
    assert (cfg.embedding, cfg.gradient) == ("none", "none")
    assert up["cut"] is cut and up["codec"] is None and up["aux"] is None
    assert down["grad"] is cut and down["codec"] is None and down["aux"] is None
    assert Embedding(**up, epoch=0, step=1).to_wire()[0] == {"epoch": 0, "step": 1}


@pytest.mark.parametrize("embedding, gradient", [("int8", "topk"), ("fp16", "int8"), ("bf16", "bf16")])
def test_coded_messages_round_trip_through_the_frames_and_decode_at_the_receiver(embedding, gradient):
    # Prepare
    cfg = _compression(embedding=embedding, gradient=gradient, bits=6)
    follower, leader = FollowerCodecs(cfg), LeaderCodecs(cfg, 20)
    cut = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    # Execute
    up = Embedding(**follower.embedding_fields(cut), epoch=0, step=2, micro=0)
    down = Gradient(**leader.gradient_fields("f", cut, np.arange(5)), epoch=0, step=2, micro=0)
    up_back = parse(_wire("EMBEDDING", "f", *up.to_wire()))
    down_back = parse(_wire("GRADIENT", "leader", *down.to_wire()))
    grad = follower.decoded(down_back, (5, 8), "GRADIENT").grad
    # Assert
    assert up_back == up and down_back == down and up.codec == embedding
    assert grad.dtype == np.float32 and grad.shape == (5, 8) and np.abs(grad - cut).max() < np.abs(cut).max()


@pytest.mark.parametrize(
    "meta, tensors, needle",
    [
        ({"codec": "int8"}, [np.zeros((2, 3), np.uint8)], "int8 payload has two tensors"),
        ({"codec": "bf16"}, [np.zeros((2, 3), np.float32)], "bf16 payload's first tensor must be uint16"),
        ({"codec": "none"}, [np.zeros((2, 3), np.float32)], "field 'codec' must be one of"),
        ({}, [np.zeros((2, 3), np.float32), np.zeros((2, 2), np.uint16)], "expected 1 tensor"),
        ({}, [np.zeros((2, 3), np.uint8)], "tensor 'cut' must be float32"),
    ],
)
def test_an_embedding_whose_payload_does_not_fit_its_codec_is_refused_at_parse(meta, tensors, needle):
    # Execute / Assert
    with pytest.raises(WireError, match=needle) as e:
        parse(_wire("EMBEDDING", "f", {"epoch": 0, "step": 1, **meta}, tensors))
    assert str(e.value).startswith("EMBEDDING from f: ")


def test_the_follower_hellos_its_configs_codecs(tmp_path, shards_small):
    # Prepare
    from vfl.data.shards import PartyShard

    cfgs = party_configs(str(tmp_path), str(shards_small))
    cfg = _with_compression(cfgs["follower0"], {"embedding": "int8", "bits": 7, "gradient": "topk"})
    from vfl.config.schema import load_config

    # Execute
    hello = hello_message(load_config(cfg), PartyShard(str(shards_small / "follower0")))
    # Assert
    assert (hello.embedding_codec, hello.gradient_codec) == ("int8:7", "topk:0.25")


def _with_compression(path: str, compression: dict) -> str:
    with open(path) as fh:
        doc = yaml.safe_load(fh)
    doc["network"]["compression"] = compression
    with open(path, "w") as fh:
        yaml.safe_dump(doc, fh)
    return path


def test_a_follower_with_another_codec_is_refused_over_tcp(tmp_path, shards_small, procs):
    # Prepare: the leader codes embeddings int8, the follower's config leaves compression at none
    cfgs = party_configs(str(tmp_path), str(shards_small), timeout_s=10)
    _with_compression(cfgs["leader"], {"embedding": "int8"})
    # Execute
    procs.start("leader", "leader", cfgs["leader"])
    procs.start("follower0", "follower", cfgs["follower0"])
    code, _, err = procs.wait("leader", 60)
    f_code, _, f_err = procs.wait("follower0", 60)
    # Assert: both stop with the leader's one line, naming both values, before any batch moved
    line = (
        "follower0 has network.compression.embedding=none but the leader has "
        f"network.compression.embedding=int8 (bits 8): {FIX}"
    )
    assert code == 1 and line in err, err
    assert f_code != 0 and line in f_err, f_err
    assert not (tmp_path / "out" / "checkpoints").exists() or not any((tmp_path / "out" / "checkpoints").iterdir())


def test_int8_both_ways_trains_to_the_uncompressed_auc_on_under_a_third_of_the_bytes(tmp_path, shards_small, procs):
    # Prepare: a 16-wide cut with an MLP top, 2 epochs; the uncompressed split run equals centralized
    # (tests/training/test_split_training.py), so centralized is the uncompressed reference
    cut = 16
    cfgs = party_configs(
        str(tmp_path),
        str(shards_small),
        model={"bottom": {"embedding_dim": 8, "hidden": [32], "cut_dim": cut}},
        top={"name": "mlp", "hidden": [16]},
        train={"epochs": 2},
    )
    for path in cfgs.values():
        _with_compression(path, {"embedding": "int8", "gradient": "int8"})
    # Execute
    split = run_split(procs, cfgs)
    central = run_centralized(cfgs, str(tmp_path / "central"))
    # Assert: AUC within 0.01 of the uncompressed run; both ways about 3.2x fewer bytes than float32 (16 + 4 bytes a
    # row against 64; headers, FORWARD and EVAL included)
    assert split["compression"] == {"embedding": "int8:8", "gradient": "int8:8"}
    assert abs(split["test_auc"] - central["test_auc"]) < 0.01, (split["test_auc"], central["test_auc"])
    assert split["test_auc"] > 0.65
    per_sample = split["wire_bytes_per_sample"]
    evals = len(split["history"])
    rows = split["rows"]
    samples = split["samples"] if "samples" in split else rows["train"] * 2
    float32_up = 4 * cut * (samples + evals * (rows["valid"] + rows["test"])) / samples
    assert float32_up / per_sample["up"] > 3.0, (per_sample, float32_up)
    assert 4 * cut / per_sample["down"] > 2.5, per_sample
    json.dumps(per_sample)


def test_thousands_of_mutated_coded_messages_raise_only_wire_errors_from_frame_to_float32():
    # Prepare: coded EMBEDDING and GRADIENT frames of every codec, as the receiver gets them
    import random

    from vfl.wire.codecs import codecs_of

    rng = random.Random(43)
    cut = np.random.default_rng(1).standard_normal((6, 10)).astype(np.float32)
    cases = []
    for embedding, gradient in [("int8", "topk"), ("fp16", "bf16"), ("bf16", "int8"), ("none", "fp16")]:
        cfg = _compression(embedding=embedding, gradient=gradient, bits=5)
        up = Embedding(**FollowerCodecs(cfg).embedding_fields(cut), epoch=0, step=1)
        down = Gradient(**LeaderCodecs(cfg, 6).gradient_fields("f", cut, np.arange(6)), epoch=0, step=1)
        for msg, codec in ((up, codecs_of(cfg)[0]), (down, codecs_of(cfg)[1])):
            frames = [bytes(memoryview(f)) for f in encode(msg.TYPE, "f", "run1", 5, *msg.to_wire())]
            cases.append((frames, codec))
    outcomes = {"decoded": 0, "refused": 0}
    # Execute: flip bytes of the header or a tensor frame, then decode, parse and decode the payload
    for trial in range(3000):
        frames, codec = cases[trial % len(cases)]
        frames = list(frames)
        i = rng.randrange(1, len(frames))
        raw = bytearray(frames[i])
        for _ in range(rng.randint(1, 3)):
            if raw:
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        frames[i] = bytes(raw)
        try:
            msg = parse(decode(frames, "f"))
            payload = (msg.cut, msg.aux) if isinstance(msg, Embedding) else (msg.grad, msg.aux)
            with np.errstate(all="ignore"):
                out = _decode_payload(codec, msg.codec, payload)
        except WireError:
            outcomes["refused"] += 1
            continue
        # Assert: whatever decodes is a finite float32 (6, 10) tensor
        assert out.dtype == np.float32 and out.shape == (6, 10) and np.isfinite(out).all()
        outcomes["decoded"] += 1
    assert outcomes["decoded"] > 300 and outcomes["refused"] > 300, outcomes


def _decode_payload(codec, name, payload):
    from vfl.wire.codecs import decode as decode_payload

    return decode_payload(codec, name, payload, (6, 10), "fuzz")
