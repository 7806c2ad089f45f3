"""Positional schemes for the Positional page: formula tables without a model, RoPE inputs taken
from a real forward, and how models trained with each scheme cope with longer inputs.

    scheme_tables("sinusoidal", d_model=64, n=128)   -> {"sinusoidal": [pos, d_model]}
    extrapolation_table([("rope", ckpt_a), ("alibi", ckpt_b)], [16, 32, 64, 128])
        -> DataFrame(model, scheme, length, loss, tokens, note)

Formula tables come from the model's own positional classes (``tfviz.model.positional``), built
alone (no embeddings, no blocks), so they are the exact numbers a model with that config uses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..model import ModelConfig, hook_name
from ..model.families import kind_of
from ..model.positional import ROTARY_PAIRS, SCHEMES, make_positional
from ..tasks.base import IGNORE
from ..recording import positional_tables
from .explorer import kv_head
from .rope import rope_freqs

FORMULA_SCHEMES = tuple(name for name, s in SCHEMES.items() if s.formula_tables)  # need no training


def scheme_tables(pos: str, *, d_model: int = 64, n_heads: int = 1, n: int = 64,
                  causal: bool = True, rope_base: float = 10000.0, t5_num_buckets: int = 32,
                  t5_max_distance: int = 128) -> dict[str, torch.Tensor]:
    """The input-independent tables of scheme ``pos`` for ``n`` positions, computed by the model's
    own positional module built alone. Only parameter-free tables are returned (the scheme's
    ``formula_tables``): a learned table and T5's learned bias would be random numbers without
    training, so they are left out (``t5`` gives its buckets only)."""
    if pos not in FORMULA_SCHEMES:
        raise ValueError(f"{pos!r} has no formula table; formula schemes: {FORMULA_SCHEMES}")
    if n < 1:
        raise ValueError(f"n={n} positions: need at least 1")
    cfg = ModelConfig(d_model=d_model, n_heads=n_heads, max_len=max(n, 1), pos=pos, vocab_size=8,
                      rope_base=rope_base, t5_num_buckets=t5_num_buckets,
                      t5_max_distance=t5_max_distance, n_layers=1)
    with torch.no_grad():
        tables = make_positional(cfg, causal).tables(n)
    return {k: v.detach().cpu() for k, v in tables.items() if k in cfg.scheme.formula_tables}


def stack_tables(tables: dict[str, torch.Tensor], stack: str = "") -> dict[str, torch.Tensor]:
    """``positional_tables`` of one stack with its prefix removed ("encoder.learned" -> "learned");
    ``stack=""`` for single-stack models."""
    if not stack:
        return {k: v for k, v in tables.items() if "." not in k}
    return {k.removeprefix(f"{stack}."): v for k, v in tables.items() if k.startswith(f"{stack}.")}

SINUSOIDAL_LATEX = (r"PE(p, 2i) = \sin\left(p / 10000^{2i/d}\right),\quad "
                    r"PE(p, 2i{+}1) = \cos\left(p / 10000^{2i/d}\right)")
TOKEN_TYPES_NOTE = ("Besides its position vector, every token gets the vector of its segment: type 0 "
                    "for the first sentence (every input on these pages), type 1 for the second "
                    "sentence of a pair (BERT's next-sentence inputs: [CLS] A [SEP] B [SEP]).")


def sinusoidal_like(table: np.ndarray) -> np.ndarray:
    """The sinusoidal table with as many rows as ``table`` and its width (rounded up to even):
    what a learned table is compared with."""
    d = table.shape[1] + table.shape[1] % 2
    return scheme_tables("sinusoidal", d_model=d, n=table.shape[0])["sinusoidal"].numpy()


def sinusoidal_start(config=None) -> tuple[int, int]:
    """(d_model, positions) the sinusoidal view starts at: the model's (d_model even, rounded down
    to a multiple of 8 within 8..512; its max_len within 8..256), else 64 and 128."""
    d = config.d_model if config is not None and config.d_model % 2 == 0 else 64
    n = config.max_len if config is not None else 128
    return min(512, max(8, d - d % 8)), min(256, max(8, n))


def rope_setup(model=None, stack: str = "", d_head: int = 16) -> tuple[int, torch.Tensor]:
    """(d_head, θ_i [d_head/2] float64): a RoPE model's own frequencies, else the formula's for
    the model's d_head (``d_head`` when there is no model or it is odd)."""
    cfg = None if model is None else model.config
    if cfg is not None and "rope_freqs" in cfg.scheme.table_names:  # the scheme records its frequencies
        return cfg.d_head, stack_tables(positional_tables(model, 1), stack)["rope_freqs"].double()
    d = cfg.d_head if cfg is not None and cfg.d_head % 2 == 0 else d_head
    return d, rope_freqs(d)


