"""Attention sinks and streaming (Xiao et al. 2023, "Efficient Streaming Language Models with
Attention Sinks" = StreamingLLM, arXiv 2309.17453), measured on a tfviz language model.

1. Where attention parks: each layer's and head's share of attention on position 0 and on the
   first k positions, over fresh text, beside what a head spreading its weight evenly over the keys
   it may see would give (query i sees i + 1 keys: k / (i + 1) of it on the first k):

       share_k[l, h] = mean over sequences and queries i >= K of  sum_{j < k} A[l, h, i, j]

2. Loss per position on text far longer than the training length, under (``CONDITIONS``)
       dense        full causal attention over everything so far
       window       a sliding window: query i sees keys i - w .. i (the evicted KV states are gone)
       global k     the same window plus the first k tokens, as tfviz's masks do it
                    (``MaskSpec(window=w, n_global=k)``): the first tokens keep their positions in
                    the text (RoPE: query i meets token 0 at distance i). The KV-cache decode
                    computes exactly this (it keeps every key and masks; nothing is evicted)
       sinks k      StreamingLLM: the window plus the first k tokens, positions *within the cache*
                    (Xiao et al. §3.2: the k sinks at slots 0..k-1, the window after them, so
                    query i meets sink j at distance min(i, k + w) - j, never more than k + w)
       recompute    sliding window with re-computation: every position runs the model afresh on its
                    last w + 1 tokens (the paper's oracle baseline, w + 1 forwards' worth of work)
   The paper's signature: the window's loss jumps once the first tokens are evicted (position >
   w), keeping 4 initial tokens (positions within the cache) brings it back near recomputation,
   and dense attention degrades past the training length.

StreamingLLM's cache positions need a scheme that reads positions only inside attention (RoPE,
ALiBi, T5, none); absolute positions added to the embeddings (learned, sinusoidal) are refused.
"sinks k" is computed in one forward: the windowed model's forward, with the scores of the
first k keys replaced, for the queries that evicted anything, by q . k at the cache distance
(hooks on ``attn.hook_q`` / ``hook_k`` / ``hook_attn_scores``). Every token's states are those a
rolling cache would hold: it saw exactly what the cache held when it arrived.
``tests/test_sinks.py`` checks this against a literal rolling cache, token by token.

    tokens = fresh_text(tokenizer, length=512, n_seq=8)
    shares = sink_shares(model, tokens[:, :64])                  # one row per (layer, head)
    curves = streaming_losses(model, tokens, window=32)          # position x condition
    story = sink_story(shares, curves, train_length=64, window=32)   # numbers + the sentence
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..model.transformer import Transformer
from ..recording import record
from .heads import PATTERN
from .interventions import hooks

FIRST = (1, 4)          # the first k tokens whose share is measured / kept as sinks
MIN_QUERY = 4           # shares average queries i >= 4 (those that see more than the first 4 keys)
FRESH_SEED = 33         # fresh text: grammar sentences of a seed no task trains on
SINK = 2.0              # a "sink head": at least this many times the even share on position 0
BLOWUP = 0.5            # nats: "the window blows up" when it is this far above recomputation
CLOSE = 0.1             # nats: "close to recomputation"
PAPER = ("Xiao et al. 2023 (arXiv 2309.17453), Table 1: Llama-2-13B on the first book of PG19 "
         "(65K tokens), cache 1024: window attention (0 + 1024) perplexity 5158.07, 4 initial + "
         "1020 recent tokens 5.40, sliding window with re-computation 5.43. Table 2 (400K tokens of "
         "PG19): Llama-2-7B with a 4096 cache, 0 / 1 / 2 / 4 / 8 initial tokens: 3359.95 / 11.88 / "
         "10.51 / 9.59 / 9.54; Falcon-7B (2048 cache): 17.90 / 12.12 / 12.12 / 12.12 / 12.12. "
         "Their models have 7-13 billion parameters, were trained on trillions of tokens of text "
         "with contexts of 2048-4096, and are streamed over millions of tokens.")


def condition_label(name: str) -> str:
    kind, _, k = name.partition(" ")
    return {"dense": "dense (full attention)", "window": "sliding window",
            "global": f"window + first {k} (text positions, tfviz mask)",
            "sinks": f"window + {k} sinks (cache positions, StreamingLLM)",
            "recompute": "sliding window, recomputed"}[kind]


def conditions(first: Sequence[int] = FIRST) -> tuple[str, ...]:
    return ("dense", "window", *(f"global {k}" for k in first), *(f"sinks {k}" for k in first),
            "recompute")


# ------------------------------------------------------------------------------------ inputs
def fresh_text(tokenizer, length: int, n_seq: int = 8, seed: int = FRESH_SEED,
               bos: bool = False) -> torch.Tensor:
    """[n_seq, length] token ids of fresh text: sentences of the built-in grammar drawn with
    ``seed`` (never a training sentence of a task of another seed), tokenized with the model's own
    tokenizer, laid back to back and cut into rows. ``bos``: each row opens with [BOS] (for a
    model trained on rows that do)."""
    from ..tasks import grammar

    body = length - int(bos)
    need, n = n_seq * body, 64
    while True:
        ids = tokenizer.encode_ids(" ".join(grammar.corpus(n, seed)))
        if len(ids) >= need or n >= 2**20:
            break
        n *= 2
    if len(ids) < need:
        raise ValueError(f"could not make {n_seq} x {length} tokens of fresh text")
    rows = torch.tensor(ids[:need]).view(n_seq, body)
    if bos:
        if tokenizer.bos_id is None:
            raise ValueError("this tokenizer has no [BOS] token")
        rows = torch.cat([torch.full((n_seq, 1), tokenizer.bos_id), rows], dim=1)
    return rows


def _decoder(model) -> None:
    if not isinstance(model, Transformer) or model.config.arch != "decoder":
        raise ValueError("attention sinks are measured on a decoder (causal language model)")


# ------------------------------------------------------------------------------------ shares
def sink_shares(model, tokens: torch.Tensor, first: Sequence[int] = FIRST,
                min_query: int = MIN_QUERY) -> pd.DataFrame:
    """One row per (layer, head): ``share_{k}`` (mean attention on the first k positions over
    queries i >= min_query and the batch), ``even_{k}`` (what spreading evenly over the visible
    keys would give: mean of k / (i + 1), or of the windowed count), ``ratio_1`` = share_1 / even_1."""
    _decoder(model)
    if tokens.shape[1] <= min_query:
        raise ValueError(f"need more than {min_query} tokens to measure attention sinks")
    cfg = model.config
    names = [PATTERN.format(l=l) for l in range(cfg.n_layers)]
    p = record(model, tokens, names=names).stack_layers(PATTERN).double()  # [l, b, h, q, k]
    n = tokens.shape[1]
    i = torch.arange(min_query, n, dtype=torch.float64)
    visible = i + 1 if cfg.window is None else torch.clamp(i + 1, max=cfg.window + 1)
    rows = []
    for l in range(cfg.n_layers):
        for h in range(cfg.n_heads):
            a = p[l, :, h, min_query:, :]  # [batch, q, k]
            row = {"layer": l, "head": h, "name": f"L{l}H{h}"}
            for k in first:
                row[f"share_{k}"] = float(a[..., :k].sum(-1).mean())
                row[f"even_{k}"] = float((k / visible).mean()) if cfg.window is None else math.nan
            row["ratio_1"] = row["share_1"] / row["even_1"] if row["even_1"] else math.nan
            rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ losses
def _token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """logits [batch, pos, vocab] -> next-token loss [batch, pos - 1]."""
    x = logits[:, :-1]
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x  # float64 stays float64
    return F.cross_entropy(x.transpose(1, 2), tokens[:, 1:], reduction="none")


@torch.no_grad()
def _recomputed(model, tokens: torch.Tensor, window: int, chunk: int = 512) -> torch.Tensor:
    """Sliding window with re-computation: position p's prediction from a fresh forward over
    tokens[p - w .. p] (at positions 0..w, as in training) -> loss [batch, pos - 1]."""
    B, n = tokens.shape
    w1 = window + 1
    if n <= w1 + 1:
        return _token_losses(model(tokens), tokens)
    head = _token_losses(model(tokens[:, :w1 + 1]), tokens[:, :w1 + 1])[:, :w1]  # p = 0..w: the prefix
    wins = tokens[:, 1:n - 1].unfold(1, w1, 1).reshape(-1, w1)  # tokens[p-w .. p], p = w+1 .. n-2
    logits = torch.cat([model(wins[s:s + chunk])[:, -1] for s in range(0, wins.shape[0], chunk)])
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    tail = F.cross_entropy(logits.view(B, -1, logits.shape[-1]).transpose(1, 2), tokens[:, w1 + 1:],
                           reduction="none")
    return torch.cat([head, tail], dim=1)


def _cache_position_hooks(model, first: int, window: int) -> list:
    """Hooks that give the first ``first`` keys their StreamingLLM distance for every query that
    has evicted a token (i > first + window): the query meets sink j at min(i, first + w) - j."""
    cfg = model.config
    stack = model.stacks[""]
    pos = stack.pos
    cache_pos = first + window  # the newest token's slot once the cache is full
    saved: dict[int, dict[str, torch.Tensor]] = {}
    out = []
    for l in range(cfg.n_layers):
        def keep(x, l=l, key="q"):
            saved.setdefault(l, {})[key] = x
            return x

        def scores(s, l=l):  # s [batch, head, q_pos, k_pos]
            T = s.shape[2]
            if T <= cache_pos + 1:
                return s
            q, k = saved[l]["q"], saved[l]["k"]  # unrotated [batch, pos, (kv_)head, d_head]
            q = q[:, cache_pos + 1:]
            k = k[:, :first]
            if pos.rotates:
                cq, sq = pos.rotary(torch.tensor([cache_pos], device=q.device))
                ck, sk = pos.rotary(torch.arange(first, device=k.device))
                q, k = pos.rotate(q, cq, sq), pos.rotate(k, ck, sk)
            k = k.repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=2)
            new = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.d_head)
            if pos.adds_bias:
                new = new + pos.score_bias(torch.tensor([cache_pos], device=q.device),
                                           torch.arange(first, device=q.device)).to(new.dtype)
            s = s.clone()
            s[:, :, cache_pos + 1:, :first] = new.to(s.dtype)
            return s

        out += [(f"blocks.{l}.attn.hook_q", lambda x, l=l: keep(x, l, "q")),
                (f"blocks.{l}.attn.hook_k", lambda x, l=l: keep(x, l, "k")),
                (f"blocks.{l}.attn.hook_attn_scores", scores)]
    return out


def _windowed(model: Transformer, window: int, first: int = 0) -> Transformer:
    """The same weights (shared, not copied: dtype and device kept) under a sliding window with
    ``first`` global tokens (``masks_demo.windowed_model`` copies into float32)."""
    cfg = model.config.replace(window=window, global_tokens=min(first, model.config.max_len))
    return Transformer.from_state_dict(cfg, model.state_dict()).eval()


@torch.no_grad()
def condition_losses(model, tokens: torch.Tensor, condition: str, window: int) -> torch.Tensor:
    """Next-token loss [batch, pos - 1] of ``model`` on ``tokens`` under one of ``conditions()``."""
    _decoder(model)
    kind, _, k = condition.partition(" ")
    was = model.training
    model.eval()
    try:
        if kind == "dense":
            return _token_losses(model(tokens), tokens)
        if kind == "recompute":
            return _recomputed(model, tokens, window)
        k = int(k or 0)
        copy = _windowed(model, window, k)
        if kind in ("window", "global"):
            return _token_losses(copy(tokens), tokens)
        if kind == "sinks":
            if model.config.scheme.embeds:
                raise ValueError(f"StreamingLLM's positions within the cache need positions that "
                                 f"act inside attention (RoPE, ALiBi, T5, none); this model adds "
                                 f"{model.config.scheme.label} positions to its embeddings")
            copy.set_attention_impl("explicit")
            with hooks(copy, _cache_position_hooks(copy, k, window)):
                return _token_losses(copy(tokens), tokens)
        raise ValueError(f"unknown condition {condition!r}; known: {', '.join(conditions())}")
    finally:
        model.train(was)


def streaming_losses(model, tokens: torch.Tensor, window: int,
                     first: Sequence[int] = FIRST) -> pd.DataFrame:
    """Long form: condition, label, position (the token index predicting the next), loss (mean
    over the batch) for every condition of ``conditions(first)``."""
    if window < 1 or window + 2 >= tokens.shape[1]:
        raise ValueError(f"window={window} must be >= 1 and leave room to evict: the text has "
                         f"{tokens.shape[1]} tokens")
    frames = []
    for c in conditions(first):
        loss = condition_losses(model, tokens, c, window).mean(0).double().numpy()
        frames.append(pd.DataFrame({"condition": c, "label": condition_label(c),
                                    "position": np.arange(len(loss)), "loss": loss}))
    return pd.DataFrame(pd.concat(frames, ignore_index=True))


# ------------------------------------------------------------------------------------ the story
def segment_means(curves: pd.DataFrame, train_length: int, window: int) -> pd.DataFrame:
    """Mean loss per condition over: the window's own positions (0..w, nothing evicted), inside
    the training length after the window (w+1 .. L-1) and beyond it (L .. end). One row per
    condition; columns the three spans (NaN where a span is empty)."""
    spans = {"within the window": (0, window), "past the window, within training length":
             (window + 1, train_length - 1), "beyond the training length": (train_length, 10**9)}
    rows = []
    for c, g in curves.groupby("condition", sort=False):
        row = {"condition": c, "label": g["label"].iloc[0]}
        for name, (a, b) in spans.items():
            sel = g[(g["position"] >= a) & (g["position"] <= b)]["loss"]
            row[name] = float(sel.mean()) if len(sel) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def sink_story(shares: pd.DataFrame, curves: pd.DataFrame, train_length: int, window: int,
               label: str = "this model") -> dict:
    """Numbers and a sentence from ``sink_shares`` and ``streaming_losses``: the strongest sink
    head, how many heads put more than ``SINK`` x the even share on position 0, and each
    condition's mean loss beyond the training length against recomputation; whether the paper's
    signature (window >> recomputation, sinks 4 ~ recomputation) holds."""
    seg = segment_means(curves, train_length, window).set_index("condition")
    far = seg["beyond the training length"]
    rec = float(far["recompute"])
    top = shares.sort_values("share_1", ascending=False).iloc[0]
    n_sink = int((shares["ratio_1"] > SINK).sum())
    kmax = max(int(c.split()[1]) for c in far.index if c.startswith("sinks"))
    gap = {c: float(far[c] - rec) for c in far.index}
    window_blows = gap["window"] > BLOWUP
    sinks_close = abs(gap[f"sinks {kmax}"]) < CLOSE
    out = {"label": label, "train_length": train_length, "window": window, "loss_far": far.to_dict(),
           "gap": gap, "top_head": str(top["name"]), "top_share": float(top["share_1"]),
           "top_even": float(top["even_1"]), "sink_heads": n_sink, "heads": len(shares),
           "mean_share_1": float(shares["share_1"].mean()), "mean_even_1": float(shares["even_1"].mean()),
           "window_blows_up": window_blows, "sinks_close": sinks_close,
           "signature": bool(window_blows and sinks_close), "kmax": kmax,
           "end": int(curves["position"].max()) + 1}
    out["sentence"] = _sentence(out)
    return out


def _sentence(s: dict) -> str:
    g, f = s["gap"], s["loss_far"]
    k = s["kmax"]
    heads = (f"{s['sink_heads']} of {s['heads']} heads put more than {SINK:g}x the even share on "
             f"position 0 (the strongest, {s['top_head']}, {s['top_share']:.2f} against "
             f"{s['top_even']:.2f} even)")
    losses = (f"beyond its training length ({s['train_length']} tokens, up to token {s['end']}), "
              f"with a window of {s['window']}: recomputation {f['recompute']:.2f} nats, window "
              f"{f['window']:.2f} ({g['window']:+.2f}), window + {k} sinks at cache positions "
              f"{f[f'sinks {k}']:.2f} ({g[f'sinks {k}']:+.2f}), window + first {k} at text positions "
              f"{f[f'global {k}']:.2f} ({g[f'global {k}']:+.2f}), dense {f['dense']:.2f} "
              f"({g['dense']:+.2f})")
    if s["signature"]:
        verdict = ("the paper's signature holds: evicting the first tokens blows the window up, "
                   f"and keeping {k} of them (at cache positions) brings it back within "
                   f"{CLOSE} nats of recomputation")
    elif not s["window_blows_up"]:
        verdict = (f"the paper's signature is absent: the plain window stays within {BLOWUP} nats "
                   "of recomputation, so nothing needed the first tokens")
    else:
        verdict = (f"only half the signature: the window blows up, but {k} sinks do not bring it "
                   f"within {CLOSE} nats of recomputation")
    return f"{s['label']}: {heads}; {losses} — {verdict}."


# ------------------------------------------------------------------------------------ one call
FACTOR = 8  # the text is this many times the training length


def text_setting(task_spec: dict | None) -> tuple[int, bool] | None:
    """(training length, [BOS] first) of a model trained on the lm task's built-in grammar corpus
    (the text ``fresh_text`` draws afresh), or None for any other model."""
    if not task_spec or task_spec.get("name") != "lm" or task_spec.get("text"):
        return None
    block = int(task_spec.get("block") or 32)
    return block, bool(task_spec.get("bos", False))


def sink_report(model, tokenizer, task_spec: dict, *, window: int | None = None,
                factor: int = FACTOR, n_seq: int = 8, first: Sequence[int] = FIRST,
                label: str = "this model") -> dict:
    """Everything the sink view shows, from one model on fresh text: ``shares`` (per head, on
    sequences of the training length), ``curves`` (loss per position on ``factor`` x that length,
    every condition), ``segments`` (mean loss per span and condition), ``story`` (numbers and the
    sentence), ``settings``. window: default half the training length (the paper's cache is half
    its models' pretraining window). ValueError for a model not trained on the built-in text."""
    _decoder(model)
    setting = text_setting(task_spec)
    if setting is None:
        raise ValueError("attention sinks are measured on fresh text of the built-in grammar: "
                         "pick a language model trained on it (task lm, built-in corpus)")
    length, bos = setting
    window = window or max(1, length // 2)
    text = fresh_text(tokenizer, factor * length, n_seq, bos=bos)
    shares = sink_shares(model, text[:, :length], first)
    curves = streaming_losses(model, text, window, first)
    return {"shares": shares, "curves": curves, "segments": segment_means(curves, length, window),
            "story": sink_story(shares, curves, length, window, label),
            "settings": {"train_length": length, "window": window, "tokens": factor * length,
                         "sequences": n_seq, "bos": bos, "seed": FRESH_SEED, "first": list(first)}}


__all__ = ["BLOWUP", "CLOSE", "FIRST", "PAPER", "SINK", "condition_label", "condition_losses",
           "conditions", "fresh_text", "segment_means", "sink_report", "sink_shares", "sink_story",
           "streaming_losses", "text_setting"]
