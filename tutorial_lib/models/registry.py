"""Named models: ``build_model("sasrec", n_items=..., max_len=..., **options)``."""
from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from ..errors import ConfigError, UnknownNameError, did_you_mean


@dataclass(frozen=True)
class ModelEntry:
    name: str
    builder: Callable[..., nn.Module]
    description: str
    family: str
    #: the registered model this one is a preset of (``rksa-c`` is ``rksa`` with ``kernels="c"``), or None
    variant_of: str | None = None

    def options(self) -> dict[str, object]:
        """Keyword options of the builder with their defaults (besides n_items and max_len)."""
        sig = inspect.signature(self.builder)
        return {k: p.default for k, p in sig.parameters.items() if k not in ("n_items", "max_len")}

    def parameter_kinds(self) -> dict[str, str]:
        """Each builder parameter's annotated type (n_items and max_len included): ``"int"``, ``"float"``,
        ``"bool"`` or ``"str"``, with ``" | None"`` where None is allowed (``"int | None"``)."""
        return {k: str(p.annotation) for k, p in inspect.signature(self.builder).parameters.items()}

    def preset_of(self) -> tuple[str, dict[str, object]]:
        """The base model and the options that turn it into this one: ``("rksa", {"kernels": "c"})`` for
        ``rksa-c``; ``(name, {})`` for a model that is not a preset of another."""
        if self.variant_of is None:
            return self.name, {}
        base = get_model_entry(self.variant_of).options()
        return self.variant_of, {k: v for k, v in self.options().items() if base.get(k) != v}


MODELS: dict[str, ModelEntry] = {}


def register_model(name: str, description: str, family: str, variant_of: str | None = None) -> Callable:
    """Decorator: register ``builder(n_items, max_len, **options) -> nn.Module`` under ``name``; ``variant_of``
    names the model it presets options of (the result tables then label it as that model's variant)."""

    def wrap(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        MODELS[name] = ModelEntry(name, builder, description, family, variant_of)
        return builder

    return wrap


def get_model_entry(name: str) -> ModelEntry:
    """The registered :class:`ModelEntry` of ``name`` (case-insensitive); :class:`UnknownNameError` if none."""
    key = name.lower()
    if key not in MODELS:
        raise UnknownNameError("model", name, MODELS)
    return MODELS[key]


def _check_option_value(model: str, key: str, value: object, kind: str, default: object) -> None:
    """Raise :class:`ConfigError` when ``value`` does not fit the option's annotated type, before the builder turns a
    wrong value into a deep torch error (``d_model=64.5``: ``empty(): ... got float``) or a failure at the first
    forward pass (``attn_dropout=2``)."""
    if value is None and kind.endswith("| None"):
        return
    base = kind.split("|")[0].strip()
    where = f"option {key!r} of model {model!r}"
    fix = f" (default {default!r})" if default is not None else ""
    if base == "bool" and not isinstance(value, bool):    # 'maybe' or 0 would pass as truthy/falsy
        raise ConfigError(f"{where} is true or false{fix}, got {value!r}: write {key}=true or {key}=false")
    if base == "int" and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
        whole = isinstance(value, float) and value.is_integer()
        raise ConfigError(f"{where} expects a number, a whole one{fix}, got {value!r}"
                          + (f": write {key}={int(value)}" if whole else ""))
    if base == "float":
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ConfigError(f"{where} expects a number, a finite one{fix}, got {value!r}")
        if key.endswith("dropout") and not 0.0 <= value < 1.0:
            raise ConfigError(f"{where} is a dropout probability: it must be in [0, 1), got {value!r}")


def model_names() -> list[str]:
    """Registered model names, sorted."""
    return sorted(MODELS)


def build_model(name: str, n_items: int, max_len: int, n_users: int | None = None, **options: object) -> nn.Module:
    """Build a registered model; unknown options raise a :class:`ConfigError` listing the valid ones.

    ``n_users`` is passed on to the models that have a user embedding (RKSA) and ignored by the others,
    so a runner can always give it.
    """
    entry = get_model_entry(name)
    valid = entry.options()
    unknown = sorted(set(options) - set(valid))
    if unknown:
        named = ", ".join(f"{k!r}{did_you_mean(k, valid)}" for k in unknown)
        raise ConfigError(f"model {entry.name!r} has no option(s): {named}; valid options: {sorted(valid)}")
    kinds = entry.parameter_kinds()
    for key, value in {"n_items": n_items, "max_len": max_len, **options}.items():
        _check_option_value(entry.name, key, value, kinds[key], valid.get(key))
    recipe = {"model": entry.name, "n_items": n_items, "max_len": max_len,
              "options": dict(sorted({**valid, **options}.items()))}     # every option, defaults included
    if "n_users" in valid and n_users is not None:
        options["n_users"] = n_users
    model = entry.builder(n_items=n_items, max_len=max_len, **options)
    model.recipe = recipe   # what built it: a checkpoint records it, so a resume with other options is refused
    return model
