"""The model sections of a party's config: a built-in model by `name` or the party's own torch module by `import`.

`model.bottom` and the leader's `model.top` each choose one (not both); a built-in's `options` are checked against its
options model (vfl/config/model_options.py), a user's module gets them as they are. vfl/models/registry.py builds the
choice; docs/models.md states the contracts. vfl/config/schema.py holds the other sections and the loading.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from privacy.field_types import DOMAIN_ERROR, Choice, IntList, Number
from vfl.config.model_options import (
    BOTTOM_OPTIONS,
    IMPORT_PATTERN,
    IMPORT_RX,
    NUMERIC_SCALINGS,
    TOP_OPTIONS,
    options_problems,
    options_schema,
)


def _import_path(value: Any) -> Any:
    if value is not None and (not isinstance(value, str) or not IMPORT_RX.match(value)):
        raise PydanticCustomError(
            DOMAIN_ERROR, "{message}", {"message": f"import must look like package.module:Class, got {value!r}"}
        )
    return value


def _model_options(value: Any, info, where: str, choices: dict) -> Any:
    """`options` of the built-in model `name` checked against its options model (vfl/config/model_options.py); a
    user's module (`import`) gets the mapping as it is."""
    if not isinstance(value, dict):
        raise PydanticCustomError(
            DOMAIN_ERROR, "{message}", {"message": f"options must be a mapping of option: value, got {value!r}"}
        )
    if info.data.get("import_") is not None or info.data.get("name") not in choices:
        return value
    errors = options_problems(choices[info.data["name"]], value, where)
    if errors:
        first = errors[0].removeprefix(f"{where}.")
        raise PydanticCustomError(DOMAIN_ERROR, "{message}", {"message": "; ".join([first, *errors[1:]])})
    return choices[info.data["name"]].model_validate(value).model_dump(mode="json")


class _ModelChoice(BaseModel):
    """A built-in model by `name`, or the party's own torch module by `import: "pkg.mod:Class"` (not both); its
    `options` are checked against the built-in's options model (vfl/config/model_options.py), or passed as they are to
    the user's class. vfl/models/registry.py builds it; docs/models.md states the contracts."""

    KIND: ClassVar[str]  # a subclass's key under model: (bottom, top)
    CHOICES: ClassVar[dict]  # its built-in models' options models by name (vfl/config/model_options.py)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    import_: Optional[str] = Field(None, alias="import", json_schema_extra={"pattern": IMPORT_PATTERN})

    _import = field_validator("import_", mode="before")(classmethod(lambda cls, v: _import_path(v)))
    _checked = field_validator("options", mode="before", check_fields=False)(
        classmethod(lambda cls, v, info: _model_options(v, info, f"model.{cls.KIND}", cls.CHOICES))
    )

    @model_validator(mode="after")
    def _one_choice(self) -> _ModelChoice:
        if self.import_ is not None and "name" in self.model_fields_set:
            both = f"{self.KIND}: name {self.name!r} and import {self.import_!r} both given; give one of them"
            raise PydanticCustomError(DOMAIN_ERROR, "{message}", {"message": both})
        return self

    @property
    def spec(self) -> dict:
        """What identifies the model in a checkpoint: its name or import path, its options and sizes."""
        out = self.model_dump(mode="json", by_alias=True)
        out.pop("name" if self.import_ is not None else "import")
        return out


class BottomConfig(_ModelChoice):
    KIND, CHOICES = "bottom", BOTTOM_OPTIONS
    model_config = ConfigDict(json_schema_extra={"allOf": options_schema(BOTTOM_OPTIONS)})
    name: Choice(*BOTTOM_OPTIONS) = "wide_deep"
    options: dict[str, Any] = Field(default_factory=dict)  # the model's own options (docs/models.md)
    embedding_dim: Number(1, 4096, integer=True) = 80
    hidden: IntList(1) = (1024, 512, 256, 128)
    cut_dim: Number(2, 4096, integer=True) = 2  # wide_deep, deepfm: 1 wide/FM value + (cut_dim - 1) deep values
    dropout: Number(0.0, 1.0, hi_open=True) = 0.0
    # standard: numeric inputs x -> (x - mean) / std, from this party's own training split (docs/models.md)
    numeric_scaling: Choice(*NUMERIC_SCALINGS) = "none"

    @property
    def spec(self) -> dict:
        """The model's identity in a checkpoint; numeric_scaling only when on, so older checkpoints still match."""
        out = super().spec
        if out.get("numeric_scaling") == "none":
            del out["numeric_scaling"]
        return out


class TopConfig(_ModelChoice):
    KIND, CHOICES = "top", TOP_OPTIONS
    model_config = ConfigDict(json_schema_extra={"allOf": options_schema(TOP_OPTIONS)})
    name: Choice(*TOP_OPTIONS) = "linear"  # interaction: cross terms between the parties' cuts (cut_dim > 2)
    options: dict[str, Any] = Field(default_factory=dict)  # the model's own options (docs/models.md)
    hidden: IntList(1) = ()


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    bottom: BottomConfig = Field(default_factory=BottomConfig)
    top: Optional[TopConfig] = None  # leader only (a leader without it gets the defaults)
