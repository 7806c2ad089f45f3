"""Generation, one token at a time: the one validation, the one sampler and the one loop behind
every model family's ``generate`` (``ModelAPI``, below) and ``tfviz.generation.generate_with_attention``.

    for step in decode(model, prompt, 20, temperature=0.8, top_k=5): ...   # step.next_ids [batch]

Each step feeds the model (with a KV cache: the whole prompt first, then only the newest token),
takes the last position's logits and picks the next token: temperature 0 = greedy (argmax);
otherwise sample from softmax(logits / temperature), restricted to the ``top_k`` most likely tokens.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .cache import KVCache
from .hooks import HookPoint
from .inputs import check_tokens


def check_generation(config, n_prompt: int, n_new: int, temperature: float, top_k: int | None,
                     has_src: bool) -> None:
    """ValueError with a readable reason when a model with ``config`` cannot extend ``n_prompt``
    tokens by ``n_new`` with these settings."""
    if config.arch == "encoder":
        raise ValueError("an encoder cannot generate: it reads the whole input at once in "
                         "both directions (no causal mask) and was trained to fill in masked tokens, "
                         "not to predict the next one. Pick a decoder or encoder-decoder model.")
    if has_src != (config.arch == "encoder-decoder"):
        raise ValueError("an encoder-decoder model needs a source text (src=)" if not has_src
                         else "only an encoder-decoder model takes a source text (src=)")
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 0:
        raise ValueError(f"max_new_tokens={n_new!r} (the number of new tokens) must be a whole "
                         "number >= 0")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 = always the most likely token)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be a whole number >= 1 (or None = no limit)")
    limit = config.max_positions
    if limit is not None and n_prompt + n_new > limit:
        raise ValueError(f"prompt ({n_prompt} tokens) + {n_new} new tokens = {n_prompt + n_new} "
                         f"positions, but {config.scheme.length_limit(config)}: ask for at most "
                         f"{max(limit - n_prompt, 0)} new tokens or shorten the prompt")


def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """logits [batch, vocab] -> next token ids [batch]: argmax when ``temperature`` is 0, else a
    sample from softmax(logits / temperature) over the ``top_k`` most likely tokens (all if None)."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


@dataclass
class Step:
    logits: torch.Tensor    # [batch, vocab] float32: the last position's logits that chose next_ids
    next_ids: torch.Tensor  # [batch] the chosen tokens (eos_id for rows already finished)
    ids: torch.Tensor       # [batch, pos] prompt + every token chosen so far
    cache: KVCache | None   # the cache after this step (None without use_cache)
    done: bool              # every row has produced eos_id: no further step follows


def check_left_padding(config, prompt: torch.Tensor, padding_mask: torch.Tensor | None) -> None:
    """ValueError unless ``padding_mask`` (True = padding, shaped like ``prompt``) pads the prompts
    on the left only, for a decoder-only transformer: each row's new tokens follow its last token."""
    if padding_mask is None:
        return
    if config.arch != "decoder" or getattr(config, "FAMILY", None) != "transformer":
        raise ValueError("padding_mask (a left-padded batch of prompts) is for decoder-only "
                         "transformers; pass each prompt alone")
    if not isinstance(padding_mask, torch.Tensor) or padding_mask.dtype != torch.bool \
            or padding_mask.shape != prompt.shape:
        raise ValueError("padding_mask must be a bool tensor shaped like the prompt (True = padding)")
    if bool((padding_mask[:, 1:] & ~padding_mask[:, :-1]).any()):
        raise ValueError("padding_mask: pad the prompts on the left (the pads first, then the prompt), "
                         "so that every row's new tokens follow its own last token")


def _left_pads_by_id(config, prompt: torch.Tensor) -> torch.Tensor | None:
    """A decoder-only transformer with a ``pad_id`` (tfviz's own models): prompts that open with
    that id are left-padded, [batch, pos] True = padding; None otherwise (no pads, or the id
    somewhere inside a prompt, which the model's own forward masks as before)."""
    pad = getattr(config, "pad_id", None)
    if pad is None or config.arch != "decoder" or getattr(config, "FAMILY", None) != "transformer":
        return None
    pads = prompt == pad
    if not bool(pads.any()) or bool((pads[:, 1:] & ~pads[:, :-1]).any()):
        return None
    return pads


