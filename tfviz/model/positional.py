"""Positional schemes, one small class each, behind one interface and one registry (``SCHEMES``).

A scheme may do any of three things, each given absolute positions (a KV cache shifts them):
    embed(positions)            -> [pos, d_model]       added to the token embeddings
    rotary(positions)           -> (cos, sin) [pos, d_head/2]   rotates q and k (``rotate``)
    (positions may also be [batch, pos], one row each: a left-padded batch in generation; then
    embed gives [batch, pos, d_model] and rotary [batch, pos, d_head/2])
    score_bias(q_pos, k_pos)    -> [head, q_pos, k_pos]  added to q.k/sqrt(d_head)
and ``tables(n)`` returns its input-independent tables for the Positional page.
The stack calls these once per forward; every layer reuses the result.

What a scheme *can* do is asked of its class, by everyone else, before any model is built
(``ModelConfig.scheme`` is the class): ``embeds`` / ``rotates`` / ``adds_bias``, ``score_mod_ok``
(the bias is a function of (head, q_idx, k_idx): a FlexAttention ``score_mod``), the hook points
it adds, ``max_positions(cfg)`` and ``length_limit(cfg)`` (how far it runs, and why not further,
in words for users), ``embed_scale(cfg)``, ``check_config(cfg)`` (ModelConfig asks it) and the
tables it offers (``table_names``; ``formula_tables``: those that need no training).

To add a scheme: one subclass of ``Positional`` below, and its class in ``SCHEMES``.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x_2i, x_2i+1) of the last dim of x [batch, pos, head, d_head] by
    (cos, sin) [pos, d_head/2] (or [batch, pos, d_head/2])."""
    x2 = x.unflatten(-1, (-1, 2))  # [batch, pos, head, d_head/2, 2]
    x0, x1 = x2[..., 0], x2[..., 1]
    c, s = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)  # [(batch,) pos, 1, d_head/2]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)


