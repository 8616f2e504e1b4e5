"""FedAvg example configuration (the seeds' shape): one pydantic schema, quoted domains, every error once."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from privacy.dp_accountant import ACCOUNTANTS, DEFAULT_ACCOUNTANT
from privacy.federated.gaussian import GaussianParams
from privacy.federated.nbafl import NbAFLParams
from privacy.federated.signds import SignDSParams
from privacy.field_types import Choice, Flag, Number
from vfl.config.report import apply_overrides, fill_empty_sections, problems
from vfl.config.yamlfile import read_yaml

ENCRYPT_TYPES = ("NOT_ENCRYPT", "SIGNDS", "DP_ENCRYPT", "NBAFL", "PW_ENCRYPT")
EVAL_TYPES = ("NOT_ENCRYPT", "LAPLACE")


class FedConfigError(ValueError):
    """The FedAvg config is unusable; the message lists every problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FedDataFile(_Section):
    rows: Number(100, 10**9, integer=True) = 100_000
    path: Optional[str] = None
    hash_buckets: Number(3, 10**7, integer=True) = 1000
    test_fraction: Number(0, 1, lo_open=True, hi_open=True) = 0.1


class SignDSFile(SignDSParams):
    magrr: Flag() = True  # MagRR adapts the global learning rate (SignDS Algorithm 2)


class EncryptFile(_Section):
    encrypt_train_type: Choice(*ENCRYPT_TYPES) = "NOT_ENCRYPT"
    signds: SignDSFile = Field(default_factory=SignDSFile)
    dp: GaussianParams = Field(default_factory=GaussianParams)
    nbafl: NbAFLParams = Field(default_factory=NbAFLParams)


class LaplaceEvalFile(_Section):
    laplace_eval_eps: Number(0, lo_open=True) = 230260.0


class FedFile(_Section):
    """The YAML document of `python -m vfl.horizontal --config`."""

    clients: Number(2, 100_000, integer=True) = 100
    rounds: Number(1, 100_000, integer=True) = 20
    local_epochs: Number(1, 1000, integer=True) = 1
    local_batch_size: Number(1, 1_000_000, integer=True) = 64
    local_lr: Number(0, 10, lo_open=True) = 0.1
    seed: Number(0, 2**63 - 1, integer=True) = 0
    data: FedDataFile = Field(default_factory=FedDataFile)
    encrypt: EncryptFile = Field(default_factory=EncryptFile)
    privacy_eval_type: Choice(*EVAL_TYPES) = "NOT_ENCRYPT"
    laplace_eval: LaplaceEvalFile = Field(default_factory=LaplaceEvalFile)
    # composes the Gaussian rounds (DP_ENCRYPT, NBAFL): rdp (Renyi DP) or pld (privacy loss distributions, tighter, slower)
    accountant: Choice(*ACCOUNTANTS) = DEFAULT_ACCOUNTANT


@dataclass(frozen=True)
class FedConfig:
    """The validated settings, flat, as the simulation reads them."""

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
    accountant: str = DEFAULT_ACCOUNTANT


_OVERRIDE_KEYS = {
    "rounds": "rounds",
    "encrypt_train_type": "encrypt.encrypt_train_type",
    "privacy_eval_type": "privacy_eval_type",
    "laplace_eval_eps": "laplace_eval.laplace_eval_eps",
    "accountant": "accountant",
}


def parse_fed_config(doc: Any, source: str = "config", overrides: dict | None = None) -> FedConfig:
    """Validate the YAML document (with command-line overrides: flag names or dotted keys); FedConfigError lists all."""
    doc = copy.deepcopy(doc) if doc is not None else {}
    if not isinstance(doc, dict):
        raise FedConfigError(f"{source}: 1 problem(s):\n  - top level: expected a mapping, got {doc!r}")
    doc = apply_overrides(
        fill_empty_sections(FedFile, doc),
        {_OVERRIDE_KEYS.get(k, k): v for k, v in (overrides or {}).items() if v is not None},
    )
    try:
        f = FedFile.model_validate(doc)
    except ValidationError as e:
        errors = problems(FedFile, e)
        raise FedConfigError(f"{source}: {len(errors)} problem(s):\n  - " + "\n  - ".join(errors)) from None
    s = f.encrypt.signds
    return FedConfig(
        clients=f.clients,
        rounds=f.rounds,
        local_epochs=f.local_epochs,
        local_batch_size=f.local_batch_size,
        local_lr=f.local_lr,
        seed=f.seed,
        rows=f.data.rows,
        path=f.data.path,
        hash_buckets=f.data.hash_buckets,
        test_fraction=f.data.test_fraction,
        encrypt_train_type=f.encrypt.encrypt_train_type,
        signds=SignDSParams(**s.model_dump(exclude={"magrr"})),
        magrr=s.magrr,
        dp=f.encrypt.dp,
        nbafl=f.encrypt.nbafl,
        privacy_eval_type=f.privacy_eval_type,
        laplace_eval_eps=f.laplace_eval.laplace_eval_eps,
        accountant=f.accountant,
    )


def load_fed_config(path: str | None, overrides: dict | None = None) -> FedConfig:
    if path is None:
        return parse_fed_config({}, "defaults", overrides)
    return parse_fed_config(read_yaml(path, FedConfigError, "config file"), path, overrides)
