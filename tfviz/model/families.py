"""Model families: the one registry of the kinds of network tfviz builds, so that nothing else asks
``isinstance``. A family is a config class (frozen, validated, versioned: its ``to_dict`` names the
family) and the module it builds; what a model has or lacks is asked of its config
(``config.lacks(view)``, ``config.summary()``, ``config.max_positions``).

    family_of(config_or_model)        -> Family   (ValueError for anything that is not a tfviz model)
    config_from_dict(d)               -> ModelConfig | RecurrentConfig, by d["family"]
                                         (absent: "transformer", as in every older checkpoint)
    build_model(config)               -> Transformer | RecurrentModel
    tensor_shapes(config, parameters_only=False)
                                      -> state_dict (or parameter) name -> (dtype, shape), no model
                                         built (a transformer: ``transformer.tensor_shapes``, at most
                                         two layers on the meta device; others: a meta shell)
    parameter_count(config)           -> parameters of a model of config (tied weights once)
    min_parameters(config)            -> a cheap lower bound on them (no shell at all): what a
                                         checkpoint's tensor data must at least hold
    lacks(model_or_config, view)      -> why a view does not apply (a sentence), or None
    KINDS                             what a form offers: "transformer", "rnn", "lstm", "gru"
    config_for_kind(kind, **fields)   the config of a kind; fields of the other family are refused

Views (``VIEWS``) a page may need: "self_attention" (heads, attention maps, masks, head scores),
"cross_attention" (decoder over the source), "positions" (positional encodings), "kv_cache"
(the transformer's cache of keys and values), "hidden_state" (a recurrent state per position).

To add a family: its config (a ``VersionedConfig`` with ``FAMILY``, ``summary``, ``lacks``,
``max_positions``, ``tie_embeddings``, ``n_heads``, ``causal``, ``pad_id``) and its module
(``hook_points``, ``prepare``, ``forward``, ``new_cache``, ``generate``, ``embed``, ``unembed``),
then one line in ``FAMILIES`` (and the kinds it offers in ``KINDS``).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .config import ModelConfig
from .recurrent import CELL_NAMES, RecurrentConfig, RecurrentModel
from .transformer import Transformer
from .transformer import tensor_shapes as transformer_shapes

VIEWS = ("self_attention", "cross_attention", "positions", "kv_cache", "hidden_state")


@dataclass(frozen=True)
class Family:
    name: str
    label: str
    config: type   # the config class
    model: type    # the nn.Module it builds
    shapes: Callable | None = None  # its own tensor_shapes(config, parameters_only), if cheaper than a shell

    @property
    def fields(self) -> tuple[str, ...]:
        """The config's field names (what a form or a CLI may set)."""
        return tuple(f.name for f in dataclasses.fields(self.config))

    def build(self, config) -> nn.Module:
        return self.model(config)

    def tensor_shapes(self, config, parameters_only: bool = False) -> dict[str, tuple[torch.dtype, tuple]]:
        """Every ``state_dict`` name (or, with ``parameters_only``, every parameter's; a tied weight
        once) -> (dtype, shape) of a model of ``config``, without memory or initialisation: the
        family's own ``tensor_shapes`` where its module has one (the transformer's builds at most
        two layers), else a shell on the meta device."""
        if self.shapes is not None:
            return self.shapes(config, parameters_only=parameters_only)
        with torch.device("meta"):
            shell = self.model(config)
        named = shell.named_parameters() if parameters_only else shell.state_dict().items()
        return {k: (v.dtype, tuple(v.shape)) for k, v in named}


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("transformer", "Transformer", ModelConfig, Transformer, transformer_shapes),
    Family("recurrent", "Recurrent network (RNN / LSTM / GRU)", RecurrentConfig, RecurrentModel),
)}
_BY_CONFIG = {f.config: f for f in FAMILIES.values()}

# What the Train page and the CLI offer: kind -> (family, fixed config fields).
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "transformer": ("transformer", {}),
    **{cell: ("recurrent", {"cell": cell}) for cell in CELL_NAMES},
}
KIND_LABELS = {"transformer": "Transformer", **CELL_NAMES}


def family_of(x) -> Family:
    """The family of a config or a model; ValueError for anything else."""
    config = getattr(x, "config", x)
    family = _BY_CONFIG.get(type(config))
    if family is None or (x is not config and not isinstance(x, family.model)):
        raise ValueError(f"not a tfviz model or model config: {type(x).__name__} "
                         f"(families: {', '.join(FAMILIES)})")
    return family


def config_from_dict(data: dict[str, Any]):
    """A model config from its ``to_dict()``: the family named in it (a transformer when absent)."""
    if not isinstance(data, dict):
        raise ValueError(f"a model config must be a JSON object, not {type(data).__name__}")
    name = data.get("family", "transformer")
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[name].config.from_dict(data)


def build_model(config) -> nn.Module:
    return family_of(config).build(config)


def tensor_shapes(config, parameters_only: bool = False) -> dict[str, tuple[torch.dtype, tuple]]:
    return family_of(config).tensor_shapes(config, parameters_only)


def parameter_count(config) -> int:
    """How many parameters a model of ``config`` has (tied weights counted once), without building it."""
    return sum(math.prod(shape) for _, shape in tensor_shapes(config, parameters_only=True).values())


def min_parameters(config) -> int:
    """A lower bound on ``parameter_count(config)`` from a few fields (``config.min_parameters()``):
    cheap enough to check a stranger's checkpoint before any shell is built."""
    family_of(config)
    return config.min_parameters()


def lacks(x, view: str) -> str | None:
    """Why ``view`` does not apply to a model (or config), as a sentence; None when it does."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
    return family_of(x).config.lacks(getattr(x, "config", x), view)


def kind_of(config) -> str:
    """The KINDS entry of a config: "transformer", or a recurrent model's cell."""
    return config.cell if isinstance(config, RecurrentConfig) else family_of(config).name


def config_for_kind(kind: str, **fields: Any):
    """The config of ``kind`` (``KINDS``) from ``fields``. A field the family does not have (a
    transformer's ``n_heads`` for an LSTM) is a ValueError naming it; ``family_fields`` filters a
    form's values first."""
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; kinds: {', '.join(KINDS)}")
    name, fixed = KINDS[kind]
    family = FAMILIES[name]
    unknown = sorted(set(fields) - set(family.fields))
    if unknown:
        raise ValueError(f"a {KIND_LABELS[kind]} has no {', '.join(unknown)} "
                         f"(its fields: {', '.join(family.fields)})")
    return family.config(**{**fields, **fixed})


def family_fields(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``fields`` that ``kind``'s config has (a form shows fields of every kind)."""
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; kinds: {', '.join(KINDS)}")
    names = set(FAMILIES[KINDS[kind][0]].fields)
    return {k: v for k, v in fields.items() if k in names}
