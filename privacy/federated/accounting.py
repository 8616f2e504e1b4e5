"""The FedAvg privacy ledger: every mechanism use with its (eps, delta), summed and, for Gaussian ones, composed.

Two totals per scope, side by side:
- ``eps``/``delta``: basic (sequential) composition (Dwork & Roth 2014, Theorem 3.16) sums eps and delta over the uses
  that touch the same data. It is the only figure for pure-eps mechanisms (Laplace output protection, SignDS, MagRR's
  randomized response), whose few releases lose little by summing.
- ``accountant``: Gaussian uses (DP_ENCRYPT's rounds, NbAFL's uplinks) recorded with their noise multiplier
  (sigma / sensitivity) are composed by a maintained accountant (`privacy/dp_accountant.py`, dp_accounting's RDP by
  default) at the largest delta any of them was calibrated for; the pure-eps uses of the same scope are added on top
  (basic composition of the two parts), and their deltas too.
Uses on disjoint data (different clients in one round, different samples) compose in parallel and are recorded per
scope, so totals are per scope: e.g. "per client" sums a client's spending over all rounds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from privacy.dp_accountant import DEFAULT_ACCOUNTANT, composed_gaussian_epsilon


@dataclass
class PrivacyLedger:
    """Records (mechanism, eps, delta, count[, noise multiplier, releases]) per scope."""

    accountant: str = DEFAULT_ACCOUNTANT
    entries: list[dict] = field(default_factory=list)

    def spend(
        self,
        mechanism: str,
        cost: dict,
        count: int = 1,
        scope: str = "per client",
        noise_multiplier: float | None = None,
        releases: int | None = None,
    ) -> None:
        """`count` uses at `cost` each; a Gaussian mechanism also gives its noise multiplier and how many Gaussian
        releases those uses make (default `count`: e.g. NbAFL's one run-level claim is T uplink releases)."""
        entry = {
            "mechanism": mechanism,
            "eps": float(cost["eps"]),
            "delta": float(cost["delta"]),
            "count": int(count),
            "scope": scope,
        }
        if noise_multiplier is not None:
            entry["noise_multiplier"] = float(noise_multiplier)
            entry["releases"] = int(count if releases is None else releases)
        self.entries.append(entry)

    def totals(self) -> dict:
        """{scope: {eps, delta, by_mechanism[, accountant]}}: eps and delta summed over the scope's uses, and where the
        scope has Gaussian uses, `accountant` = {name, eps, delta} of the maintained accountant's composition."""
        out: dict = defaultdict(lambda: {"eps": 0.0, "delta": 0.0, "by_mechanism": {}})
        for e in self.entries:
            t = out[e["scope"]]
            t["eps"] += e["eps"] * e["count"]
            t["delta"] += e["delta"] * e["count"]
            m = t["by_mechanism"].setdefault(e["mechanism"], {"eps": 0.0, "delta": 0.0, "uses": 0})
            m["eps"] += e["eps"] * e["count"]
            m["delta"] += e["delta"] * e["count"]
            m["uses"] += e["count"]
        totals = {k: {**v, "delta": min(v["delta"], 1.0)} for k, v in out.items()}
        for scope, t in totals.items():
            composed = self._composed(scope)
            if composed is not None:
                t["accountant"] = composed
        return totals

    def _composed(self, scope: str) -> dict | None:
        uses = [e for e in self.entries if e["scope"] == scope]
        gaussian = [e for e in uses if "noise_multiplier" in e]
        if not gaussian:
            return None
        by_z: dict = defaultdict(int)
        for e in gaussian:
            by_z[e["noise_multiplier"]] += e["releases"]
        target = max(e["delta"] for e in gaussian)
        eps = composed_gaussian_epsilon([(z, k, 1.0) for z, k in sorted(by_z.items())], target, self.accountant)
        pure = [e for e in uses if "noise_multiplier" not in e]
        return {
            "name": self.accountant,
            "eps": eps + sum(e["eps"] * e["count"] for e in pure),
            "delta": min(target + sum(e["delta"] * e["count"] for e in pure), 1.0),
            "gaussian_releases": sum(by_z.values()),
        }