@dataclass(frozen=True)
class RopePair:
    """One rotated pair of a RoPE head: its pairing convention (``ROTARY_PAIRS``), index, the two
    dimensions it rotates together and its frequency θ."""
    pairs: type
    index: int
    a: int
    b: int
    theta: float

    def caption(self, model: str) -> str:
        return f"{model} rotates {self.pairs.label}: pair {self.index} is dimensions ({self.a}, {self.b})."

    def title(self, vectors: str) -> str:
        return f"RoPE, {vectors}: pair {self.index} (dims {self.a}, {self.b}), θ = {self.theta:.4g}"


def rope_pair(pairs: str, d_head: int, pair: int, freqs: torch.Tensor) -> RopePair:
    """Pair ``pair`` of a ``d_head`` head rotated with the ``pairs`` convention at ``freqs``."""
    cls = ROTARY_PAIRS[pairs]
    a, b = (int(d[pair]) for d in cls.pair_dims(d_head))
    return RopePair(cls, pair, a, b, float(freqs[pair]))


def bias_tables(scheme: str, model=None, n: int = 16, stack: str = "", heads: int = 4) -> dict:
    """ALiBi / T5 tables for ``n`` positions: the model's own when it uses ``scheme``, else the
    formula's for its number of heads and causality (T5's learned bias needs a T5 model)."""
    cfg = None if model is None else model.config
    if cfg is not None and cfg.pos == scheme:
        return stack_tables(positional_tables(model, n), stack)
    causal = cfg.causal and stack != "encoder" if cfg is not None else True
    return scheme_tables(scheme, n_heads=cfg.n_heads if cfg is not None else heads, n=n, causal=causal)


def demo_vector(d_head: int, seed: int = 0) -> torch.Tensor:
    """A fixed random unit-scale vector [d_head] for RoPE demos when the model has no RoPE."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d_head, generator=g, dtype=torch.float64)


def no_learned_note(model: str, pos: str | None) -> str:
    return (f"{model or 'No model'} has no learned position table (it uses {pos or 'nothing'}). "
            "Pick a model with learned positions in the sidebar.")


def learned_limit_note(max_len: int) -> str:
    return (f"A table has exactly {max_len} rows: a longer input has no vector, so learned "
            "positions cannot extrapolate.")


def rows_shown_note(n: int, rows: int) -> str:
    return (f"The first {n} of the table's {rows:,} rows (the figures grow with the square of the "
            "positions shown).")


def demo_qk(d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed DEMO query and key the RoPE view rotates when the model gives no real ones."""
    return demo_vector(d_head, 0), demo_vector(d_head, 1)


def demo_note(uses_rope: bool) -> str:
    return "DEMO vectors (random, fixed): " + (
        "type a text above to rotate a real query." if uses_rope else
        "the selected model does not use RoPE. Pick a RoPE model in the sidebar for real ones.")


def formula_note(label: str, n_heads: int, model: str) -> str:
    """Why a bias is shown from its formula: the model does not use that scheme itself."""
    return (f"Formula for {n_heads} heads: {model or 'the selected model'} does not use {label} "
            "itself." + (" T5's bias values are learned, so only the buckets can be shown without "
                         "a T5 model." if label == "T5" else ""))


# ------------------------------------------------------------------------ checkpoint metadata
def is_positional_family(card: dict) -> bool:
    extra = card.get("extra")
    return isinstance(extra, dict) and extra.get("family") == "positional"


