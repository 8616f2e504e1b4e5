"""FedAvg example configuration (the seeds' shape): validation with quoted domains, all errors at once."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from privacy.domains import domain_error
from privacy.gaussian import GaussianParams
from vfl.config import read_yaml
from privacy.nbafl import NbAFLParams
from privacy.signds import SignDSParams

ENCRYPT_TYPES = ("NOT_ENCRYPT", "SIGNDS", "DP_ENCRYPT", "NBAFL", "PW_ENCRYPT")
EVAL_TYPES = ("NOT_ENCRYPT", "LAPLACE")
_KEYS = {
    "": ("clients", "rounds", "local_epochs", "local_batch_size", "local_lr", "seed", "data", "encrypt",
         "privacy_eval_type", "laplace_eval"),
    "data": ("rows", "path", "hash_buckets", "test_fraction"),
    "encrypt": ("encrypt_train_type", "signds", "dp", "nbafl"),
    "encrypt.signds": ("sign_k", "sign_eps", "sign_thr_ratio", "sign_global_lr", "sign_dim_out", "magrr"),
    "encrypt.dp": ("dp_eps", "dp_delta", "dp_norm_clip"),
    "encrypt.nbafl": ("epsilon", "delta", "w_clip", "grad_clip", "constant"),
    "laplace_eval": ("laplace_eval_eps",),
}


class FedConfigError(ValueError):
    """The FedAvg config is unusable; the message lists every problem."""


@dataclass(frozen=True)
class FedConfig:
    clients: int = 100
    rounds: int = 20
    local_epochs: int = 1
    local_batch_size: int = 64
    local_lr: float = 0.1
    seed: int = 0
    rows: int = 100_000
    path: str | None = None
    hash_buckets: int = 1000
    test_fraction: float = 0.1
    encrypt_train_type: str = "NOT_ENCRYPT"
    signds: SignDSParams = field(default_factory=SignDSParams)
    magrr: bool = True
    dp: GaussianParams = field(default_factory=GaussianParams)
    nbafl: NbAFLParams = field(default_factory=NbAFLParams)
    privacy_eval_type: str = "NOT_ENCRYPT"
    laplace_eval_eps: float = 230260.0


def _section(doc, path, errors) -> dict:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        errors.append(f"{path or 'top level'}: expected a mapping, got {doc!r}")
        return {}
    for k in doc:
        if k not in _KEYS[path]:
            near = difflib.get_close_matches(str(k), _KEYS[path], n=1)
            errors.append(f"unknown key {(path + '.' if path else '') + str(k)!r}" + (f"; did you mean {near[0]!r}?" if near else "")
                          + f"; allowed: {', '.join(_KEYS[path])}")
    return doc


def _checked(doc, key, default, errors, path="", **domain):
    v = doc.get(key, default)
    err = domain_error((path + "." if path else "") + key, v, **domain)
    if err:
        errors.append(err)
        return default
    return v


def _int(doc, key, default, lo, hi, errors, path=""):
    return _checked(doc, key, default, errors, path, lo=lo, hi=hi, integer=True)


def _params(cls, doc, prefix, errors):
    try:
        return cls(**doc)
    except ValueError as e:
        errors.extend(f"{prefix}.{m.strip()}" if not m.strip().startswith(prefix) else m.strip() for m in str(e).split(";"))
    except TypeError as e:
        errors.append(f"{prefix}: {e}")
    return cls()


def parse_fed_config(doc, source: str = "config", overrides: dict | None = None) -> FedConfig:
    errors: list[str] = []
    top = dict(_section(doc or {}, "", errors))
    if (overrides or {}).get("rounds") is not None:
        top["rounds"] = overrides["rounds"]
    data = _section(top.get("data"), "data", errors)
    enc = _section(top.get("encrypt"), "encrypt", errors)
    s = dict(_section(enc.get("signds"), "encrypt.signds", errors))
    magrr = s.pop("magrr", True)
    if not isinstance(magrr, bool):
        errors.append(f"encrypt.signds.magrr must be true or false, got {magrr!r}")
    dp = _section(enc.get("dp"), "encrypt.dp", errors)
    nb = _section(enc.get("nbafl"), "encrypt.nbafl", errors)
    lap = _section(top.get("laplace_eval"), "laplace_eval", errors)
    over = overrides or {}
    etype = over.get("encrypt_train_type") or enc.get("encrypt_train_type", "NOT_ENCRYPT")
    if etype not in ENCRYPT_TYPES:
        errors.append(f"encrypt.encrypt_train_type must be one of {list(ENCRYPT_TYPES)}, got {etype!r}")
    ptype = over.get("privacy_eval_type") or top.get("privacy_eval_type", "NOT_ENCRYPT")
    if ptype not in EVAL_TYPES:
        errors.append(f"privacy_eval_type must be one of {list(EVAL_TYPES)}, got {ptype!r}")
    if over.get("laplace_eval_eps") is not None:
        lap = {**lap, "laplace_eval_eps": over["laplace_eval_eps"]}
    lap_eps = _checked(lap, "laplace_eval_eps", 230260.0, errors, "laplace_eval", lo=0, lo_open=True)
    lr = _checked(top, "local_lr", 0.1, errors, lo=0, hi=10, lo_open=True)
    tf = _checked(data, "test_fraction", 0.1, errors, "data", lo=0, hi=1, lo_open=True, hi_open=True)
    cfg = FedConfig(
        clients=_int(top, "clients", 100, 2, 100_000, errors), rounds=_int(top, "rounds", 20, 1, 100_000, errors),
        local_epochs=_int(top, "local_epochs", 1, 1, 1000, errors),
        local_batch_size=_int(top, "local_batch_size", 64, 1, 1_000_000, errors), local_lr=lr,
        seed=_int(top, "seed", 0, 0, 2**63 - 1, errors), rows=_int(data, "rows", 100_000, 100, 10**9, errors, "data"),
        path=data.get("path"), hash_buckets=_int(data, "hash_buckets", 1000, 3, 10**7, errors, "data"), test_fraction=tf,
        encrypt_train_type=etype, signds=_params(SignDSParams, s, "encrypt.signds", errors), magrr=magrr,
        dp=_params(GaussianParams, dp, "encrypt.dp", errors), nbafl=_params(NbAFLParams, nb, "encrypt.nbafl", errors),
        privacy_eval_type=ptype, laplace_eval_eps=lap_eps)
    if errors:
        raise FedConfigError(f"{source}: {len(errors)} problem(s):\n  - " + "\n  - ".join(errors))
    return cfg


def load_fed_config(path: str | None, overrides: dict | None = None) -> FedConfig:
    if path is None:
        return parse_fed_config({}, "defaults", overrides)
    return parse_fed_config(read_yaml(path, FedConfigError, "config file"), path, overrides)