def apply_rotary_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate half-split pairs (x_i, x_i+d/2) of x [batch, pos, head, d_head] by (cos, sin)
    [pos, d_head/2] (or [batch, pos, d_head/2]): Llama's ``x * cos + rotate_half(x) * sin`` with
    rotate_half(x) = [-x2, x1]."""
    x0, x1 = x.chunk(2, dim=-1)  # [batch, pos, head, d_head/2] each
    c, s = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)  # [(batch,) pos, 1, d_head/2]
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1)


class InterleavedPairs:
    """RoFormer / GPT-J (and tfviz's own models): pair i is dimensions (2i, 2i+1)."""

    name, label = "interleaved", "interleaved pairs (2i, 2i+1): RoFormer, GPT-J"
    rotate = staticmethod(apply_rotary)

    @staticmethod
    def pair_dims(d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(first, second): the two dimensions of each pair i -> two [d_head/2] index tensors."""
        return torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)


class HalfSplitPairs:
    """GPT-NeoX / Llama / Mistral / Qwen (``rotate_half``): pair i is dimensions (i, i + d_head/2)."""

    name, label = "half", "half-split pairs (i, i + d/2): GPT-NeoX, Llama"
    rotate = staticmethod(apply_rotary_half)

    @staticmethod
    def pair_dims(d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.arange(0, d_head // 2), torch.arange(d_head // 2, d_head)


ROTARY_PAIRS: dict[str, type] = {cls.name: cls for cls in (InterleavedPairs, HalfSplitPairs)}
"""name (``ModelConfig.rope_pairs``) -> which dimensions RoPE rotates together. Both conventions
rotate pair i by the same angle p * theta_i; a model trained with one gives different numbers
under the other (its q and k dimensions are paired differently), so imported weights keep theirs."""


class Positional(nn.Module):
    """The interface, and the no-op scheme ("none"): attention alone is permutation-equivariant."""

    name = "none"
    label = "none"          # how pages and messages name it
    embeds = False          # embed() returns vectors added to the token embeddings
    rotates = False         # rotary() returns (cos, sin) that rotate q and k
    adds_bias = False       # score_bias() returns a [head, q_pos, k_pos] bias
    score_mod_ok = False    # that bias is f(head, q_idx, k_idx): usable as a FlexAttention score_mod
    table_names: tuple[str, ...] = ()     # what tables() returns
    formula_tables: tuple[str, ...] = ()  # ... of which these need no training (a formula)

    def __init__(self, cfg, causal: bool = True):
        super().__init__()

    # ---------------------------------------------------------------- capabilities (class-level)
    @classmethod
    def check_config(cls, cfg) -> None:
        """Raise ValueError when ``cfg`` cannot use this scheme (ModelConfig calls this)."""

    @classmethod
    def max_positions(cls, cfg) -> int | None:
        """The longest sequence a model with this scheme can run on; None = any length."""
        return None

    @classmethod
    def length_limit(cls, cfg) -> str:
        """Why the model stops at ``max_positions``, as a clause for users ("" when it does not)."""
        return ""

    @classmethod
    def embed_scale(cls, cfg) -> float:
        """Factor on the token embeddings before positions are added."""
        return 1.0

    @classmethod
    def attention_hooks(cls) -> tuple[str, ...]:
        """Hook points this scheme adds to every self-attention layer."""
        return (("hook_rot_q", "hook_rot_k") if cls.rotates else ()) + (
            ("hook_pos_bias",) if cls.adds_bias else ())

    @classmethod
    def stack_hooks(cls) -> tuple[str, ...]:
        """Hook points this scheme adds to the stack (next to ``hook_embed``)."""
        return ("hook_pos_embed",) if cls.embeds else ()

    # ---------------------------------------------------------------- per forward
    def embed(self, positions: torch.Tensor) -> torch.Tensor | None:
        return None

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    rotate = staticmethod(apply_rotary)  # how (cos, sin) are applied to q and k

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return None

    def score_mod(self, q_offset: int = 0) -> Callable | None:
        """``f(score, batch, head, q_idx, k_idx) -> score + bias`` (FlexAttention's score_mod;
        q_idx counts from ``q_offset``), for schemes with ``score_mod_ok``."""
        return None

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        return {}


class Sinusoidal(Positional):
    """Vaswani et al. 2017, §3.5:  PE(p, 2i) = sin(p / 10000^(2i/d)),  PE(p, 2i+1) = cos(p / 10000^(2i/d)).
    Token embeddings are multiplied by sqrt(d_model) first (§3.4).

    Computed from the formula for any position, so it runs past ``max_len`` (how well the model
    copes there is an empirical question the Positional page measures).
    """

    name, label, embeds = "sinusoidal", "Sinusoidal", True
    table_names = formula_tables = ("sinusoidal",)

    def __init__(self, cfg, causal: bool = True):
        super().__init__(cfg, causal)
        self.d_model = cfg.d_model
        self.max_len = cfg.max_len
        i = torch.arange(0, cfg.d_model, 2, dtype=torch.float64)
        self.register_buffer("inv_freq", 10000.0 ** (-i / cfg.d_model), persistent=False)

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model (it is {cfg.d_model})")

    @classmethod
    def embed_scale(cls, cfg) -> float:
        return math.sqrt(cfg.d_model)

    def embed(self, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.to(torch.float64)[..., None] * self.inv_freq  # [(batch,) pos, d_model/2]
        pe = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # sin, cos interleaved
        return pe.to(torch.get_default_dtype())

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        return {"sinusoidal": self.embed(torch.arange(n))}  # [pos, d_model]


class Learned(Positional):
    """A trained table of ``max_len`` vectors (GPT-2, BERT). It has no row for a longer position."""

    name, label, embeds = "learned", "Learned", True
    table_names = ("learned",)

    def __init__(self, cfg, causal: bool = True):
        super().__init__(cfg, causal)
        self.table = nn.Embedding(cfg.max_len, cfg.d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    @classmethod
    def max_positions(cls, cfg) -> int:
        return cfg.max_len

    @classmethod
    def length_limit(cls, cfg) -> str:
        return (f"this model has learned positions for only {cfg.max_len}: a learned position table "
                "has no vector for a longer position and cannot extrapolate")

    def embed(self, positions: torch.Tensor) -> torch.Tensor:
        return self.table(positions)

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        return {"learned": self.table.weight.detach()}  # [max_len, d_model]


class RoPE(Positional):
    """Su et al. 2021 (RoFormer): rotate each pair of dimensions of q and k by angle p * theta_i,
    theta_i = base^(-2i/d_head) (``rope_base``). Then q_m . k_n depends on m and n only through
    m - n. Which dimensions form pair i is ``rope_pairs`` (``ROTARY_PAIRS``): interleaved
    (2i, 2i+1) or half-split (i, i + d_head/2, Llama)."""

    name, label, rotates = "rope", "RoPE", True
    table_names = formula_tables = ("rope_freqs", "rope_angles")

    def __init__(self, cfg, causal: bool = True):
        super().__init__(cfg, causal)
        self.pairs = ROTARY_PAIRS[cfg.rope_pairs]
        self.rotate = self.pairs.rotate
        i = torch.arange(0, cfg.d_head, 2, dtype=torch.float64)
        self.register_buffer("inv_freq", cfg.rope_base ** (-i / cfg.d_head), persistent=False)

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.d_head % 2:
            raise ValueError(
                f"RoPE rotates pairs of dimensions, so d_head = d_model / n_heads must be even "
                f"(it is {cfg.d_head})"
            )

    def angles(self, positions: torch.Tensor) -> torch.Tensor:
        return positions.to(torch.float64)[..., None] * self.inv_freq  # [(batch,) pos, d_head/2]

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.angles(positions)
        dtype = torch.get_default_dtype()
        return a.cos().to(dtype), a.sin().to(dtype)

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        return {"rope_freqs": self.inv_freq.float(), "rope_angles": self.angles(torch.arange(n)).float()}


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al. 2021: slopes 2^(-8(h+1)/H) for power-of-two H; otherwise the slopes of the
    nearest lower power of two plus every other slope of the next one (their reference code)."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(p)
    if p < n_heads:
        slopes += geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes)


class ALiBi(Positional):
    """Attention with Linear Biases: score += -m_h * |i - j| (symmetric when bidirectional; with a
    causal mask only j <= i is ever seen, where it is -m_h * (i - j)). No learned parameters."""

    name, label, adds_bias, score_mod_ok = "alibi", "ALiBi", True, True
    table_names = formula_tables = ("alibi_slopes", "alibi_bias")

    def __init__(self, cfg, causal: bool = True):
        super().__init__(cfg, causal)
        self.register_buffer("slopes", alibi_slopes(cfg.n_heads), persistent=False)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        dist = (q_pos[:, None] - k_pos[None, :]).abs().to(self.slopes.dtype)  # [q_pos, k_pos]
        return -self.slopes[:, None, None] * dist  # [head, q_pos, k_pos]

    def score_mod(self, q_offset: int = 0) -> Callable:
        slopes = self.slopes

        def alibi(score, b, h, q_idx, k_idx):
            return score - slopes[h] * (q_idx + q_offset - k_idx).abs().to(slopes.dtype)
        return alibi

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        p = torch.arange(n)
        return {"alibi_slopes": self.slopes, "alibi_bias": self.score_bias(p, p)}


def t5_bucket(relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Raffel et al. 2020 (T5): relative position (key - query) -> bucket id. Half the buckets are
    exact small distances, the rest grow logarithmically up to ``max_distance``; bidirectional
    models spend half the buckets on each direction."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative > 0).long() * num_buckets
        n = relative.abs()
    else:
        n = (-relative).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(is_small, n, large)


class T5Bias(Positional):
    """A learned scalar per (bucket, head) added to the scores; buckets from ``t5_bucket``
    (bidirectional in an encoder, one-sided in a causal stack)."""

    name, label, adds_bias, score_mod_ok = "t5", "T5", True, True
    table_names = ("t5_buckets", "t5_bias")
    formula_tables = ("t5_buckets",)  # the bias values themselves are learned

    def __init__(self, cfg, causal: bool = True):
        super().__init__(cfg, causal)
        self.bidirectional = not causal
        self.num_buckets = cfg.t5_num_buckets
        self.max_distance = cfg.t5_max_distance
        self.bias = nn.Embedding(cfg.t5_num_buckets, cfg.n_heads)
        nn.init.normal_(self.bias.weight, std=0.02)

    def buckets(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        rel = k_pos[None, :] - q_pos[:, None]  # [q_pos, k_pos]
        return t5_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)

    def score_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        return self.bias(self.buckets(q_pos, k_pos)).permute(2, 0, 1)  # [head, q_pos, k_pos]

    def score_mod(self, q_offset: int = 0) -> Callable:
        table, args = self.bias.weight, (self.bidirectional, self.num_buckets, self.max_distance)

        def t5(score, b, h, q_idx, k_idx):
            return score + table[t5_bucket(k_idx - q_idx - q_offset, *args), h]
        return t5

    def tables(self, n: int) -> dict[str, torch.Tensor]:
        p = torch.arange(n)
        return {"t5_buckets": self.buckets(p, p), "t5_bias": self.score_bias(p, p).detach()}


SCHEMES: dict[str, type[Positional]] = {cls.name: cls for cls in (
    Positional, Sinusoidal, Learned, RoPE, ALiBi, T5Bias)}
"""name (``ModelConfig.pos``) -> scheme class."""


def make_positional(cfg, causal: bool) -> Positional:
    """The scheme module ``cfg.pos`` names, for a causal or bidirectional stack."""
    return cfg.scheme(cfg, causal)
