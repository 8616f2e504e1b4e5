"""A privacy ledger: every mechanism use is recorded with its (eps, delta); totals by basic composition.

Basic (sequential) composition (Dwork & Roth 2014, Theorem 3.16) sums eps and delta over the uses
that touch the same data. Uses on disjoint data (different clients in one round, different samples)
compose in parallel and are recorded per scope, so totals are per scope: e.g. "per client" sums a
client's spending over all rounds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class PrivacyLedger:
    """Records (mechanism, eps, delta, count) per scope."""

    entries: list[dict] = field(default_factory=list)

    def spend(self, mechanism: str, cost: dict, count: int = 1, scope: str = "per client") -> None:
        self.entries.append(
            {
                "mechanism": mechanism,
                "eps": float(cost["eps"]),
                "delta": float(cost["delta"]),
                "count": int(count),
                "scope": scope,
            }
        )

    def totals(self) -> dict:
        """{scope: {eps, delta, by_mechanism}} with eps and delta summed over the scope's uses."""
        out: dict = defaultdict(lambda: {"eps": 0.0, "delta": 0.0, "by_mechanism": {}})
        for e in self.entries:
            t = out[e["scope"]]
            t["eps"] += e["eps"] * e["count"]
            t["delta"] += e["delta"] * e["count"]
            m = t["by_mechanism"].setdefault(e["mechanism"], {"eps": 0.0, "delta": 0.0, "uses": 0})
            m["eps"] += e["eps"] * e["count"]
            m["delta"] += e["delta"] * e["count"]
            m["uses"] += e["count"]
        return {k: {**v, "delta": min(v["delta"], 1.0)} for k, v in out.items()}
