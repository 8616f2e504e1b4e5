"""A generated table with no Criteo name in it, held by three parties (leader, shop, telco).

Text ids, floats with missing values, text categoricals, and a label that depends on every party's columns (so the
collaboration matters)."""

from __future__ import annotations

import numpy as np

SCHEMAS = {
    "leader": {
        "id": "cust",
        "columns": {
            "age": "numeric",
            "income": {"kind": "numeric", "transform": "log1p"},
            "city": "categorical",
        },
        "label": {"column": "churn", "classes": ["no", "yes"]},
    },
    "shop": {
        "id": "cust",
        "columns": {"spend": {"kind": "numeric", "transform": {"quantile_bins": 8}}, "visits": "numeric"},
    },
    "telco": {
        "id": "cust",
        "columns": {"device": {"kind": "categorical", "transform": {"hash": {"buckets": 64}}}, "tenure": "numeric"},
    },
}


def own_table(rows: int, seed: int = 0, telco_share: float = 0.9) -> dict:
    """{party: DataFrame}; telco holds only about telco_share of the customers (the parties' id sets differ)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    ids = np.array([f"cust-{i:06d}" for i in range(rows)])
    age = rng.normal(40, 12, rows)
    income = np.exp(rng.normal(10, 1, rows))
    city = rng.choice(["paris", "lyon", "nice", "lille", "brest"], rows)
    spend = rng.gamma(2, 50, rows)
    visits = rng.poisson(3, rows).astype(float)
    device = rng.choice(["ios", "android", "web"], rows)
    tenure = rng.uniform(0, 10, rows)
    logit = 0.06 * (age - 40) + 1.2 * (city == "paris") - 1.2 * (device == "web") + 0.015 * (spend - 100)
    logit += 0.4 * (visits - 3) - 0.2 * (tenure - 5)
    churn = rng.random(rows) < 1 / (1 + np.exp(-logit))
    leader = pd.DataFrame(
        {
            "cust": ids,
            "age": age.round(1),
            "income": income.round(0),
            "city": city,
            "churn": np.where(churn, "yes", "no"),
        }
    )
    leader.loc[rng.random(rows) < 0.1, "age"] = np.nan
    shop = pd.DataFrame({"cust": ids, "spend": spend.round(2), "visits": visits, "unused": rng.normal(size=rows)})
    shop.loc[rng.random(rows) < 0.05, "spend"] = np.nan
    keep = rng.random(rows) < telco_share
    telco = pd.DataFrame({"cust": ids[keep], "device": device[keep], "tenure": tenure[keep].round(2)})
    return {"leader": leader, "shop": shop, "telco": telco}


def prepare_own_tables(tmp_path, parties: dict) -> dict[str, tuple[str, str]]:
    """{party: (raw csv, shard dir)}: each party of `parties` ({party: (frame, schema)}) prepared from its own file
    into tmp_path/shards/<party> (the leader's with a binary label), as `python -m vfl.data prepare` does."""
    from vfl.config.table_schema import SchemaConfig
    from vfl.data.prepare import PrepareOptions
    from vfl.data.prepare_table import prepare_table

    out = {}
    for party, (frame, schema) in parties.items():
        path = str(tmp_path / f"{party}.csv")
        frame.to_csv(path, index=False)
        shard = str(tmp_path / "shards" / party)
        task = "binary" if party == "leader" else None
        prepare_table(
            path, shard, party, SchemaConfig.model_validate(schema), task, PrepareOptions(), log=lambda _: None
        )
        out[party] = (path, shard)
    return out
