"""Encoder-only, decoder-only and encoder-decoder transformers built from one ``Stack``.

    decoder          model(tokens)      -> logits [batch, pos, vocab]   causal LM
    encoder          model(tokens)      -> logits [batch, pos, vocab]   masked-LM head, bidirectional
    encoder-decoder  model(src, tgt)    -> logits [batch, tgt_pos, vocab]  (Vaswani et al. 2017)

Recorded names are public: a single-stack model's hook points are ``blocks.{l}.…`` and
``hook_embed``; an encoder-decoder's are prefixed ``encoder.`` / ``decoder.``.
"""
from __future__ import annotations

import math
import re

import torch
from torch import nn

from .attention import IMPLS, AttnContext
from .blocks import Block
from .cache import KVCache
from .config import ModelConfig
from .decoding import ModelAPI
from .heads import HEADS
from .hooks import HookPoint, name_hook_points
from .inputs import check_arity, check_tokens, find_padding
from .masks import MaskSpec
from .norms import make_norm
from .positional import make_positional


class Stack(nn.Module):
    """Embeddings + positions + N blocks + final norm. Token embeddings (and token-type embeddings)
    are owned by the model (shared by encoder and decoder) and passed in.

        x = E[tok] (* sqrt(d_model) for sinusoidal) (+ T[type]) (+ P[pos]) -> (norm, BERT) -> blocks
    """

    def __init__(self, cfg: ModelConfig, causal: bool, cross: bool = False):
        super().__init__()
        self.cfg, self.causal = cfg, causal
        self.pos = make_positional(cfg, causal)
        self.embed_scale = cfg.scheme.embed_scale(cfg)  # sinusoidal: sqrt(d_model) (Vaswani §3.4)
        self.hook_embed = HookPoint()
        if cfg.n_token_types:
            self.hook_token_type_embed = HookPoint()
        for hook in cfg.scheme.stack_hooks():  # hook_pos_embed for schemes that add vectors
            self.add_module(hook, HookPoint())
        self.ln_embed = make_norm(cfg) if cfg.embed_norm else None  # BERT: a norm on the embeddings
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, cross) for _ in range(cfg.n_layers))
        # Post-norm blocks already end in a norm.
        self.ln_final = make_norm(cfg) if cfg.norm == "pre" else nn.Identity()

    def forward(self, tok_emb: torch.Tensor, key_is_pad: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, memory_is_pad: torch.Tensor | None = None,
                cache: KVCache | None = None, type_emb: torch.Tensor | None = None) -> torch.Tensor:
        """tok_emb (and type_emb) [batch, pos, d_model] -> hidden [batch, pos, d_model]"""
        B, T, _ = tok_emb.shape
        offset = cache.length if cache is not None else 0
        positions = torch.arange(offset, offset + T, device=tok_emb.device)
        row_positions = positions  # [pos], or [batch, pos] when a left-padded row starts later
        if cache is not None:  # the cache remembers which keys were padding, and each row's lead
            key_is_pad = cache.add_padding(key_is_pad, B, T, tok_emb.device)
            if cache.lead is not None:
                row_positions = (positions[None, :] - cache.lead[:, None]).clamp(min=0)
        x = self.hook_embed(tok_emb * self.embed_scale if self.embed_scale != 1.0 else tok_emb)
        if type_emb is not None:  # BERT's order: (token + type) + position
            x = x + self.hook_token_type_embed(type_emb)
        pe = self.pos.embed(row_positions)
        if pe is not None:  # [pos, d_model], broadcast over the batch (expanded only to record it)
            pe = pe.to(x.dtype)
            x = x + (self.hook_pos_embed(pe.expand(B, T, -1)) if self.hook_pos_embed.active else pe)
        if self.ln_embed is not None:
            x = self.ln_embed(x)
        if self.drop.p and self.training:
            x = self.drop(x)
        mask = MaskSpec(causal=self.causal, window=self.cfg.window, n_global=self.cfg.global_tokens,
                        key_is_pad=key_is_pad, q_offset=offset)
        # Relative biases (ALiBi, T5) read index distances: a row's lead cancels out of them.
        ctx = AttnContext(mask, self.pos.rotary(row_positions), rotate=self.pos.rotate)
        if self.pos.adds_bias:
            k_positions = positions if offset == 0 else torch.arange(offset + T, device=tok_emb.device)
            ctx = AttnContext(mask, ctx.rotary, self.pos.score_bias, positions, k_positions,
                              rotate=self.pos.rotate,
                              score_mod=self.pos.score_mod(offset) if self.pos.score_mod_ok else None)
        memory_ctx = None
        if memory is not None or (cache is not None and cache.cross_attn is not None):
            memory_ctx = AttnContext(MaskSpec(key_is_pad=memory_is_pad, is_self=False))
            if cache is not None and cache.cross_attn[0].k is not None:
                memory = None  # the memory's keys/values are already cached
        for i, block in enumerate(self.blocks):
            x = block(x, ctx, memory, memory_ctx,
                      cache=None if cache is None else cache.self_attn[i],
                      cross_cache=None if cache is None or cache.cross_attn is None else cache.cross_attn[i])
        return self.ln_final(x)


