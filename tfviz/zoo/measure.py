"""The measurements behind every zoo card, each on a fixed sample so a re-run reproduces it.

    m = measure(ckpt)          # {"kind", "sample", "metrics": {name: float | None}, "heads", "finding"}
    compare(card_metrics, m["metrics"])   # -> rows (key, card, now, tolerance, ok)

metrics are flat ``name -> float`` (None = cannot be measured, e.g. a learned table at 4x):
    coref        accuracy, loss (test split), head.L{l}H{h}.antecedent_max/_top/antecedent (test
                 split), mission.s{1,2}.{pronoun,query}.{law,application} (the largest weight any
                 head puts on that noun from that pronoun position)
    induction    loss_repeat, accuracy_repeat (test split: the tokens the induction rule
                 predicts), head.L{l}H{h}.induction / .prev_token (induction probe: 32 x [BOS] +
                 16 random tokens, repeated; seed 0), max_induction; on fresh inputs outside the
                 training ranges (``heldout_conditions``): heldout.{condition}.loss_repeat /
                 .accuracy_repeat / .max_induction, and beyond.loss_repeat / .accuracy_repeat
                 (every repeated token at a position the training sequences never reached)
    positional   loss@{n} for n = 1x, 1.5x, 2x, 3x, 4x the training length (validation split
                 packed into 4096-token batches, ``tfviz.analysis.positional.extrapolation_table``)
    translate    accuracy (whole sentence), loss (test split), align.L{l}H{h} / align_reordered...
                 (share of target adjective/noun tokens whose argmax cross-attention is the aligned
                 source word; "reordered": only adjective-noun phrases, where the order flips)
    mlm          accuracy (masked-token), loss (test split)
    lm           loss, accuracy, ppl (validation and test), kv_bytes_per_token (a real KV cache)
    norm         loss, accuracy (validation, test, and fresh grammar sentences of another seed,
                 ``fresh_lm_batch``); from the recorded training history: spikes, largest_rise,
                 peak_loss_late (the highest logged training loss after ``NORM_EARLY`` steps),
                 grad.L{l} (block l's gradient norm before clipping, mean over the logged steps up
                 to ``NORM_EARLY``), grad_first_over_last (layer 0's over the last layer's)
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..analysis import THRESHOLDS, pronoun_probe, score_model
from ..analysis.cost import kv_cache_bytes
from ..analysis.induction import floor_halves, floor_table, generalisation, pool_positions, position_curve
from ..analysis.positional import extrapolation_table, sequence_metrics
from ..model.hooks import layer_template
from ..recording import record
from ..tasks.base import IGNORE, collate
from ..tasks.translate import ADJECTIVES, NOUNS
from .published import MEASURES as PUBLISHED

PATTERN = layer_template("attn.hook_pattern")
CROSS = layer_template("cross_attn.hook_pattern", "decoder")
INDUCTION_PROBE = dict(half=16, batch=32, seed=0)
HELDOUT_BATCH = 64  # fresh sequences per held-out induction condition
HELDOUT_SEED = 1    # the card's; tests draw other seeds
POS_FACTORS = (1, 1.5, 2, 3, 4)
POS_TOKENS = 4096
MISSION_MIN_WEIGHT = 0.5  # "mostly": more than half of the head's attention on the noun
CANDIDATES = ("law", "application")

def head_key(layer: int, head: int) -> str:
    return f"L{layer}H{head}"


def _heads(df: pd.DataFrame, scores: tuple[str, ...]) -> list[dict]:
    """One entry per head: layer, head, label and the named scores."""
    out = []
    for row in df.to_dict("records"):
        out.append({"layer": int(row["layer"]), "head": int(row["head"]), "label": row["label"],
                    **{k: _num(row[k]) for k in scores}})
    return out


def _num(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


# ------------------------------------------------------------------------------------- coref
def mission_probe(model, task) -> pd.DataFrame:
    """Where the pronoun of each mission sentence attends, per head: one row per
    (sentence 1|2, position "pronoun" (in the sentence) | "query" (the repeated pronoun at the
    end, which sees the whole sentence), layer, head) with q_pos and the weight on every mention
    of "law" and of "application" (``tfviz.analysis.pronoun_probe``)."""
    frames = []
    for s, ex in enumerate(task.mission_sentences(), 1):
        rec = record(model, torch.tensor([ex.tokens]),
                     names=[PATTERN.format(l=l) for l in range(model.config.n_layers)])
        p = rec.stack_layers(PATTERN)[:, 0]  # [layer, head, q_pos, k_pos]
        cands = dict(zip(CANDIDATES, ex.meta["candidate_mentions"]))
        for position in ("pronoun", "query"):
            q = ex.meta[f"{position}_index"]
            df = pronoun_probe(p, q, cands)
            df.insert(0, "q_pos", q)
            df.insert(0, "position", position)
            df.insert(0, "sentence", s)
            frames.append(df)
    return pd.concat(frames, ignore_index=True)


def law_and_application(probe: pd.DataFrame, sentence: int = 1, position: str = "query") -> dict:
    """The head with most weight on "law" and the one with most on "application" at one pronoun
    position; ``holds``: two different heads, each with more than half its weight there."""
    d = probe[(probe["sentence"] == sentence) & (probe["position"] == position)]
    out = {"sentence": sentence, "position": position}
    for noun in CANDIDATES:
        r = d.loc[d[noun].idxmax()]
        out[noun] = {"layer": int(r["layer"]), "head": int(r["head"]), "weight": float(r[noun])}
    law, app = out["law"], out["application"]
    out["holds"] = bool((law["layer"], law["head"]) != (app["layer"], app["head"])
                        and min(law["weight"], app["weight"]) > MISSION_MIN_WEIGHT)
    return out


def _coref(ckpt, task) -> dict:
    model, n = ckpt.model, len(task.examples("test"))
    ev = task.evaluate(model, "test", max_examples=n)
    df = score_model(model, task, split="test", n_examples=n)
    metrics: dict[str, float | None] = {"accuracy": ev["accuracy"], "loss": ev["loss"]}
    for r in df.to_dict("records"):
        for k in ("antecedent_max", "antecedent_top", "antecedent"):
            metrics[f"head.{head_key(r['layer'], r['head'])}.{k}"] = _num(r[k])
    probe = mission_probe(model, task)
    for (s, pos), g in probe.groupby(["sentence", "position"]):
        for noun in CANDIDATES:
            metrics[f"mission.s{s}.{pos}.{noun}"] = float(g[noun].max())
    best = df.loc[df["antecedent_max"].idxmax()]
    finding = {
        "antecedent_head": {"layer": int(best["layer"]), "head": int(best["head"]),
                            "antecedent_max": float(best["antecedent_max"]),
                            "antecedent_top": float(best["antecedent_top"]),
                            "antecedent": float(best["antecedent"])},
        "mission": [law_and_application(probe, s, pos) for s in (1, 2) for pos in ("query", "pronoun")
                    if not (s == 1 and pos == "pronoun")],
        "mission_table": probe.round(4).to_dict("records"),
        "note": "Sentence 1's in-sentence 'its' cannot see 'application' (it comes later; the "
                "decoder is causal), so sentence 1 is read at the repeated pronoun at the end.",
    }
    return {"sample": f"coref test split ({n} sentences, held-out noun/attribute pairs) and the "
                      "two mission sentences",
            "metrics": metrics, "finding": finding,
            "heads": _heads(df, ("antecedent_max", "antecedent_top", "antecedent", "prev_token_top",
                                 "first_token", "entropy_norm"))}


# ------------------------------------------------------------------------------------- agreement
def _agreement(ckpt, task) -> dict:
    """The agreement model: accuracy over the whole vocabulary and between the two nouns (test
    split: frames and pairs never trained on), every head's antecedent scores, the mission
    sentences' answers, and the causal claims (``causal.agreement_effects``: the pattern heads
    switched off and patched, on held-out and fresh sentences)."""
    from .causal import FLIP, PAIR, VOCAB, agreement_checks, agreement_effects, mission_effects

    model, test = ckpt.model, task.examples("test")
    ev = task.evaluate(model, "test", max_examples=len(test))
    df = score_model(model, task, split="test", n_examples=len(test))
    from ..analysis.effects import coref_probe
    from ..analysis.interventions import effect
    probe = coref_probe(test)
    base = dict(zip(probe.metrics, effect(model, probe.inputs, [[]], probe.metrics)[0]))
    metrics: dict[str, float | None] = {"accuracy": ev["accuracy"], "loss": ev["loss"],
                                        "pairwise_accuracy": float(base[PAIR])}
    for r in df.to_dict("records"):
        for k in ("antecedent_max", "antecedent_top", "antecedent"):
            metrics[f"head.{head_key(r['layer'], r['head'])}.{k}"] = _num(r[k])
    d = agreement_effects(model, task)
    for data in ("held-out", "fresh"):
        key = data.replace("-", "")
        for name in d["set_members"]:
            row = d["sets"][(d["sets"]["heads off"] == name) & d["sets"]["sentences"].str.startswith(data)].iloc[0]
            metrics[f"off.{name}.{key}.pairwise_accuracy"] = float(row[PAIR])
            metrics[f"off.{name}.{key}.vocab_accuracy"] = float(row[VOCAB])
        for r in d["patch"][d["patch"]["sentences"].str.startswith(data)].to_dict("records"):
            metrics[f"patch.{r['heads patched']}.{key}.flips"] = float(r[FLIP])
    ph = d["pattern_heads"]
    mission = mission_effects(model, task, ph[:1] or None)
    rows = []
    for i, s in enumerate(mission, 1):
        a = s["answers"]
        ref = s["candidates"][s["referent"]]
        metrics[f"mission.s{i}.P({ref})"] = float(a.iloc[0][f"P({ref})"])
        for name in ph[:1]:
            layer, h = int(name[1:name.index("H")]), int(name[name.index("H") + 1:])
            metrics[f"mission.s{i}.{name}.weight"] = float(s["weights"][ref][layer, h])
            off = a[a["heads off"] == name].iloc[0]
            metrics[f"mission.s{i}.{name}_off.P({ref})"] = float(off[f"P({ref})"])
        rows.append({"sentence": i, "text": s["text"], "referent": ref,
                     "answers": a.round(4).to_dict("records")})
    finding = {"pattern_heads": ph, "other_heads": d["other_heads"], "effect_heads": d["effect_heads"],
               "checks": agreement_checks(d), "n": d["n"], "mission": rows,
               "note": "Both nouns are of one kind and every predicate fits both; the pronoun's "
                       "number (it / its vs they / their) is the only clue. The answer is the "
                       "referent's singular form."}
    return {"sample": f"agreement test split ({len(test)} sentences: frames and noun pairs never "
                      f"trained on) for accuracy and head scores; the first {d['n']['held-out']} of "
                      f"them and {d['n']['fresh']} fresh sentences (seed 1) for heads switched off "
                      "and patched; the two mission sentences",
            "metrics": metrics, "finding": finding,
            "heads": _heads(df, ("antecedent_max", "antecedent_top", "antecedent", "prev_token_top",
                                 "first_token", "entropy_norm"))}


# ------------------------------------------------------------------------------------- induction
def induction_scores(model) -> pd.DataFrame:
    """Head scores on the induction probe (``INDUCTION_PROBE``): induction, prev_token, ..."""
    return score_model(model, **INDUCTION_PROBE)


def heldout_conditions(max_len: int) -> list[dict]:
    """The fresh inputs the induction models are judged on: each fills the model's whole length
    (``max_len`` - 1 tokens after [BOS]) and leaves the training ranges (the zoo's task: at most
    64 tokens, segments of 2-16 tokens, 2-3 occurrences; ``test_zoo`` checks that they do)."""
    n = max_len - 1
    half = n // 2
    return [
        {"name": f"r r ({half}+{half})", "length": 2 * half, "segment": half, "repeats": 2},
        {"name": "24 tokens x4", "length": n, "segment": 24, "repeats": 4},
        {"name": "40 tokens x3", "length": n, "segment": 40, "repeats": 3},
        {"name": "6 tokens x8", "length": n, "segment": 6, "repeats": 8},
        {"name": "3 segments of 12, x2 each", "length": n, "segment": 12, "repeats": 2,
         "segments": 3},
        {"name": "8 tokens x2 in filler", "length": n, "segment": 8, "repeats": 2},
    ]


def _induction(ckpt, task) -> dict:
    model, n = ckpt.model, len(task.examples("test"))
    ev = task.evaluate(model, "test", max_examples=n)
    df = induction_scores(model)
    metrics = {"loss_repeat": ev["loss_repeat"], "accuracy_repeat": ev["accuracy_repeat"]}
    for r in df.to_dict("records"):
        for k in ("induction", "prev_token"):
            metrics[f"head.{head_key(r['layer'], r['head'])}.{k}"] = _num(r[k])
    metrics["max_induction"] = float(df["induction"].max())
    vocab = task.tokenizer.vocab_size
    conditions = heldout_conditions(model.config.max_len)
    table, positions = generalisation(model, vocab, conditions, HELDOUT_BATCH, HELDOUT_SEED)
    for r in table.to_dict("records"):
        for k in ("loss_repeat", "accuracy_repeat", "max_induction"):
            metrics[f"heldout.{r['name']}.{k}"] = float(r[k])
    L = train_length_of(ckpt)
    pooled = pool_positions(list(positions.values()))
    beyond = pooled["repeat"].copy()
    beyond[:, :L] = False  # queries at positions >= L: never seen in training
    metrics["beyond.loss_repeat"] = float(pooled["loss"][beyond].mean())
    metrics["beyond.accuracy_repeat"] = float(pooled["correct"][beyond].mean())
    curve = position_curve(pooled)
    floor = floor_table(model, vocab, floor_halves(model.config.max_len), HELDOUT_BATCH, HELDOUT_SEED)
    for r in floor.to_dict("records"):
        for k in ("loss", "floor", "ambiguous_loss"):
            metrics[f"floor.r{r['half']}.{k}"] = float(r[k])
    finding = {
        "induction_heads": [head_key(r["layer"], r["head"]) for r in df.to_dict("records")
                            if r["induction"] > THRESHOLDS["induction"]],
        "previous_token_heads": [head_key(r["layer"], r["head"]) for r in df.to_dict("records")
                                 if r["prev_token_top"] > THRESHOLDS["prev_token_top"]],
        "train_length": L, "max_len": model.config.max_len, "heldout_seed": HELDOUT_SEED,
        "chance": math.log(int(task.params["n_symbols"])),
        "heldout": table.round(4).to_dict("records"),
        "floor": floor.round(4).to_dict("records"),
        "curve": {"position": curve["position"].tolist(),
                  "loss_repeat": [_num(round(x, 4)) for x in curve["loss_repeat"]],
                  "accuracy_repeat": [_num(round(x, 4)) for x in curve["accuracy_repeat"]],
                  "n_repeat": curve["n_repeat"].tolist()},
    }
    return {"sample": f"induction test split ({n} sequences, the training distribution) for the "
                      f"repeat loss; {len(conditions)} held-out conditions x {HELDOUT_BATCH} fresh "
                      f"sequences of {model.config.max_len - 1} tokens (seed {HELDOUT_SEED}) for "
                      "loss, accuracy and induction score beyond the training ranges; the "
                      "induction probe (32 x [BOS] + 16 random tokens, repeated, seed 0) for head "
                      f"scores; {HELDOUT_BATCH} fresh [BOS] r r per |r| with r drawn with replacement "
                      f"(seed {HELDOUT_SEED}) for the loss beside the copier's floor",
            "metrics": metrics, "finding": finding,
            "heads": _heads(df, ("induction", "prev_token", "prev_token_top", "duplicate_token",
                                 "first_token"))}


# ------------------------------------------------------------------------------------- positional
def pos_lengths(train_length: int) -> list[int]:
    return [int(round(f * train_length)) for f in POS_FACTORS]


def extrapolation(checkpoints, train_length: int) -> pd.DataFrame:
    """The positional family's loss at 1x..4x ``train_length``: ``extrapolation_table`` of
    (name, checkpoint) pairs (the caller holds shared models' locks)."""
    return extrapolation_table(checkpoints, pos_lengths(train_length), n_tokens=POS_TOKENS,
                               split="validation")


def train_length_of(ckpt) -> int:
    """The longest training sequence, in tokens ([BOS] included)."""
    extra = ckpt.meta.get("extra") or {}
    if "train_length" in extra:
        return int(extra["train_length"])
    return max(len(e.tokens) for e in ckpt.shared_task().examples("train"))


def _positional(ckpt, task) -> dict:
    L = train_length_of(ckpt)
    df = extrapolation([(ckpt.path.stem, ckpt)], L)
    metrics = {f"loss@{int(r['length'])}": _num(r["loss"]) for r in df.to_dict("records")}
    notes = sorted({n for n in df["note"] if n})
    first, last = metrics[f"loss@{L}"], metrics[f"loss@{4 * L}"]
    finding = {"train_length": L, "lengths": [int(x) for x in df["length"]],
               "loss": [_num(x) for x in df["loss"]], "note": "; ".join(notes),
               "growth_4x": None if first is None or last is None else last - first}
    return {"sample": f"validation split packed into {POS_TOKENS}-token batches of each length",
            "metrics": metrics, "finding": finding, "heads": []}


# ------------------------------------------------------------------------------------- translate
def alignment_targets(example) -> list[tuple[int, int, bool]]:
    """(query position, aligned source position, reordered?) for every target adjective or noun
    of a translate example (``meta["alignment"]``); reordered = inside 'Det Adj Noun'."""
    words = example.text.split()
    out = []
    for (i, _), (src, q) in zip(example.meta["word_alignment"], example.meta["alignment"]):
        w = words[i]
        if w in ADJECTIVES or w in NOUNS:
            reordered = w in ADJECTIVES or (i > 0 and words[i - 1] in ADJECTIVES)
            out.append((int(q), int(src), reordered))
    return out


def cross_attention(model, examples) -> np.ndarray:
    """Decoder cross-attention of a batch: [layer, batch, head, tgt_pos, src_pos] (teacher forced)."""
    b = collate(examples)
    names = [CROSS.format(l=l) for l in range(model.config.n_layers)]
    return record(model, b.src, b.tokens, names=names).stack_layers(CROSS).numpy()


def alignment_shares(model, examples, batch_size: int = 128) -> dict[str, np.ndarray]:
    """{"all": [layer, head], "reordered": [layer, head]}: share of target adjective/noun tokens
    whose argmax cross-attention (over source positions) is the aligned source word."""
    hits = {"all": 0.0, "reordered": 0.0}
    counts = {"all": 0, "reordered": 0}
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        p = cross_attention(model, chunk)
        top = p.argmax(-1)  # [layer, batch, head, tgt_pos]
        for b, ex in enumerate(chunk):
            for q, src, reordered in alignment_targets(ex):
                hit = (top[:, b, :, q] == src).astype(float)
                for k in ("all", "reordered") if reordered else ("all",):
                    hits[k] = hits[k] + hit
                    counts[k] += 1
    return {k: hits[k] / max(counts[k], 1) for k in hits} | {"counts": counts}


def _translate(ckpt, task) -> dict:
    model, test = ckpt.model, task.examples("test")
    ev = task.evaluate(model, "test", max_examples=len(test))
    shares = alignment_shares(model, test)
    metrics: dict[str, float | None] = {"accuracy": ev["accuracy"], "loss": ev["loss"]}
    L, H = shares["all"].shape
    for kind, key in (("all", "align"), ("reordered", "align_reordered")):
        for l in range(L):
            for h in range(H):
                metrics[f"{key}.{head_key(l, h)}"] = float(shares[kind][l, h])
    best = {}
    for kind in ("all", "reordered"):
        l, h = np.unravel_index(int(np.argmax(shares[kind])), shares[kind].shape)
        best[kind] = {"layer": int(l), "head": int(h), "share": float(shares[kind][l, h])}
    metrics["align.best"] = best["all"]["share"]
    metrics["align_reordered.best"] = best["reordered"]["share"]
    heads = [{"layer": l, "head": h, "label": "cross-attention", "align": float(shares["all"][l, h]),
              "align_reordered": float(shares["reordered"][l, h])}
             for l in range(L) for h in range(H)]
    return {"sample": f"translate test split ({len(test)} sentences, each with an unseen "
                      f"adjective-noun pair; {shares['counts']['all']} target adjective/noun "
                      f"tokens, {shares['counts']['reordered']} in reordered phrases)",
            "metrics": metrics, "heads": heads,
            "finding": {"best_head": best["all"], "best_head_reordered": best["reordered"],
                        "tokens": shares["counts"]}}


# ------------------------------------------------------------------------------------- mlm, lm
def _label_heads(model, task) -> list[dict]:
    df = score_model(model, task, n_examples=64)
    return _heads(df, ("prev_token_top", "first_token", "self_token", "local", "entropy_norm"))


def majority_baseline(task, split: str = "test") -> float:
    """Accuracy of always answering the most frequent target token of the train split."""
    counts = Counter(t for e in task.examples("train") for t in e.targets if t != IGNORE)
    top = counts.most_common(1)[0][0]
    targets = [t for e in task.examples(split) for t in e.targets if t != IGNORE]
    return sum(t == top for t in targets) / len(targets)


def _mlm(ckpt, task) -> dict:
    n = len(task.examples("test"))
    ev = task.evaluate(ckpt.model, "test", max_examples=n)
    return {"sample": f"mlm test split ({n} sentences; accuracy over the chosen 15% of tokens)",
            "metrics": {"accuracy": ev["accuracy"], "loss": ev["loss"],
                        "accuracy_majority_baseline": majority_baseline(task)},
            "heads": _label_heads(ckpt.model, task), "finding": {}}


@torch.no_grad()
def kv_bytes_per_token(model, tokens: torch.Tensor) -> float:
    """Bytes the self-attention KV cache holds per cached position, from a real cache filled by
    one forward of ``tokens`` [1, pos]."""
    cache = model.new_cache()
    model.eval()
    model(tokens, cache=cache)
    return cache.nbytes / tokens.shape[1]


def _lm(ckpt, task) -> dict:
    model = ckpt.model
    metrics: dict[str, float | None] = {}
    for split, prefix in (("validation", "val"), ("test", "test")):
        ev = task.evaluate(model, split, max_examples=len(task.examples(split)))
        metrics |= {f"{prefix}_loss": ev["loss"], f"{prefix}_accuracy": ev["accuracy"],
                    f"{prefix}_ppl": math.exp(ev["loss"])}
    prompt = torch.tensor([task.examples("test")[0].tokens])
    metrics["kv_bytes_per_token"] = kv_bytes_per_token(model, prompt)
    c = model.config
    return {"sample": "lm validation and test splits (every window); KV cache of the first test "
                      f"window ({prompt.shape[1]} tokens, batch 1, float32)",
            "metrics": metrics, "heads": _label_heads(model, task),
            "finding": {"kv_bytes_per_token_formula": kv_cache_bytes(c.n_layers, c.n_kv_heads, c.d_head, 1),
                        "n_kv_heads": c.n_kv_heads, "n_heads": c.n_heads}}


NORM_EARLY = 50    # "early training": the logged steps up to this one
FRESH_SEED = 1     # fresh text: grammar sentences of another seed than the task's (0)
FRESH_TOKENS = 8192


def fresh_lm_batch(tokenizer, length: int, n_tokens: int = FRESH_TOKENS,
                   seed: int = FRESH_SEED) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh text the model never saw: sentences of the built-in grammar drawn with ``seed``,
    tokenized with the model's tokenizer, laid back to back and cut into ``n_tokens // length``
    windows of ``length`` tokens -> (tokens, targets) [batch, length] (targets: the next token)."""
    from ..tasks import grammar

    n_seq = max(1, n_tokens // length)
    need, n = n_seq * length + 1, 64
    while True:
        ids = tokenizer.encode_ids(" ".join(grammar.corpus(n, seed)))
        if len(ids) >= need:
            break
        n *= 2
    ids = torch.tensor(ids[:need])
    return ids[:-1].view(n_seq, length), ids[1:].view(n_seq, length)


def _norm(ckpt, task) -> dict:
    from ..analysis.compare import layer_grad_norms, loss_spikes

    model, h = ckpt.model, ckpt.history
    metrics: dict[str, float | None] = {}
    for split, prefix in (("validation", "val"), ("test", "test")):
        ev = task.evaluate(model, split, max_examples=len(task.examples(split)))
        metrics |= {f"{prefix}_loss": ev["loss"], f"{prefix}_accuracy": ev["accuracy"]}
    length = int(task.params["block"])
    loss, acc, n = sequence_metrics(model, *fresh_lm_batch(ckpt.tokenizer, length))
    metrics |= {"fresh_loss": loss, "fresh_accuracy": acc}
    spikes = loss_spikes(h)
    metrics["spikes"] = float(len(spikes))
    metrics["largest_rise"] = float(spikes["rise"].max()) if len(spikes) else 0.0
    late = [x["train_loss"] for x in h if x["step"] > NORM_EARLY and math.isfinite(x["train_loss"])]
    metrics["peak_loss_late"] = max(late) if late else None
    per = layer_grad_norms(h, until=NORM_EARLY)
    for r in per.itertuples():
        metrics[f"grad.L{r.layer}"] = float(r.norm)
    if len(per):
        metrics["grad_first_over_last"] = float(per["norm"].iloc[0] / per["norm"].iloc[-1])
    c = model.config
    return {"sample": f"lm validation and test splits (every window); {n} target tokens of fresh "
                      f"grammar sentences (seed {FRESH_SEED}, never trained on) in windows of "
                      f"{length}; the training history's loss spikes and per-layer gradient norms "
                      f"(logged steps up to {NORM_EARLY})",
            "metrics": metrics, "heads": _label_heads(model, task),
            "finding": {"norm": c.norm, "early_steps": NORM_EARLY,
                        "spikes": spikes.round(4).to_dict("records"),
                        "layer_grad_norms": per.round(5).to_dict("records"),
                        "train_loss": [(int(x["step"]), round(float(x["train_loss"]), 4)) for x in h
                                       if math.isfinite(x["train_loss"])]}}


MEASURES = {"coref": _coref, "agreement": _agreement, "induction": _induction, "positional": _positional,
            "translate": _translate, "mlm": _mlm, "lm": _lm, "norm": _norm,
            **PUBLISHED}  # sinks, phase (issue 33: tfviz.zoo.published)


def kind_of(ckpt) -> str:
    extra = ckpt.meta.get("extra") or {}
    card = extra.get("card") or {}
    kind = card.get("kind") or extra.get("kind")
    if kind not in MEASURES:
        raise ValueError(f"{ckpt.path}: not a zoo checkpoint (no known kind in its card)")
    return kind


def measure(ckpt, kind: str | None = None) -> dict:
    """Measure a loaded checkpoint (``tfviz.load_checkpoint``) as its zoo kind says."""
    kind = kind or kind_of(ckpt)
    ckpt.model.eval()
    out = MEASURES[kind](ckpt, ckpt.shared_task())
    return {"kind": kind, **out}


# ------------------------------------------------------------------------------------- comparing
def tolerance(key: str) -> tuple[str, float]:
    """("abs" | "rel", amount) allowed between a card's metric and a re-measurement: 1 point of
    accuracy, 0.05 for head scores and attention shares, 1% for losses, exact for bytes."""
    if key.startswith(("head.", "mission.", "align")) or key.endswith("max_induction"):
        return "abs", 0.05
    if "accuracy" in key:
        return "abs", 0.01
    if key.startswith("kv_bytes"):
        return "abs", 0.0
    return "rel", 0.01


def compare(card: dict[str, Any], now: dict[str, Any]) -> list[dict]:
    """Rows key, card, now, tolerance, ok for every metric of either side."""
    rows = []
    for key in sorted(set(card) | set(now)):
        a, b = card.get(key), now.get(key)
        how, tol = tolerance(key)
        if a is None or b is None:
            ok = a is None and b is None and key in card and key in now
        else:
            diff = abs(a - b)
            ok = diff <= (tol if how == "abs" else tol * max(abs(a), 1e-12)) + 1e-9
        rows.append({"key": key, "card": a, "now": b, "tolerance": f"{how} {tol:g}", "ok": bool(ok)})
    return rows
