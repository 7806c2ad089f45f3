"""The network: its config, positional schemes, norms, activations, attention, blocks and the
Transformer, with hook points named in one place (``hooks.hook_name``)."""
from .cache import KVCache
from .config import ModelConfig
from .hooks import HOOK_SHAPES, HookPoint, hook_name, layer_template, parse_hook_name, shape_of, stack_layers
from .transformer import Stack, Transformer, parameter_count, tensor_shapes

__all__ = ["HOOK_SHAPES", "HookPoint", "KVCache", "ModelConfig", "Stack", "Transformer", "parameter_count", "tensor_shapes", "hook_name",
           "layer_template", "parse_hook_name", "shape_of", "stack_layers"]
