"""Scoring a model: record its patterns on suitable probe inputs, then score every head.

    df = score_model(model, task)      # induction probe + the task's examples -> labelled table
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ...recording import record
from ...tasks.base import collate
from ...tokenize import SPECIAL_TOKENS
from .labels import scores_frame
from .scores import ANTECEDENT_SCORES, PATTERN, PATTERN_SCORES, antecedent_scores, pattern_scores

BOS_ID = SPECIAL_TOKENS.index("[BOS]")  # 2 in every tokenizer tfviz trains (imported: tokenizer.bos_id)
N_SPECIAL = len(SPECIAL_TOKENS)  # ids 0..6 are [PAD] [UNK] [BOS] [EOS] [MASK] [SEP] [CLS] there


# ---------------------------------------------------------------------------- probes, models
def induction_probe(vocab: int | Sequence[int], half: int = 16, batch: int = 8, seed: int = 0,
                    bos_id: int = BOS_ID, distinct: bool | None = None,
                    special_ids: Sequence[int] | None = None) -> torch.Tensor:
    """[BOS] r1..rn r1..rn (n = ``half``) for ``batch`` random sequences -> LongTensor
    [batch, 1 + 2*half], for any decoder (Olsson et al. 2022's repeated random tokens).

    vocab: the token ids to draw from, or a vocabulary size (then ids 0..vocab-1 except the
    ``special_ids``, default tfviz's 0..6; pass ``tokenizer.special_ids`` for an imported model).
    distinct: no repeats within a half (default: when vocab allows)."""
    if isinstance(vocab, int):
        skip = set(range(N_SPECIAL) if special_ids is None else (int(i) for i in special_ids))
        ids = [i for i in range(vocab) if i not in skip]
    else:
        ids = [int(v) for v in vocab]
    if len(ids) < 2 or half < 1:
        raise ValueError(f"need half >= 1 and at least 2 token ids to draw from, got {len(ids)}")
    distinct = len(ids) >= half if distinct is None else distinct
    if distinct and len(ids) < half:
        raise ValueError(f"cannot draw {half} distinct tokens from {len(ids)} ids")
    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor(ids)
    if distinct:
        rows = torch.stack([torch.randperm(len(ids), generator=g)[:half] for _ in range(batch)])
    else:
        rows = torch.randint(len(ids), (batch, half), generator=g)
    r = pool[rows]
    return torch.cat([torch.full((batch, 1), bos_id), r, r], dim=1)


def score_model(model, task=None, *, half: int = 16, batch: int = 8, seed: int = 0,
                n_examples: int = 64, split: str = "validation", local_k: int = 3,
                bos_id: int | None = None, tokenizer=None, texts: Sequence[Sequence[int]] | None = None,
                thresholds: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Record a decoder or encoder model's patterns on probe inputs and score every head.

    - induction probe (``induction_probe``, decoders): induction and duplicate_token; all the
      other pattern scores too when no task is given;
    - the task's first ``n_examples`` examples of ``split`` (if a task is given): previous-token,
      first-token, self, local and entropy on the text the model was trained on, and for coref
      the antecedent scores;
    - without a task, ``texts`` (token id sequences, e.g. the user's sentence) stand in for its
      examples: the pattern scores other than induction come from them (a model imported with
      no task has no training text to draw on).
    ``df.attrs["inputs"]`` says which input each score came from. Encoder-decoder models: score
    ``rec.stack_layers("decoder.blocks.{l}.attn.hook_pattern")`` with ``head_scores``.
    The probe's first token (``bos_id``) and the ids it never draws (special tokens) come from
    ``tokenizer`` (else the task's; else tfviz's [BOS] = 2 and ids 0..6)."""
    cfg = model.config
    if cfg.arch == "encoder-decoder":
        raise ValueError("score_model scores single-stack models; for an encoder-decoder pass "
                         "rec.stack_layers('decoder.blocks.{l}.attn.hook_pattern') to head_scores")
    if task is not None and getattr(task, "arch", cfg.arch) != cfg.arch:
        raise ValueError(f"the task is laid out for {task.arch} models, the model is {cfg.arch}")
    names = [PATTERN.format(l=layer) for layer in range(cfg.n_layers)]
    device = next(model.parameters()).device
    mask = dict(causal=cfg.causal, window=cfg.window, global_tokens=cfg.global_tokens,
                pad_id=cfg.pad_id, local_k=local_k)
    scores: dict[str, np.ndarray] = {}
    inputs: dict[str, str] = {}

    if cfg.causal or task is None:
        tok = tokenizer if tokenizer is not None else getattr(task, "tokenizer", None)
        if bos_id is None:
            bos_id = BOS_ID if tok is None else tok.bos_id if tok.bos_id is not None else tok.cls_id
            if bos_id is None:
                raise ValueError("the tokenizer has neither a bos nor a cls token: pass bos_id")
        n_vocab = cfg.vocab_size if tok is None else min(cfg.vocab_size, tok.vocab_size)
        half = max(1, min(half, (cfg.max_len - 1) // 2))
        probe = induction_probe(n_vocab, half, batch, seed, bos_id,
                                special_ids=None if tok is None else tok.special_ids)
        rec = record(model, probe.to(device), names=names)
        scores |= pattern_scores(rec.stack_layers(PATTERN), probe, **mask)
        what = f"induction probe: {batch} x [BOS] + {half} random tokens, repeated"
        inputs |= dict.fromkeys(scores, what)
    if task is None and texts:
        rows = [list(map(int, t)) for t in texts if len(t) >= 2]
        if not rows:
            raise ValueError("the text needs at least two tokens to score heads on")
        keep = [k for k in PATTERN_SCORES if k not in ("induction", "duplicate_token")]
        for ids in rows:  # one at a time: texts of different lengths, and no pad token needed
            rec = record(model, torch.tensor([ids], device=device), names=names)
            found = pattern_scores(rec.stack_layers(PATTERN), torch.tensor([ids]), **mask)
            for k in keep:
                scores.setdefault(f"_{k}", []).append(found[k])
        for k in keep:
            scores[k] = np.mean(scores.pop(f"_{k}"), axis=0)
        n_tok = sum(map(len, rows))
        inputs |= dict.fromkeys(keep, f"your text ({n_tok} tokens)" if len(rows) == 1
                                else f"{len(rows)} texts ({n_tok} tokens)")
    if task is not None:
        examples = task.examples(split)[:n_examples]
        b = collate(examples, task.tokenizer.pad_id)
        if b.src is not None:
            raise ValueError(f"task {task.name!r} has a source sequence; score_model needs a "
                             "decoder- or encoder-only task")
        rec = record(model, b.tokens.to(device), names=names)
        p = rec.stack_layers(PATTERN)
        found = pattern_scores(p, b.tokens, **mask)
        keep = [k for k in PATTERN_SCORES
                if not (k in ("induction", "duplicate_token") and k in scores)]
        if any("candidate_mentions" in e.meta for e in examples):
            found |= antecedent_scores(p, [e.meta for e in examples])
            keep += list(ANTECEDENT_SCORES)
        scores |= {k: found[k] for k in keep}
        inputs |= dict.fromkeys(keep, f"{len(examples)} {task.name} {split} examples")
    df = scores_frame(scores, thresholds)
    df.attrs["inputs"] = inputs
    return df
