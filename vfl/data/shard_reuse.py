"""Reusing prepared shards: an output directory is kept when its source content hash, options and parties match."""

from __future__ import annotations

import json
import os
from dataclasses import asdict

from privacy.durable_files import file_sha256
from vfl.data.parties import PartyColumns
from vfl.obs.progress import bar

_IGNORED_OPTIONS = ("force",)  # how to write, not what is written


def source_sha256(path: str) -> str:
    """SHA-256 of the file's text (decompressed for .gz), as `prepare` records it in manifest.json."""
    from vfl.data.readers.source_file import open_binary

    size = None if path.endswith(".gz") else os.path.getsize(path)
    with bar(total=size, desc="hash source", unit="B") as progress:
        return file_sha256(path, open_binary, progress.update)


def _parties_doc(parties: list[PartyColumns]) -> dict:
    return {
        p.name: {
            "dense": list(p.dense),
            "categorical": list(p.categorical),
            "has_labels": p.label,
            "drop_fraction": p.drop_fraction,
        }
        for p in parties
    }


def reusable(out_dir: str, input_path: str, parties: list[PartyColumns], opts) -> tuple[bool, str]:
    """(True, why) when out_dir already holds what `prepare(input_path, out_dir, parties, opts)` would write.

    The source is compared by content (SHA-256; a file whose size differs is rejected without hashing),
    then every prepare option except `force`, then each party's columns.
    """
    manifest_path = os.path.join(out_dir, "manifest.json")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        source, old_opts, old_parties = manifest["source"], manifest["options"], manifest["parties"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"{out_dir} holds no complete prepared dataset"
    if not all(os.path.isfile(os.path.join(out_dir, p.name, "manifest.json")) for p in parties):
        return False, f"{out_dir} lacks a party directory"
    want = {k: v for k, v in asdict(opts).items() if k not in _IGNORED_OPTIONS}
    have = {k: v for k, v in old_opts.items() if k not in _IGNORED_OPTIONS}
    if want.get("truth_path") is None:
        have.pop("truth_path", None)
        want.pop("truth_path", None)
    changed = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if changed:
        return False, f"prepare options differ from {manifest_path}: {', '.join(changed)}"
    mine = _parties_doc(parties)
    theirs = {
        n: {k: d.get(k) for k in ("dense", "categorical", "has_labels", "drop_fraction")}
        for n, d in old_parties.items()
    }
    if mine != theirs:
        return False, f"the parties' columns differ from {manifest_path}"
    if not input_path.endswith(".gz") and os.path.getsize(input_path) != source.get("bytes"):
        return False, f"{input_path} has another size than the prepared source"
    digest = source_sha256(input_path)
    if digest != source.get("sha256"):
        return (
            False,
            f"{input_path} has other content (sha256 {digest[:12]}) than the prepared source ({str(source.get('sha256'))[:12]})",
        )
    return True, f"source sha256 {digest[:12]}, options and parties match"