def same_task(card_a: dict, card_b: dict) -> bool:
    """Same task name and the identical tokenizer: their losses are comparable token for token."""
    ta, tb = card_a.get("task") or {}, card_b.get("task") or {}
    return (isinstance(ta, dict) and isinstance(tb, dict) and ta.get("name") == tb.get("name")
            and card_a.get("tokenizer") == card_b.get("tokenizer"))


def comparable(cards: dict, selected: str | None = None) -> tuple[list, bool]:
    """Which checkpoints to compare, from ``cards`` (key -> ``tfviz.train.checkpoint.read_metadata``): those of the positional
    family (``extra["family"] == "positional"``) if any, else single-stack ones trained on the
    same task as ``selected``. Returns (keys, found_family). Encoder-decoders are left out."""
    single = [k for k, c in cards.items()
              if (c.get("model_config") or {}).get("arch") in ("decoder", "encoder")]
    family = [k for k in single if is_positional_family(cards[k])]
    if family:
        return family, True
    mine = cards.get(selected)
    return ([k for k in single if mine is not None and same_task(cards[k], mine)], False)


# ------------------------------------------------------------------------ extrapolation
def train_length(task, split: str = "train") -> int:
    """The longest input (decoder tokens) among a task's training examples."""
    return max(len(e.tokens) for e in task.examples(split))