def decode(model, prompt: torch.Tensor, max_new_tokens: int, *, src: torch.Tensor | None = None,
           temperature: float = 0.0, top_k: int | None = None, use_cache: bool = True,
           eos_id: int | None = None, generator: torch.Generator | None = None,
           forward: Callable[..., torch.Tensor] | None = None,
           padding_mask: torch.Tensor | None = None) -> Iterator[Step]:
    """Yield one :class:`Step` per new token (see the module docstring), after
    ``check_generation``. ``forward(*inputs, cache=cache) -> logits`` replaces ``model(...)``
    (e.g. a recording forward); logits are moved to the prompt's device before sampling. The
    caller chooses eval mode and gradients. ``padding_mask`` [batch, pos] (True = padding): a
    left-padded batch of prompts, each row computed as if alone (its pads never attended to, its
    positions counted from its first real token); without the cache, each step recomputes the
    whole sequence into a fresh cache, so both ways give the same tokens. A model with a
    ``pad_id`` whose prompts open with it is left-padded the same way without a mask."""
    check_generation(model.config, prompt.shape[1], max_new_tokens, temperature, top_k,
                     src is not None)
    padding_mask = padding_mask if padding_mask is not None else _left_pads_by_id(model.config, prompt)
    check_left_padding(model.config, prompt, padding_mask)
    forward = forward or model
    inputs = (src,) if src is not None else ()
    cache = model.new_cache() if use_cache else None
    out, step_in = prompt, prompt
    done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    for step in range(max_new_tokens):
        kw = {}
        if padding_mask is not None and (step == 0 or not use_cache):
            kw["padding_mask"] = torch.cat([padding_mask, padding_mask.new_zeros(
                prompt.shape[0], out.shape[1] - prompt.shape[1])], dim=1).to(prompt.device)
            if not use_cache:
                cache = model.new_cache()  # recompute everything: the same numbers as no cache
        logits = forward(*inputs, step_in if use_cache else out, cache=cache, **kw)[:, -1].float()
        logits = logits.to(prompt.device)
        nxt = sample_next(logits, temperature, top_k, generator)
        if eos_id is not None:
            nxt = torch.where(done, torch.full_like(nxt, eos_id), nxt)
            done |= nxt == eos_id
        out = torch.cat([out, nxt[:, None]], dim=1)
        step_in = nxt[:, None]
        finished = eos_id is not None and bool(done.all())
        yield Step(logits, nxt, out, cache if use_cache else None, finished)
        if finished:
            return


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, **kw) -> torch.Tensor:
    """``model.generate``: every ``decode`` step in eval mode without gradients (the model's mode
    restored) -> prompt + new tokens [batch, pos + new]. The model has checked ``prompt``."""
    was_training = model.training
    model.eval()
    try:
        out = prompt
        for step in decode(model, prompt, max_new_tokens, **kw):
            out = step.ids
        return out
    finally:
        model.train(was_training)


class ModelAPI:
    """What every model family (``Transformer``, ``RecurrentModel``) offers the same way: its
    recordable hook points and ``generate`` through the one decoding loop. A family sets
    ``self.config`` and ``self._hooks`` (``tfviz.model.hooks.name_hook_points``)."""

    def _take_config(self, config, cls: type, what: str):
        """``config`` kept as ``self.config`` (and returned) when it is a ``cls``, else a
        ValueError naming the ``what`` this family needs."""
        if not isinstance(config, cls):
            raise ValueError(f"{type(self).__name__} needs a {what}, not {type(config).__name__}")
        self.config = config
        return config

    def hook_points(self) -> dict[str, HookPoint]:
        """Every recordable name -> its HookPoint (see ``tfviz.model.hooks.HOOK_SHAPES``)."""
        return dict(self._hooks)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, *, src: torch.Tensor | None = None,
                 temperature: float = 0.0, top_k: int | None = None, use_cache: bool = True,
                 eos_id: int | None = None, generator: torch.Generator | None = None,
                 padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Extend ``prompt`` [batch, pos] by up to ``max_new_tokens`` tokens -> [batch, pos + new].

        temperature 0 = greedy; otherwise sample from softmax(logits / temperature), restricted to
        the ``top_k`` most likely tokens when given. Encoder-decoder: pass ``src``; ``prompt`` is
        the decoder's start (e.g. [[BOS]]). With ``use_cache`` each step feeds only the newest
        token (a recurrent model's cache is its hidden state). Rows that produced ``eos_id``
        continue with eos_id; all done = stop.

        A batch of prompts of different lengths (decoder-only transformers): pad them on the left
        and pass ``padding_mask`` [batch, pos] (True = padding; transformers' attention_mask is
        its negation). Each row then gives what it gives alone: pads are never attended to and
        its positions count from its own first token (learned, sinusoidal and RoPE alike)."""
        check_tokens(self.config, prompt, "prompt")
        return generate(self, prompt, max_new_tokens, src=src, temperature=temperature, top_k=top_k,
                        use_cache=use_cache, eos_id=eos_id, generator=generator,
                        padding_mask=padding_mask)
