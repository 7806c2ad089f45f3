"""The networks: the Transformer (its config, positional schemes, norms, activations, attention,
blocks) and the recurrent baselines (RNN / LSTM / GRU, ``recurrent``), one registry of model
families (``families``), hook points named in one place (``hooks.hook_name``)."""
from .cache import KVCache
from .config import ModelConfig
from .hooks import HOOK_SHAPES, HookPoint, hook_name, layer_template, parse_hook_name, shape_of, stack_layers
from .families import (FAMILIES, KINDS, VIEWS, build_model, config_from_dict, family_of, lacks,
                       parameter_count, tensor_shapes)
from .recurrent import RecurrentConfig, RecurrentModel
from .transformer import Stack, Transformer

__all__ = ["FAMILIES", "HOOK_SHAPES", "HookPoint", "KINDS", "KVCache", "ModelConfig", "RecurrentConfig",
           "RecurrentModel", "Stack", "Transformer", "VIEWS", "build_model", "config_from_dict",
           "family_of", "hook_name", "lacks", "layer_template", "parameter_count",
           "shape_of", "stack_layers", "tensor_shapes", "parse_hook_name"]