def packed_batch(task, length: int, n_tokens: int = 4096,
                 split: str = "validation") -> tuple[torch.Tensor, torch.Tensor]:
    """Examples of ``split`` laid back to back (tokens and their targets together) and cut into
    ``max(1, n_tokens // length)`` sequences of exactly ``length`` tokens -> (tokens, targets)
    [batch, length]. Each target keeps the task's own loss positions (-100 elsewhere), so loss at
    length L measures the task at positions up to L. Examples repeat if the split is short."""
    if length < 1:
        raise ValueError(f"length={length} must be at least 1")
    examples = task.examples(split)
    if not examples:
        raise ValueError(f"the task has no {split} examples")
    n_seq = max(1, n_tokens // length)
    need = n_seq * length
    toks, tgts, i = [], [], 0
    while len(toks) < need:
        e = examples[i % len(examples)]
        toks += e.tokens
        tgts += e.targets
        i += 1
        if i > 100 * len(examples) + need:  # examples with no tokens at all
            raise ValueError("the task's examples are empty")
    tokens = torch.tensor(toks[:need]).view(n_seq, length)
    targets = torch.tensor(tgts[:need]).view(n_seq, length)
    return tokens, targets


@torch.no_grad()
def sequence_metrics(model, tokens: torch.Tensor, targets: torch.Tensor,
                     batch_size: int = 32) -> tuple[float, float, int]:
    """Mean cross-entropy and accuracy (argmax = target) over the target positions (-100
    ignored) -> (loss, accuracy, n_target_tokens). Runs the model in eval mode (restored after);
    padding is never involved (packed sequences)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, right, count = 0.0, 0, 0
    try:
        for s in range(0, tokens.shape[0], batch_size):
            t, y = tokens[s:s + batch_size].to(device), targets[s:s + batch_size].to(device)
            logits = model(t, padding_mask=torch.zeros_like(t, dtype=torch.bool)).float()
            keep = y != IGNORE
            if keep.any():
                total += torch.nn.functional.cross_entropy(logits[keep], y[keep],
                                                           reduction="sum").item()
                right += int((logits[keep].argmax(-1) == y[keep]).sum())
                count += int(keep.sum())
    finally:
        model.train(was_training)
    return (total / count if count else math.nan), (right / count if count else math.nan), count


def compare_lengths(train_len: int, factor: int) -> list[int]:
    """Evaluation lengths for a scheme comparison: half the training length, then 1x, 2x, 4x, 8x
    of it up to ``factor``x."""
    return sorted({max(4, train_len // 2)} | {f * train_len for f in (1, 2, 4, 8) if f <= factor})


def token_type_table(model) -> np.ndarray | None:
    """The token-type (segment) embeddings [n_token_types, d_model] a BERT-style model adds to
    every token besides its position (type 0: the first sentence, type 1: the second of a pair),
    or None when the model has none."""
    emb = getattr(model, "token_type_embed", None)
    return None if emb is None else emb.weight.detach().to("cpu", torch.float32).numpy().copy()


def qk_names(layer: int, stack: str = "") -> tuple[str, ...]:
    """The hook names ``recorded_qk`` reads from ``layer``: q and k before rotation, the scores."""
    return tuple(hook_name(layer, f"attn.hook_{x}", stack) for x in ("q", "k", "attn_scores"))


def recorded_qk(arrays, layer: int, head: int, m: int, n: int,
                stack: str = "") -> tuple[torch.Tensor, torch.Tensor, float]:
    """From a recording with ``hook_q`` / ``hook_k`` / ``hook_attn_scores`` of ``layer``: the query
    of position ``m`` in ``head`` and the key of position ``n`` in the kv head that query head
    reads (GQA / MQA), both before rotation, float64; and the model's own score there × √d_head
    (the q·k it computed after rotating; -inf where masked)."""
    q_name, k_name, score_name = qk_names(layer, stack)
    q = np.asarray(arrays[q_name])[0]  # [pos, head, d_head]
    k = np.asarray(arrays[k_name])[0]  # [pos, kv_head, d_head]
    score = float(np.asarray(arrays[score_name])[0, head, m, n])
    kv = kv_head(head, q.shape[1], k.shape[1])
    return (torch.from_numpy(q[m, head].astype(np.float64)),
            torch.from_numpy(k[n, kv].astype(np.float64)), score * math.sqrt(q.shape[-1]))


def not_possible(cfg) -> str:
    """The note of a length the model cannot run at, in its positional scheme's words."""
    return f"not possible: {cfg.scheme.length_limit(cfg)}"


def extrapolation_table(checkpoints, lengths, *, n_tokens: int = 4096,
                        split: str = "validation") -> pd.DataFrame:
    """Loss of each checkpoint's model on its task at each evaluation length.

    ``checkpoints``: (name, Checkpoint) pairs of single-stack models (decoder or encoder) —
    ideally the same task trained with different positional schemes. For each length L the
    task's ``split`` examples are packed into sequences of exactly L tokens (``packed_batch``)
    and the loss is averaged over the task's target positions. A model whose scheme cannot run
    that far (learned positions past ``max_len``) gets loss NaN and a ``note`` (``not_possible``). Returns one row per
    (model, length): model, scheme (a recurrent model's cell), length, loss, tokens (target tokens scored), note, accuracy
    (share of target tokens predicted right).
    The caller holds each model's lock (shared models)."""
    lengths = sorted({int(n) for n in lengths})
    if not lengths or lengths[0] < 2:
        raise ValueError("give evaluation lengths of at least 2 tokens")
    rows = []
    for name, ckpt in checkpoints:
        cfg = ckpt.config
        if cfg.arch == "encoder-decoder":
            raise ValueError(f"{name}: extrapolation is measured on single-stack models "
                             "(decoder or encoder), not encoder-decoder")
        task = ckpt.shared_task()
        kind = kind_of(cfg)  # a recurrent network (its cell) knows order by reading in order
        scheme = cfg.pos if kind == "transformer" else kind
        for length in lengths:
            if cfg.max_positions is not None and length > cfg.max_positions:
                rows.append((name, scheme, length, math.nan, 0, not_possible(cfg), math.nan))
                continue
            tokens, targets = packed_batch(task, length, n_tokens, split)
            if int(tokens.max()) >= cfg.vocab_size:
                raise ValueError(f"{name}: its task's tokens do not fit its vocabulary")
            loss, accuracy, count = sequence_metrics(ckpt.model, tokens, targets)
            rows.append((name, scheme, length, loss, count,
                         "" if count else "no target positions at this length", accuracy))
    return pd.DataFrame(rows, columns=["model", "scheme", "length", "loss", "tokens", "note",
                                       "accuracy"])


__all__ = ["FORMULA_SCHEMES", "bias_tables", "comparable", "compare_lengths", "demo_vector",
           "extrapolation_table", "is_positional_family", "not_possible", "packed_batch",
           "recorded_qk", "rope_setup", "same_task", "scheme_tables", "sequence_metrics",
           "sinusoidal_start", "stack_tables", "train_length"]
