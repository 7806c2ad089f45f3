"""Model configuration: a frozen, validated, versioned dataclass.

Every field is checked at construction so that a bad value fails *here*, with a sentence a student
can act on, instead of as an index error deep inside torch. The allowed positional schemes,
normalisations and activations are the names in their registries (``positional.SCHEMES``,
``norms.NORMS``, ``activations.ACTIVATIONS``); the positional scheme checks the rest of the
config itself (``Positional.check_config``, e.g. RoPE's even d_head).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from .activations import ACTIVATIONS
from .heads import HEADS
from .norms import NORMS
from .positional import ROTARY_PAIRS, SCHEMES, Positional

CONFIG_FORMAT_VERSION = 1  # of ModelConfig.to_dict()

ARCHS = ("decoder", "encoder", "encoder-decoder")
POS_SCHEMES = tuple(SCHEMES)  # the registered positional schemes' names (for forms and flags)
NORM_PLACEMENTS = ("pre", "post")  # where each sublayer's norm sits (blocks.Block)


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} must be a whole number")
    if value < low:
        raise ValueError(f"{name}={value} must be at least {low}")
    if high is not None and value > high:
        raise ValueError(f"{name}={value} is too large (at most {high})")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of {', '.join(repr(c) for c in choices)}")


class VersionedConfig:
    """``to_dict`` / ``from_dict`` / ``replace`` of a frozen, validated config dataclass stored
    with a format version (ModelConfig here, ``tfviz.train.TrainConfig``)."""

    FORMAT_VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "config"  # how messages name it
    # A model config's family (``tfviz.model.families``), written into ``to_dict`` so a checkpoint
    # says which network to build; None for other configs (TrainConfig). A dict without it is a
    # transformer's (every checkpoint written before recurrent models existed).
    FAMILY: ClassVar[str | None] = None

    def to_dict(self) -> dict[str, Any]:
        family = {"family": self.FAMILY} if self.FAMILY else {}
        return {"format_version": self.FORMAT_VERSION, **family, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        if not isinstance(data, dict):
            raise ValueError(f"a {cls.WHAT} must be a JSON object, not {type(data).__name__}")
        data = dict(data)
        if cls.FAMILY is not None:
            family = data.pop("family", "transformer")
            if family != cls.FAMILY:
                raise ValueError(f"this is a {family!r} model config, not a {cls.FAMILY!r} one "
                                 "(tfviz.model.families.config_from_dict reads any family)")
        version = data.pop("format_version", cls.FORMAT_VERSION)
        if version != cls.FORMAT_VERSION:
            raise ValueError(f"{cls.WHAT} format_version={version!r} is not supported "
                             f"(this tfviz reads version {cls.FORMAT_VERSION})")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown {cls.WHAT} field(s): {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class ModelConfig(VersionedConfig):
    """Everything needed to build a :class:`tfviz.Transformer`.

    ``n_kv_heads`` defaults to ``n_heads`` (multi-head attention); 1 gives multi-query attention;
    any other divisor of ``n_heads`` gives grouped-query attention, where query head ``h`` reads
    key/value head ``h // (n_heads // n_kv_heads)``.

    ``window``: ``None`` for full attention, or ``w``: a query at ``i`` sees keys ``j`` with
    ``0 <= i - j <= w`` (causal) or ``|i - j| <= w`` (bidirectional).
    ``global_tokens``: the first ``g`` positions attend and are attended everywhere (Longformer-style),
    on top of the window.

    ``pad_id``: token id whose positions are masked as keys (tfviz's own models: 0 = [PAD]);
    ``None`` masks nothing by id (imported models: GPT-2's id 0 is "!", a real token; pass
    ``padding_mask=`` to mask padding explicitly).

    Options that imported models need (``tfviz.interop``), each off by default:
      ``normalization``  "layernorm" | "rmsnorm" (Llama)
      ``activation``     "gelu" (exact, BERT) | "gelu_new" (tanh approximation, GPT-2) | "relu" |
                         "swiglu" (Llama: W_in = [gate; up], W_out = down)
      ``embed_norm``     a norm right after the embeddings (BERT's embedding LayerNorm)
      ``n_token_types``  > 0: a table of that many token-type (segment) embeddings added to the
                         token embeddings; ``model(tokens, token_types=...)``, default all 0 (BERT: 2)
      ``head``           "linear" | "mlm" (BERT's masked-LM head: dense + activation + norm, then
                         the unembedding with an output bias)
      ``rope_pairs``     "interleaved" (dims 2i, 2i+1: RoFormer, GPT-J, tfviz) | "half" (dims i and
                         i + d_head/2: Llama's rotate_half); ``rope_base`` is theta's base
      ``tie_embeddings`` the unembedding is the token embedding matrix (GPT-2, BERT) or its own
    """

    arch: str = "decoder"
    vocab_size: int = 128
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None
    n_layers: int = 2
    d_ff: int | None = None
    max_len: int = 256
    pos: str = "learned"
    norm: str = "pre"
    normalization: str = "layernorm"
    activation: str = "gelu"
    dropout: float = 0.0
    window: int | None = None
    global_tokens: int = 0
    attn_only: bool = False
    bias: bool = True
    tie_embeddings: bool = False
    pad_id: int | None = 0
    layer_norm_eps: float = 1e-5
    rope_base: float = 10000.0
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    embed_norm: bool = False
    n_token_types: int = 0
    head: str = "linear"
    rope_pairs: str = "interleaved"

    FORMAT_VERSION: ClassVar[int] = CONFIG_FORMAT_VERSION
    WHAT: ClassVar[str] = "model config"
    FAMILY: ClassVar[str] = "transformer"

    def __post_init__(self) -> None:
        # Fill derived defaults first, then validate every field.
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
        _check_choice("arch", self.arch, ARCHS)
        _check_choice("pos", self.pos, tuple(SCHEMES))  # the registries as they are now
        _check_choice("norm", self.norm, NORM_PLACEMENTS)
        _check_choice("normalization", self.normalization, tuple(NORMS))
        _check_choice("activation", self.activation, tuple(ACTIVATIONS))
        _check_choice("head", self.head, tuple(HEADS))
        _check_choice("rope_pairs", self.rope_pairs, tuple(ROTARY_PAIRS))
        _check_int("vocab_size", self.vocab_size, 2, 1_000_000)
        _check_int("d_model", self.d_model, 1, 65_536)
        _check_int("n_heads", self.n_heads, 1, 1024)
        _check_int("n_kv_heads", self.n_kv_heads, 1, 1024)
        _check_int("n_layers", self.n_layers, 1, 256)
        _check_int("d_ff", self.d_ff, 1, 1_048_576)
        _check_int("max_len", self.max_len, 1, 1_048_576)
        _check_int("global_tokens", self.global_tokens, 0, self.max_len)
        _check_int("t5_num_buckets", self.t5_num_buckets, 2, 4096)
        _check_int("t5_max_distance", self.t5_max_distance, 2, 1_048_576)
        _check_int("n_token_types", self.n_token_types, 0, 1024)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                "each head gets d_model / n_heads dimensions"
            )
        if self.n_kv_heads > self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                "(1 = multi-query, n_heads = multi-head, a divisor in between = grouped-query)"
            )
        self.scheme.check_config(self)
        HEADS[self.head].check_config(self)
        if self.rope_pairs != "interleaved" and not self.scheme.rotates:
            raise ValueError(f"rope_pairs={self.rope_pairs!r} only applies to a rotating scheme "
                             f"(pos='rope'), not pos={self.pos!r}")
        if self.n_token_types and self.arch == "encoder-decoder":
            raise ValueError("token types (n_token_types) are for single-stack models "
                             "(decoder or encoder), not encoder-decoder")
        if self.window is not None:
            _check_int("window", self.window, 1, 1_048_576)
        for name in ("dropout",):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
                raise ValueError(f"{name}={value!r} must be a number in [0, 1)")
        for name in ("layer_norm_eps", "rope_base"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0
                    or not math.isfinite(value)):
                raise ValueError(f"{name}={value!r} must be a positive, finite number")
        for name in ("attn_only", "bias", "tie_embeddings", "embed_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be True or False")
        if self.pad_id is not None:
            _check_int("pad_id", self.pad_id, 0)
            if self.pad_id >= self.vocab_size:
                raise ValueError(f"pad_id={self.pad_id} must be below vocab_size={self.vocab_size}")
        if self.global_tokens and self.window is None:
            raise ValueError("global_tokens only makes sense with a sliding window (set window)")

    # ------------------------------------------------------------------ derived
    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def causal(self) -> bool:
        """Whether the (self-attention of the) main stack is causal."""
        return self.arch != "encoder"

    @property
    def scheme(self) -> type[Positional]:
        """The positional scheme's class: ask it what it can do (``tfviz.model.positional``)."""
        return SCHEMES[self.pos]

    @property
    def max_positions(self) -> int | None:
        """The longest sequence this model can run on (None = any length; learned: max_len)."""
        return self.scheme.max_positions(self)

    # ------------------------------------------------------------------ what it is, what it has
    def min_parameters(self) -> int:
        """A lower bound on the parameter count: every layer holds at least its attention output
        projection (d_model x d_model) and the model its token embedding (vocab x d_model)."""
        return self.n_layers * self.d_model ** 2 + self.vocab_size * self.d_model

    def summary(self) -> str:
        """One line for cards and ``python -m tfviz info``."""
        return (f"transformer {self.arch}, {self.n_layers} layers, {self.n_heads} heads "
                f"({self.n_kv_heads} kv), d_model {self.d_model}, d_ff {self.d_ff}, pos {self.pos}, "
                f"norm {self.norm}{', attention-only' if self.attn_only else ''}")

    def lacks(self, view: str) -> str | None:
        """Why a view (``tfviz.model.families.VIEWS``) does not apply to this model, or None when it
        does. Pages show the sentence instead of the view."""
        if view == "cross_attention" and self.arch != "encoder-decoder":
            return (f"only an encoder-decoder has cross-attention (decoder queries over the source); "
                    f"this is a {self.arch}")
        if view == "kv_cache" and self.arch == "encoder":
            return "an encoder reads the whole input at once in both directions: it generates nothing, so it caches nothing"
        if view == "hidden_state":
            return ("a transformer carries no recurrent hidden state from token to token: every "
                    "position has its own residual stream (blocks.{l}.hook_resid_post), and attention "
                    "reads any earlier position directly")
        return None
