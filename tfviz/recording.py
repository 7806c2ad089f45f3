"""Record named activations of one forward pass.

    rec = tfviz.record(model, tokens, names=["blocks.0.attn.hook_pattern"])
    rec["blocks.0.attn.hook_pattern"]   # [batch, head, q_pos, k_pos], detached, on the CPU
    rec.output                          # the logits of that same forward

Only what ``names`` asks for is kept (a list of names, a predicate on the name, or None for all).
Asking for scores or a pattern switches those layers to the explicit attention path. The points'
sinks are removed in ``finally``, also when the forward raises. The opt-in points
(``model.hooks.OPT_IN``: ``attn.hook_result``, ``hook_q_input`` / ``hook_k_input`` /
``hook_v_input``, TransformerLens's use_attn_result / use_split_qkv_input) are recorded only when
named in a list, or with ``opt_in=True``: they cost a d_model vector per head and position.

With gradients (attribution patching, saliency):

    rec = tfviz.record(model, tokens, names=[...], grad=True)   # no no_grad: the graph is kept
    grads = rec.grad(metric(rec.output))                         # name -> d metric / d activation
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import torch

from .model import Transformer
from .model.families import family_of, lacks
from .model.hooks import layer_template, opt_in, shape_of, stack_layers

Names = Iterable[str] | Callable[[str], bool] | None


class Recording(Mapping):
    """name -> tensor, in the order the forward produced them; ``output`` = the model's output."""

    def __init__(self, tensors: dict[str, torch.Tensor], output: torch.Tensor):
        self._tensors = tensors
        self.output = output

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._tensors), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"{name!r} was not recorded{hint}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def stack_layers(self, template: str) -> torch.Tensor:
        """Stack a per-layer name over layers: stack_layers('blocks.{l}.attn.hook_pattern')
        -> [layer, batch, head, q_pos, k_pos]."""
        try:
            return stack_layers(self._tensors, template)
        except KeyError:
            raise KeyError(f"nothing recorded matches {template!r}") from None

    @staticmethod
    def shape_of(name: str) -> str:
        return shape_of(name)

    def grad(self, value: torch.Tensor, names: Iterable[str] | None = None, *,
             retain_graph: bool = False) -> dict[str, torch.Tensor]:
        """d ``value`` / d each recorded activation (a recording made with ``grad=True``; ``value``
        a scalar computed from ``self.output`` or the activations) -> name -> gradient, the
        activation's shape (zeros where ``value`` does not depend on it). One backward pass
        (``torch.autograd.grad``) for every name; ``retain_graph`` to take another."""
        names = list(self._tensors) if names is None else list(names)
        tensors = [self[n] for n in names]
        if not all(t.requires_grad for t in tensors):
            raise ValueError("these activations carry no graph: record them with grad=True")
        if value.dim() != 0:
            raise ValueError(f"grad takes one number (a scalar), not a tensor of shape {tuple(value.shape)}: "
                             "reduce it first, e.g. .sum() or .mean()")
        grads = torch.autograd.grad(value, tensors, retain_graph=retain_graph, allow_unused=True)
        return {n: torch.zeros_like(t) if g is None else g for n, t, g in zip(names, tensors, grads)}

    def to_bertviz(self, tokens: Sequence[str] | None = None, *,
                   decoder_tokens: Sequence[str] | None = None) -> dict:
        """The attention patterns as bertviz's ``head_view`` / ``model_view`` take them, as keyword
        arguments: ``head_view(**rec.to_bertviz(tokens))``.

        single stack      {"attention": (layer 0 [1, head, q_pos, k_pos], layer 1, ...), "tokens": tokens}
        encoder-decoder   {"encoder_attention", "decoder_attention", "cross_attention": such tuples,
                           "encoder_tokens": tokens, "decoder_tokens": decoder_tokens}
        A batch of one only (bertviz draws one sentence); every layer's ``attn.hook_pattern`` (and
        ``cross_attn.hook_pattern``) must have been recorded. ``tokens`` default to positions."""
        def layers(template: str, what: str) -> tuple:
            try:
                stacked = self.stack_layers(template)  # [layer, batch, head, q_pos, k_pos]
            except KeyError:
                raise ValueError(f"to_bertviz needs every layer's {what} pattern; record them, e.g. "
                                 "record(model, x, names=lambda n: n.endswith('hook_pattern'))") from None
            if stacked.shape[1] != 1:
                raise ValueError(f"bertviz shows one sequence: record a batch of 1, not {stacked.shape[1]}")
            return tuple(layer.float() for layer in stacked)  # each [1, head, q_pos, k_pos]

        def labels(given, n: int, what: str) -> list[str]:
            out = [str(i) for i in range(n)] if given is None else [str(t) for t in given]
            if len(out) != n:
                raise ValueError(f"{len(out)} {what} for {n} positions")
            return out

        if any(name.startswith("encoder.") for name in self._tensors):
            enc = layers(layer_template("attn.hook_pattern", "encoder"), "encoder self-attention")
            dec = layers(layer_template("attn.hook_pattern", "decoder"), "decoder self-attention")
            cross = layers(layer_template("cross_attn.hook_pattern", "decoder"), "cross-attention")
            return {"encoder_attention": enc, "decoder_attention": dec, "cross_attention": cross,
                    "encoder_tokens": labels(tokens, enc[0].shape[-1], "encoder tokens"),
                    "decoder_tokens": labels(decoder_tokens, dec[0].shape[-1], "decoder tokens")}
        if decoder_tokens is not None:
            raise ValueError("decoder_tokens are for encoder-decoder recordings")
        attn = layers(layer_template("attn.hook_pattern"), "self-attention")
        return {"attention": attn, "tokens": labels(tokens, attn[0].shape[-1], "tokens")}


