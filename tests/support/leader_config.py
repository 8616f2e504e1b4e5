"""A minimal leader config document, with any top-level section replaced, for the config's validation tests."""

from __future__ import annotations


def _leader(**over):
    doc = {
        "role": "leader",
        "party": "leader",
        "network": {"bind": "tcp://127.0.0.1:5560", "followers": ["follower0"]},
        "data": {"path": "data/criteo/leader"},
        "model": {"top": {"name": "linear"}},
        "train": {},
    }
    for k, v in over.items():
        doc[k] = v
    return doc
