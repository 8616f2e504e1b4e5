"""Handshake checks: what a follower's HELLO must agree on with the leader before any batch moves.

Freshness: each follower's HELLO carries a fresh random nonce, the leader's WELCOME echoes it, and
the run id is a hash of the leader's own nonce and every follower's, so a recorded session can
answer no new HELLO and no message of an old run fits a new one. The HELLO's nonce also keys its id digests, so the
leader compares them with its own digests under that follower's nonce. The HELLO's fields, their types and
domains (the nonce's 32 hex digits, cut_dim in [2, MAX_CUT_DIM], ...) are vfl/wire/messages.Hello's; here
are only the comparisons with the leader's own values.
"""

from __future__ import annotations

import hashlib
import secrets

from vfl.config.schema import PartyConfig
from vfl.data.shards import SPLITS, PartyShard
from vfl.session.cut_digest import hello_digests
from vfl.wire import PROTOCOL_VERSION
from vfl.wire.codecs import agreement_problems, codecs_of
from vfl.wire.messages import Hello


def new_nonce() -> str:
    """128 random bits, hex."""
    return secrets.token_hex(16)


def run_id(leader_nonce: str, follower_nonces: dict[str, str]) -> str:
    """The run id bound to the leader's nonce and to every follower's HELLO nonce."""
    text = leader_nonce + "".join(f"|{p}={n}" for p, n in sorted(follower_nonces.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def hello_message(
    cfg: PartyConfig, shard: PartyShard, resume_step: int = 0, nonce: str = "", rank_fields: dict | None = None
) -> Hello:
    """What a party announces about itself (followers send it; the leader builds its own to compare with, keyed by
    the follower's nonce). nonce: the HELLO's, which also keys its id digests (vfl/session/cut_digest.hello_digests;
    empty: a view without digests, whose id_digest compares equal to any other such view's).
    rank_fields: vfl.distributed.pairing.rank_meta of this rank (none for one rank)."""
    return Hello(
        nonce=nonce,
        party=cfg.party,
        protocol=PROTOCOL_VERSION,
        id_digest=hello_digests(nonce, {s: shard.split(s).ids for s in SPLITS}) if nonce else dict.fromkeys(SPLITS, ""),
        rows={s: len(shard.split(s)) for s in SPLITS},
        batch_size=cfg.train.batch_size,
        seed=cfg.train.seed,
        cut_dim=cfg.model.bottom.cut_dim,
        microbatches=cfg.train.microbatches,  # every party cuts a batch into the same micro-batches
        resume_step=resume_step,
        timeout_s=cfg.network.timeout_s,  # the leader keeps long preparation shorter than this
        ema_decay=cfg.train.ema_decay or None,  # every party averages its weights alike; 0 (off) is left out
        # every party runs the same pipeline; 0 (synchronous) is left out; auto: the leader chooses (WELCOME names K)
        staleness=None if cfg.train.staleness == "auto" else cfg.train.staleness or None,
        staleness_auto=1 if cfg.train.staleness == "auto" else None,
        **_codec_fields(cfg),  # network.compression per direction; none is left out
        **(rank_fields or {}),
    )


def hello_problems(peer: str, theirs: Hello, ours: Hello) -> list[str]:
    """Every disagreement between a follower's HELLO and the leader's own view, as sentences (the fields' types
    and domains were checked when the HELLO was parsed, vfl/wire/messages.py)."""
    problems = []
    if theirs.protocol != PROTOCOL_VERSION:
        problems.append(f"{peer} speaks protocol {theirs.protocol!r}, the leader speaks {PROTOCOL_VERSION}")
    if theirs.party != peer:
        problems.append(f"{peer} introduced itself as {theirs.party!r}")
    for split in SPLITS:
        if ours.id_digest[split] != theirs.id_digest[split]:
            problems.append(
                f"{peer}'s {split} sample ids after the private set intersection differ from the leader's (its digest "
                f"{theirs.id_digest[split][:12]}, rows {theirs.rows[split]} vs {ours.rows[split]}): the parties must "
                f"prepare with the same --seed, --test-fraction and --valid-fraction (a sample's split is a function of its id)"
            )
    if theirs.resume_step != ours.resume_step:
        problems.append(
            f"{peer} resumes at global step {theirs.resume_step} but the leader at "
            f"{ours.resume_step!r}; resume every party from checkpoints of the same step"
        )
    for key in ("batch_size", "seed", "microbatches"):
        if getattr(theirs, key) != getattr(ours, key):
            problems.append(
                f"{peer} has train.{key}={str(getattr(theirs, key))[:20]} but the leader has "
                f"train.{key}={getattr(ours, key)!r}"
            )
    problems += agreement_problems(
        peer,
        {"embedding": theirs.embedding_codec, "gradient": theirs.gradient_codec},
        {"embedding": ours.embedding_codec, "gradient": ours.gradient_codec},
    )
    if (theirs.staleness or 0, theirs.staleness_auto) != (ours.staleness or 0, ours.staleness_auto):
        problems.append(  # the leader's value decides the schedule
            f"{peer} has train.staleness={_staleness(theirs)} but the leader has train.staleness="
            f"{_staleness(ours)}: set the same train.staleness on every party"
        )
    if theirs.ema_decay != ours.ema_decay:
        problems.append(
            f"{peer} has train.ema_decay={_decay(theirs.ema_decay)} but the leader has "
            f"train.ema_decay={_decay(ours.ema_decay)}: set the same train.ema_decay on every party"
        )
    return problems


def _staleness(hello: Hello) -> str:
    return "auto" if hello.staleness_auto else str(hello.staleness or 0)


def _codec_fields(cfg: PartyConfig) -> dict:
    """HELLO's embedding_codec and gradient_codec: each direction's codec with its parameter; absent for none."""
    embedding, gradient = codecs_of(cfg.network.compression)
    return {"embedding_codec": embedding.agreement, "gradient_codec": gradient.agreement}


def _decay(value: float | None) -> str:
    """train.ema_decay as a HELLO carries it: None is off (0)."""
    return "0 (off)" if value is None else repr(value)