def _select(points: dict, names: Names, with_opt_in: bool = False) -> list[str]:
    if names is None:
        return [n for n in points if with_opt_in or not opt_in(n)]
    if callable(names):
        return [n for n in points if (with_opt_in or not opt_in(n)) and names(n)]
    if isinstance(names, str):
        names = [names]
    names = list(names)
    unknown = [n for n in names if n not in points]
    if unknown:
        hints = []
        for n in unknown:
            close = difflib.get_close_matches(n, list(points), n=2)
            hints.append(f"{n!r}" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        raise ValueError(f"this model records no {', '.join(hints)}")
    return names


def record(model, *inputs: torch.Tensor, names: Names = None, device: str | None = "cpu",
           grad: bool = False, opt_in: bool = False, **forward_kwargs) -> Recording:
    """Run ``model(*inputs, **forward_kwargs)`` once in eval mode without gradients and return the
    requested activations, detached.

    ``device``: where the tensors end up, "cpu" by default. On a GPU they stay on the device
    during the forward (no per-point host copy or sync) and go to the host afterwards as
    asynchronous copies into pinned memory with one sync at the end; ``device=None`` keeps them
    where the model computed them.

    ``grad=True``: the forward runs with gradients and the activations (and ``output``) stay in
    the graph, where the model computed them (``device`` must be None or that device): take
    gradients with ``Recording.grad`` or ``torch.autograd.grad``. Nothing else changes: the same
    path, the same numbers as without. ``opt_in``: None or a predicate also selects the opt-in
    points (``OPT_IN``)."""
    family_of(model)  # a Transformer or a recurrent model (ValueError for anything else)
    points = model.hook_points()
    selected = _select(points, names, opt_in)
    if grad:
        here = next(model.parameters()).device
        if device is not None and torch.device(device) != here:
            raise ValueError(f"grad=True keeps the activations in the graph, on {here}: pass device=None")
    store: dict[str, torch.Tensor] = {}
    was_training = model.training
    try:
        for name in selected:  # a plain attribute: skip nn.Module.__setattr__'s bookkeeping
            points[name].__dict__["sink"] = store
            if grad:
                points[name].__dict__["keep_graph"] = True
        if was_training:  # (eval() and train() walk every module: only when needed)
            model.eval()
        with torch.enable_grad() if grad else torch.no_grad():
            output = model(*inputs, **forward_kwargs)
    finally:
        for name in selected:
            points[name].__dict__["sink"] = None
            if grad:
                points[name].__dict__["keep_graph"] = False
        if was_training:
            model.train()
    if grad:
        return Recording(store, output)
    output = output.detach()
    if device is not None:
        store, output = _to(store, device), _to({"": output}, device)[""]
    return Recording(store, output)


def _to(tensors: dict[str, torch.Tensor], device) -> dict[str, torch.Tensor]:
    """Every tensor to ``device``; from a GPU to the host as non-blocking copies (pinned memory)
    followed by one synchronisation."""
    device = torch.device(device)
    on_gpu = any(t.is_cuda for t in tensors.values())
    out = {k: t.to(device, non_blocking=on_gpu and device.type == "cpu") for k, t in tensors.items()}
    if on_gpu and device.type == "cpu":
        torch.cuda.synchronize()
    return out


def positional_tables(model: Transformer, n: int | None = None) -> dict[str, torch.Tensor]:
    """Input-independent tables of the model's positional scheme, for ``n`` positions
    (default max_len): sinusoidal [pos, d_model], learned [max_len, d_model], rope_freqs [d_head/2],
    rope_angles [pos, d_head/2], alibi_slopes [head], alibi_bias / t5_bias [head, q_pos, k_pos],
    t5_buckets [q_pos, k_pos]. Encoder-decoder names are prefixed "encoder." / "decoder.". A model
without positional encodings (a recurrent one) has none: {}."""
    if lacks(model, "positions"):  # a recurrent model: order is the order of its steps
        return {}
    n = model.config.max_len if n is None else n
    out = {}
    with torch.no_grad():
        for prefix, stack in model.stacks.items():
            for name, t in stack.pos.tables(n).items():
                out[f"{prefix}.{name}" if prefix else name] = t.detach().to("cpu")
    return out
