"""The batched DLEQ proof (vfl/align/psi/dleq.py) against RFC 9497 Appendix A.1 (ristretto255-SHA512), and its refusals.

The known answers are the RFC's (copied from its Appendix A.1.1 and A.1.2, not produced by this code): DeriveKeyPair
in the OPRF and VOPRF modes, HashToGroup and blinding of the inputs, the server's evaluation, and the VOPRF proofs of
batch size 1 (test vectors 1 and 2) and 2 (test vector 3) with their fixed ProofRandomScalar. A proof over a statement
with one value raised to another exponent, or one value moved to another slot, is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from vfl.align.psi import dleq

SEED = bytes.fromhex("a3" * 32)
KEY_INFO = bytes.fromhex("74657374206b6579")  # "test key"
INPUTS = (bytes.fromhex("00"), bytes.fromhex("5a" * 17))
BLIND = bytes.fromhex("64d37aed22a27f5191de1c1d69fadb899d8862b58eb4220029e036ec4c1f6706")
OPRF_SK = "5ebcea5ee37023ccb9fc2d2019f9d7737be85591ae8652ffa9ef0f4d37063b0e"  # A.1.1
OPRF_BLINDED = ("609a0ae68c15a3cf6903766461307e5c8bb2f95e7e6550e1ffa2dc99e412803c",)
VOPRF_SK = "e6f73f344b79b379f1a0dd37e07ff62e38d9f71345ce62ae3a9bc60b04ccd909"  # A.1.2
VOPRF_PK = "c803e2cc6b05fc15064549b5920659ca4a77b2cca6f04f6b357009335476ad4e"
R_1 = "222a5e897cf59db8145db8d16e597e8facb80ae7d4e26d9881aa6f61d645fc0e"
VECTORS = [  # (blinds, blinded elements, evaluation elements, proof, proof random scalar): A.1.2 test vectors 1, 2, 3
    (
        [BLIND.hex()],
        ["863f330cc1a1259ed5a5998a23acfd37fb4351a793a5b3c090b642ddc439b945"],
        ["aa8fa048764d5623868679402ff6108d2521884fa138cd7f9c7669a9a014267e"],
        "ddef93772692e535d1a53903db24367355cc2cc78de93b3be5a8ffcc6985dd06"
        "6d4346421d17bf5117a2a1ff0fcb2a759f58a539dfbe857a40bce4cf49ec600d",
        R_1,
    ),
    (
        [BLIND.hex()],
        ["cc0b2a350101881d8a4cba4c80241d74fb7dcbfde4a61fde2f91443c2bf9ef0c"],
        ["60a59a57208d48aca71e9e850d22674b611f752bed48b36f7a91b372bd7ad468"],
        "401a0da6264f8cf45bb2f5264bc31e109155600babb3cd4e5af7d181a2c9dc0a"
        "67154fabf031fd936051dec80b0b6ae29c9503493dde7393b722eafdf5a50b02",
        R_1,
    ),
    (
        [BLIND.hex(), R_1],
        [
            "863f330cc1a1259ed5a5998a23acfd37fb4351a793a5b3c090b642ddc439b945",
            "90a0145ea9da29254c3a56be4fe185465ebb3bf2a1801f7124bbbadac751e654",
        ],
        [
            "aa8fa048764d5623868679402ff6108d2521884fa138cd7f9c7669a9a014267e",
            "cc5ac221950a49ceaa73c8db41b82c20372a4c8d63e5dded2db920b7eee36a2a",
        ],
        "cc203910175d786927eeb44ea847328047892ddf8590e723c37205cb74600b0a"
        "5ab5337c8eb4ceae0494c2cf89529dcf94572ed267473d567aeed6ab873dee08",
        "419c4f4f5052c53c45f3da494d2b67b220d02118e0857cdbcf037f9ea84bbe0c",
    ),
]


def _points(hexes) -> np.ndarray:
    return np.frombuffer(b"".join(bytes.fromhex(h) for h in hexes), np.uint8).reshape(-1, 32)


def test_derive_key_pair_gives_the_rfc_keys_in_oprf_and_voprf_modes():
    # Prepare / Execute
    oprf_sk, _ = dleq.derive_key_pair(SEED, KEY_INFO, dleq.context_string(dleq.MODE_OPRF))
    voprf_sk, voprf_pk = dleq.derive_key_pair(SEED, KEY_INFO)
    # Assert
    assert oprf_sk.hex() == OPRF_SK
    assert (voprf_sk.hex(), voprf_pk.hex()) == (VOPRF_SK, VOPRF_PK)


@pytest.mark.parametrize("vector", range(3))
def test_blinding_and_evaluation_give_the_rfc_elements(vector):
    # Prepare
    blinds, blinded, evaluated, _, _ = VECTORS[vector]
    inputs = INPUTS if len(blinds) == 2 else (INPUTS[vector],)
    # Execute
    got_blinded = [dleq.mult(bytes.fromhex(r), dleq.hash_to_group(x)) for r, x in zip(blinds, inputs)]
    got_evaluated = [dleq.mult(bytes.fromhex(VOPRF_SK), b) for b in got_blinded]
    oprf_blinded = dleq.mult(BLIND, dleq.hash_to_group(INPUTS[0], dleq.context_string(dleq.MODE_OPRF)))
    # Assert
    assert [b.hex() for b in got_blinded] == blinded
    assert [e.hex() for e in got_evaluated] == evaluated
    assert oprf_blinded.hex() == OPRF_BLINDED[0]


@pytest.mark.parametrize("vector", range(3))
def test_generate_proof_with_the_rfc_random_scalar_gives_the_rfc_proof(vector):
    # Prepare
    _, blinded, evaluated, proof, r = VECTORS[vector]
    # Execute
    got = dleq.generate_proof(
        bytes.fromhex(VOPRF_SK), bytes.fromhex(VOPRF_PK), _points(blinded), _points(evaluated), bytes.fromhex(r)
    )
    # Assert
    assert got.hex() == proof


@pytest.mark.parametrize("vector", range(3))
def test_verify_proof_accepts_the_rfc_proof(vector):
    # Prepare
    _, blinded, evaluated, proof, _ = VECTORS[vector]
    # Execute / Assert
    assert dleq.verify_proof(bytes.fromhex(VOPRF_PK), _points(blinded), _points(evaluated), bytes.fromhex(proof))


def test_verify_proof_refuses_the_rfc_batch_with_its_evaluations_swapped():
    # Prepare: test vector 3 with the two evaluated elements exchanged (each is a real evaluation, of the other input)
    _, blinded, evaluated, proof, _ = VECTORS[2]
    # Execute / Assert
    assert not dleq.verify_proof(
        bytes.fromhex(VOPRF_PK), _points(blinded), _points(evaluated[::-1]), bytes.fromhex(proof)
    )


def _statement(n: int, k: bytes, seed: int):
    from vfl.align.psi import ecdh

    c = ecdh.hash_ids(np.arange(seed, seed + n, dtype=np.int64))
    return c, ecdh.raise_to(c, k)


@pytest.mark.parametrize("n", [1, 7, 3000])  # 3000: the composites run on the worker processes in parts
def test_a_fresh_proof_verifies_and_a_second_exponent_in_one_slot_is_refused(n):
    # Prepare
    from vfl.align.psi import ecdh

    k, k2 = ecdh.new_exponent(), ecdh.new_exponent()
    c, d = _statement(n, k, 10)
    pk = dleq.public_key(k)
    forged = d.copy()
    forged[n // 2] = ecdh.raise_to(c[n // 2 : n // 2 + 1], k2)[0]
    # Execute
    proof = dleq.generate_proof(k, pk, c, d)
    forged_proof = dleq.generate_proof(k, pk, c, forged)  # the prover's own composite Z = k M ignores the forgery
    # Assert
    assert dleq.verify_proof(pk, c, d, proof)
    assert not dleq.verify_proof(pk, c, forged, forged_proof)
    assert not dleq.verify_proof(pk, c, forged, proof)
    assert not dleq.verify_proof(dleq.public_key(k2), c, d, proof)


def test_values_rotated_by_one_slot_are_refused():
    # Prepare: every value is the right exponent of another slot's input (the red team's rotation)
    from vfl.align.psi import ecdh

    k = ecdh.new_exponent()
    c, d = _statement(16, k, 100)
    rotated = np.roll(d, 1, axis=0)
    # Execute
    proof = dleq.generate_proof(k, dleq.public_key(k), c, rotated)
    # Assert
    assert not dleq.verify_proof(dleq.public_key(k), c, rotated, proof)


def test_malformed_proofs_and_values_are_refused_not_raised():
    # Prepare
    from vfl.align.psi import ecdh

    k = ecdh.new_exponent()
    c, d = _statement(4, k, 200)
    pk = dleq.public_key(k)
    proof = dleq.generate_proof(k, pk, c, d)
    bad_point = d.copy()
    bad_point[1] = 0xFF  # not a canonical encoding
    unreduced = proof[:32] + (dleq.ORDER + 1).to_bytes(32, "little")
    # Execute / Assert
    assert not dleq.verify_proof(pk, c, bad_point, proof)
    assert not dleq.verify_proof(pk, c, d, proof[:63])
    assert not dleq.verify_proof(pk, c, d, unreduced)
