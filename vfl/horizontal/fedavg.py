"""FedAvg over K simulated clients in one process, each privacy mechanism where a deployment applies it.

The clients are row partitions of Criteo-format data; a mechanism is applied on the client before upload, or on the
server around aggregation.

Model: logistic regression over hashed categoricals (one weight per field bucket), dense values
and their missing flags; parameters flattened to one vector of dimension d = 1 + 26 + 26 * buckets.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
from scipy.special import expit

from privacy.durable_files import replacing_file, write_json
from privacy.federated.accounting import PrivacyLedger
from privacy.federated.gaussian import gaussian_client, gaussian_cost
from privacy.federated.laplace import laplace_cost, laplace_protect
from privacy.federated.magrr import MagRRServer, magrr_client_bit
from privacy.federated.nbafl import (
    downlink_scale,
    nbafl_client,
    nbafl_cost,
    nbafl_server,
    uplink_noise_multiplier,
    uplink_scale,
)
from privacy.federated.secure_aggregation import MaskingClient, aggregate_masked
from privacy.federated.signds import signds_aggregate, signds_client, signds_cost
from vfl.data.parties import parse_parties
from vfl.data.prepare import PrepareOptions, prepare
from vfl.data.presets.criteo import CATEGORICAL_COLUMNS, DENSE_COLUMNS
from vfl.data.shards import PartyShard
from vfl.horizontal.config import FedConfig
from vfl.obs.metrics import auc, logloss


class LogisticModel:
    """Flat parameter vector [bias, dense weights (2 x 13), field-bucket weights (26 x B)]."""

    def __init__(self, buckets: int, n_dense: int, n_fields: int):
        self.buckets, self.n_dense, self.n_fields = buckets, n_dense, n_fields
        self.dim = 1 + 2 * n_dense + n_fields * buckets
        self.offsets = 1 + 2 * n_dense + np.arange(n_fields) * buckets

    def logits(self, w: np.ndarray, dense: np.ndarray, cat: np.ndarray) -> np.ndarray:
        return w[0] + dense @ w[1 : 1 + 2 * self.n_dense] + w[cat + self.offsets].sum(axis=1)

    def gradient(self, w: np.ndarray, dense: np.ndarray, cat: np.ndarray, y: np.ndarray) -> np.ndarray:
        g = expit(self.logits(w, dense, cat)) - y
        n = y.size
        grad = np.zeros_like(w)
        grad[0] = g.sum() / n
        grad[1 : 1 + 2 * self.n_dense] = dense.T @ g / n
        np.add.at(grad, (cat + self.offsets).ravel(), np.repeat(g / n, self.n_fields))
        return grad


def load_data(cfg: FedConfig, work: str):
    """Synthetic (or the configured raw TSV) prepared as one party holding every column."""
    src = cfg.path
    if src is None:
        from vfl.data.synth.criteo import write_synthetic

        src = os.path.join(work, "synthetic.tsv")
        if not os.path.exists(src):
            # horizontal clients hold their own labels: a reproducible label model is fine here
            write_synthetic(src, cfg.rows, seed=cfg.seed, label_seed=cfg.seed)
    shards = os.path.join(work, "shards")
    parties = parse_parties(
        {"all": {"dense": list(DENSE_COLUMNS), "categorical": list(CATEGORICAL_COLUMNS), "label": True}}
    )
    prepare(
        src,
        shards,
        parties,
        PrepareOptions(
            test_fraction=cfg.test_fraction,
            valid_fraction=0.0,
            seed=cfg.seed,
            hash_buckets=cfg.hash_buckets,
            force=True,
        ),
    )
    shard = PartyShard(os.path.join(shards, "all"))

    def arrays(split):
        s = shard.split(split)
        dense = np.concatenate([np.asarray(s.dense, np.float64), np.asarray(s.dense_missing, np.float64)], axis=1)
        return dense, np.asarray(s.cat, np.int64), np.asarray(s.labels, np.float64)

    return arrays("train"), arrays("test")


def local_training(
    model: LogisticModel, w: np.ndarray, data, cfg: FedConfig, rng: np.random.Generator, grad_clip: float | None
) -> np.ndarray:
    dense, cat, y = data
    w = w.copy()
    for _ in range(cfg.local_epochs):
        order = rng.permutation(y.size)
        for i in range(0, y.size, cfg.local_batch_size):
            b = order[i : i + cfg.local_batch_size]
            g = model.gradient(w, dense[b], cat[b], y[b])
            if grad_clip is not None:
                norm = np.linalg.norm(g)
                if norm > grad_clip:
                    g *= grad_clip / norm
            w -= cfg.local_lr * g
    return w


def run_fedavg(cfg: FedConfig, out_dir: str, log=print) -> dict:
    """Train, evaluate every round, and write out_dir/metrics.json."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    (tr_dense, tr_cat, tr_y), (te_dense, te_cat, te_y) = load_data(cfg, out_dir)
    model = LogisticModel(cfg.hash_buckets, tr_dense.shape[1] // 2, tr_cat.shape[1])
    parts = np.array_split(rng.permutation(tr_y.size), cfg.clients)
    clients = [(tr_dense[p], tr_cat[p], tr_y[p]) for p in parts]
    sizes = np.array([p.size for p in parts])
    w = np.zeros(model.dim)
    ledger = PrivacyLedger(accountant=cfg.accountant)
    magrr = MagRRServer()
    kind = cfg.encrypt_train_type
    rounds, secure_diff = [], 0.0
    log(f"FedAvg: {cfg.clients} clients, {cfg.rounds} rounds, d = {model.dim} parameters, encrypt_train_type = {kind}")
    if kind == "NBAFL":
        _charge_nbafl_run(cfg, ledger, int(sizes.min()), log)
    t0 = time.perf_counter()
    for r in range(cfg.rounds):
        grad_clip = cfg.nbafl.grad_clip if kind == "NBAFL" else None
        local = [local_training(model, w, data, cfg, rng, grad_clip) for data in clients]
        w, upload, diff = _aggregate_round(cfg, model, w, local, sizes, r, rng, ledger, magrr)
        secure_diff = max(secure_diff, diff)
        probs = expit(model.logits(w, te_dense, te_cat))
        entry = {
            "round": r,
            "test_auc": auc(te_y, probs),
            "test_logloss": logloss(te_y, probs),
            "upload_numbers_per_client": upload,
        }
        if kind == "SIGNDS" and cfg.magrr:
            entry["magrr_r_est"] = magrr.r_est
        rounds.append(entry)
        log(f"round {r} test_auc: {entry['test_auc']:.4f} upload numbers per client: {upload}")
    metrics = {
        "encrypt_train_type": kind,
        "final_test_auc": rounds[-1]["test_auc"],
        "rounds": rounds,
        "model_dimension": model.dim,
        "clients": cfg.clients,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if kind == "PW_ENCRYPT":
        metrics["secure_aggregation"] = {"max_abs_diff_vs_plain_sum": secure_diff, "quantisation_step": 2.0**-24}
    if cfg.privacy_eval_type == "LAPLACE":
        metrics["laplace_eval"] = laplace_evaluation(probs, te_y, cfg.laplace_eval_eps, rng)
        ledger.spend("laplace_eval", laplace_cost(cfg.laplace_eval_eps), scope="per released output")
    metrics["privacy"] = ledger.totals()
    _say_accountants(metrics["privacy"], log)
    with replacing_file(os.path.join(out_dir, "model.npy")) as f:
        np.save(f, w)
    write_json(os.path.join(out_dir, "metrics.json"), metrics, indent=2)
    return metrics


def _charge_nbafl_run(cfg: FedConfig, ledger: PrivacyLedger, smallest: int, log) -> None:
    """NbAFL's run-level claim and the T uplink releases it is made of, charged to the accountant up front."""
    cost = nbafl_cost(cfg.nbafl, cfg.rounds, cfg.accountant)
    if cost.get("claim_void"):
        log(
            f"NbAFL: epsilon {cfg.nbafl.epsilon:g} over {cfg.rounds} rounds is no guarantee (Theorem 1 needs "
            f"epsilon / rounds < 1 and the paper's constant); charged the {cfg.accountant} accountant's "
            f"{cost['eps']:.4g} at delta {cfg.nbafl.delta:g}"
        )
    ledger.spend(
        "nbafl",
        {"eps": cost["eps"], "delta": cost["delta"]},
        scope="per client (whole run)",
        noise_multiplier=uplink_noise_multiplier(cfg.nbafl, cfg.rounds),
        releases=cfg.rounds,
    )
    log(
        f"NbAFL: uplink noise scale {uplink_scale(cfg.nbafl, cfg.rounds, smallest):.4g}, downlink "
        f"{downlink_scale(cfg.nbafl, cfg.rounds, cfg.clients, cfg.clients, smallest):.4g}"
    )


def _aggregate_round(cfg: FedConfig, model, w, local, sizes, r: int, rng, ledger, magrr) -> tuple:
    """One round's server update under the run's encrypt_train_type: (new weights, numbers uploaded per client,
    the secure aggregate's largest deviation from the plain sum)."""
    kind = cfg.encrypt_train_type
    updates = [lw - w for lw in local]
    secure_diff = 0.0
    upload = model.dim
    if kind == "NOT_ENCRYPT":
        w = w + np.mean(updates, axis=0)
    elif kind == "PW_ENCRYPT":
        maskers = [MaskingClient(i) for i in range(cfg.clients)]
        pubs = {m.client_id: m.public for m in maskers}
        masked = {m.client_id: m.mask(u, pubs, r, cfg.clients) for m, u in zip(maskers, updates)}
        total = aggregate_masked(masked, list(pubs))
        secure_diff = float(np.abs(total - np.sum(updates, axis=0)).max())
        w = w + total / cfg.clients
    elif kind == "DP_ENCRYPT":
        w = w + np.mean([gaussian_client(u, cfg.dp, rng) for u in updates], axis=0)
        ledger.spend("gaussian", gaussian_cost(cfg.dp), noise_multiplier=cfg.dp.noise_multiplier)
    elif kind == "NBAFL":
        noisy = [nbafl_client(lw, cfg.nbafl, cfg.rounds, int(n), rng) for lw, n in zip(local, sizes)]
        w = nbafl_server(np.mean(noisy, axis=0), cfg.nbafl, cfg.rounds, cfg.clients, cfg.clients, int(sizes.min()), rng)
    elif kind == "SIGNDS":
        ups = [signds_client(u, cfg.signds, rng) for u in updates]
        upload = int(np.mean([u.upload_numbers for u in ups]))
        lr = magrr.global_lr(cfg.clients) if cfg.magrr else cfg.signds.sign_global_lr
        w = w + signds_aggregate([(u.indices, u.sign) for u in ups], model.dim, lr)
        ledger.spend("signds", signds_cost(cfg.signds))
        if cfg.magrr:
            magrr.update([magrr_client_bit(u.topk_mean_abs, magrr.r_est, magrr.phase, magrr.eps_rr, rng) for u in ups])
            ledger.spend("magrr", magrr.cost())
    return w, upload, secure_diff


def _say_accountants(totals: dict, log) -> None:
    """Each scope's summed and accountant epsilon, for the console."""
    for scope, t in totals.items():
        if "accountant" in t:
            a = t["accountant"]
            log(
                f"privacy {scope}: summed eps {t['eps']:.6g} delta {t['delta']:.3g}; "
                f"{a['name']} accountant eps {a['eps']:.6g} delta {a['delta']:.3g} over {a['gaussian_releases']} "
                "Gaussian releases"
            )


def laplace_evaluation(probs: np.ndarray, y: np.ndarray, eps: float, rng: np.random.Generator) -> dict:
    """AUC, silhouette and Calinski-Harabasz (scikit-learn) of clean vs Laplace-protected outputs."""
    from sklearn.metrics import calinski_harabasz_score, silhouette_score

    clean = np.stack([1 - probs, probs], axis=1)
    protected = laplace_protect(clean, eps, rng)
    labels = y.astype(int)
    n = min(2000, labels.size)
    return {
        "laplace_eval_eps": eps,
        "noise_below_1e-5_probability": 1 - math.exp(-eps * 1e-5),
        "clean": {
            "auc": auc(y, clean[:, 1]),
            "silhouette": float(silhouette_score(clean, labels, sample_size=n, random_state=0)),
            "calinski_harabasz": float(calinski_harabasz_score(clean, labels)),
        },
        "protected": {
            "auc": auc(y, protected[:, 1]),
            "silhouette": float(silhouette_score(protected, labels, sample_size=n, random_state=0)),
            "calinski_harabasz": float(calinski_harabasz_score(protected, labels)),
        },
    }