class Transformer(ModelAPI, nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        cfg = self._take_config(config, ModelConfig, "tfviz.ModelConfig")
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.n_token_types:
            self.token_type_embed = nn.Embedding(cfg.n_token_types, cfg.d_model)
        if cfg.arch == "encoder-decoder":
            self.encoder = Stack(cfg, causal=False)
            self.decoder = Stack(cfg, causal=True, cross=True)
        else:
            self.stack = Stack(cfg, causal=cfg.causal)
        head = HEADS[cfg.head]
        self.head_transform = head.transform(cfg)  # BERT's dense + activation + norm, or None
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=head.bias)
        self._init_weights()
        if cfg.tie_embeddings:
            self.unembed.weight = self.embed.weight
        # Public hook names: drop the internal "stack." prefix of single-stack models.
        self._hooks: dict[str, HookPoint] = name_hook_points(self)

    def _init_weights(self) -> None:
        # GPT-2 style: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2 * layers).
        for name, p in self.named_parameters():
            if p.is_meta:  # a shell for shapes only (checkpoint checks): values do not exist
                continue
            if p.dim() >= 2:
                std = 0.02
                if name.endswith(("W_o.weight", "W_out.weight")):
                    std /= math.sqrt(2 * self.config.n_layers)
                nn.init.normal_(p, std=std)
            elif name.endswith(".bias") and "ln" not in name:
                nn.init.zeros_(p)

    @classmethod
    def from_state_dict(cls, config: ModelConfig, state: dict[str, torch.Tensor]) -> "Transformer":
        """A model whose parameters *are* ``state``'s tensors (no copy, no random initialisation:
        built on the meta device, then assigned; strict: every parameter, nothing else). With
        ``tie_embeddings``, ``unembed.weight`` may be left out. Computed buffers (RoPE
        frequencies, ALiBi slopes) are rebuilt from the config."""
        with torch.device("meta"):
            model = cls(config)
        state = dict(state)
        if config.tie_embeddings:
            state.setdefault("unembed.weight", state.get("embed.weight"))
        model.load_state_dict(state, strict=True, assign=True)
        if config.tie_embeddings:
            model.unembed.weight = model.embed.weight
        for stack in model.stacks.values():  # non-persistent buffers: not in any state dict
            fresh = make_positional(config, stack.causal)
            for name, buf in fresh.named_buffers():
                setattr(stack.pos, name, buf)
        meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
        if meta:
            raise ValueError(f"no values for {', '.join(meta[:5])}")
        return model

    # ------------------------------------------------------------------ public helpers
    def set_attention_impl(self, impl: str) -> None:
        """For every attention layer: "auto" (SDPA, or the banded kernel for a long sliding window;
        explicit while recording), "explicit", "sdpa" (masked SDPA) or "banded"."""
        if impl not in IMPLS:
            raise ValueError(f"attention impl {impl!r} is not one of {IMPLS}")
        for m in self.modules():
            if hasattr(m, "impl") and hasattr(m, "hook_pattern"):
                m.impl = impl

    def new_cache(self) -> KVCache:
        return KVCache.empty(self.config.n_layers, cross=self.config.arch == "encoder-decoder")

    @property
    def stacks(self) -> dict[str, Stack]:
        if self.config.arch == "encoder-decoder":
            return {"encoder": self.encoder, "decoder": self.decoder}
        return {"": self.stack}

    # ------------------------------------------------------------------ input checks
    def _check_tokens(self, t, what: str, offset: int = 0) -> None:
        check_tokens(self.config, t, what, offset)

    def _pads(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None, causal: bool):
        """[batch, pos] True = padding, or None when nothing needs masking."""
        pads = find_padding(self.config, tokens, padding_mask)
        if pads is None:
            return None
        if bool(pads.all(dim=1).any()):
            raise ValueError("a sequence in the batch is all padding: it has nothing to attend to")
        if causal and bool((pads[:, :-1] <= pads[:, 1:]).all()):
            return None  # right padding only: the causal mask already hides it from real tokens
        return pads

    # ------------------------------------------------------------------ forward
    def _check_token_types(self, tokens: torch.Tensor, token_types: torch.Tensor | None) -> None:
        if not self.config.n_token_types:
            if token_types is not None:
                raise ValueError("this model has no token types (n_token_types=0): leave token_types out")
            return
        if token_types is None:
            return
        if not isinstance(token_types, torch.Tensor) or token_types.shape != tokens.shape \
                or token_types.dtype.is_floating_point or token_types.dtype == torch.bool:
            raise ValueError("token_types must be an integer tensor shaped like the tokens")
        if int(token_types.min()) < 0 or int(token_types.max()) >= self.config.n_token_types:
            raise ValueError(f"token_types must be in [0, {self.config.n_token_types})")

    def _type_embeddings(self, tokens: torch.Tensor, token_types: torch.Tensor | None):
        """token_types [batch, pos] (default all 0) -> [batch, pos, d_model], or None for a model
        without token types (checked by ``prepare``)."""
        if not self.config.n_token_types:
            return None
        if token_types is None:
            return self.token_type_embed.weight[0].expand(*tokens.shape, -1)
        return self.token_type_embed(token_types)

    def prepare(self, *inputs: torch.Tensor, padding_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, token_types: torch.Tensor | None = None
                ) -> tuple[torch.Tensor | None, ...]:
        """Check the inputs and resolve which keys are padding: everything in a forward that reads
        tensor values on the host (``int(t.min())``, ``bool(pads.any())``). -> ``pads`` for
        ``forward``: (key_is_pad,) for one stack, (src_is_pad, tgt_is_pad) for an encoder-decoder,
        each [batch, pos] or None. A compiled caller runs this eagerly and passes ``pads=``, so the
        compiled forward holds no host sync and no graph break (``tfviz.train`` does)."""
        cfg = self.config
        inputs = check_arity(cfg, inputs)
        if cfg.arch == "encoder-decoder":
            src, tgt = inputs
            if token_types is not None:
                raise ValueError("an encoder-decoder model has no token types")
            src_pads = None
            if cache is None or cache.memory is None:
                self._check_tokens(src, "src")
                src_pads = self._pads(src, padding_mask, causal=False)
            offset = cache.length if cache is not None else 0
            self._check_tokens(tgt, "tgt", offset)
            return src_pads, None if cache is not None else self._pads(tgt, None, causal=True)
        (tokens,) = inputs
        if cache is not None and cfg.arch == "encoder":
            raise ValueError("an encoder sees the whole input at once: there is nothing to cache")
        self._check_tokens(tokens, "tokens", cache.length if cache is not None else 0)
        self._check_token_types(tokens, token_types)
        if cache is not None and cache.length:  # later steps: the new tokens are real, never padding
            if padding_mask is not None:
                raise ValueError("padding_mask goes with the prompt (the first step); the tokens "
                                 "generated after it are never padding")
            return (None,)
        return (self._pads(tokens, padding_mask, cfg.causal),)

    def forward(self, *inputs: torch.Tensor, padding_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, pads: tuple[torch.Tensor | None, ...] | None = None,
                token_types: torch.Tensor | None = None) -> torch.Tensor:
        """decoder / encoder: model(tokens); encoder-decoder: model(src, tgt) -> logits
        [batch, pos, vocab]. ``pads``: what ``prepare`` returned for these inputs (checks skipped).
        ``token_types`` [batch, pos] for models with ``n_token_types`` (BERT's segments A = 0 /
        B = 1; default all 0)."""
        if pads is None:
            pads = self.prepare(*inputs, padding_mask=padding_mask, cache=cache, token_types=token_types)
        if self.config.arch == "encoder-decoder":
            src, tgt = inputs
            src_pads, tgt_pads = pads
            if cache is not None and cache.memory is not None:
                memory, memory_is_pad = cache.memory, cache.memory_is_pad
            else:
                memory, memory_is_pad = self.encoder(self.embed(src), src_pads), src_pads
                if cache is not None:
                    cache.memory, cache.memory_is_pad = memory, memory_is_pad
            h = self.decoder(self.embed(tgt), tgt_pads, memory, memory_is_pad, cache)
        else:
            h = self.stack(self.embed(inputs[0]), pads[0], cache=cache,
                           type_emb=self._type_embeddings(inputs[0], token_types))
        if self.head_transform is not None:
            h = self.head_transform(h)
        return self.unembed(h)  # [batch, pos, vocab]

    def encode(self, src: torch.Tensor, padding_mask: torch.Tensor | None = None):
        """Encoder-decoder only: src [batch, src_pos] -> (memory [batch, src_pos, d_model], src pads)."""
        if self.config.arch != "encoder-decoder":
            raise ValueError("encode() is for encoder-decoder models")
        self._check_tokens(src, "src")
        pads = self._pads(src, padding_mask, causal=False)
        return self.encoder(self.embed(src), pads), pads



_LAYER_1 = re.compile(r"(^|\.)blocks\.1\.")


def tensor_shapes(config: ModelConfig, parameters_only: bool = False) -> dict[str, tuple[torch.dtype, tuple]]:
    """Every ``state_dict`` name (or, with ``parameters_only``, every parameter's) of a model of
    ``config`` -> (dtype, shape), without building it: a shell on the meta device with at most
    two layers, whose layer 1 stands for layers 1..n-1 (layer 0 may own shared tables). A
    256-layer config costs what a 2-layer one does. A tied ``unembed.weight`` is listed as a
    parameter once (as ``embed.weight``) but kept in the state dict."""
    with torch.device("meta"):
        shell = Transformer(config.replace(n_layers=min(config.n_layers, 2)))
    named = shell.named_parameters() if parameters_only else shell.state_dict().items()
    out: dict[str, tuple[torch.dtype, tuple]] = {}
    for name, t in named:
        spec = (t.dtype, tuple(t.shape))
        if _LAYER_1.search(name):
            out.update({_LAYER_1.sub(lambda m: f"{m.group(1)}blocks.{layer}.", name, count=1): spec
                        for layer in range(1, config.n_layers)})
        else:
            out[name] = spec
    return out


def parameter_count(config: ModelConfig) -> int:
    """How many parameters a model of ``config`` has (tied weights counted once), without building it."""
    return sum(math.prod(shape) for _, shape in tensor_shapes(config, parameters_only=True).values())
