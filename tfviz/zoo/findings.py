"""The findings the zoo demonstrates, as data: read from the cards, or re-measured live on the
shipped checkpoints (for the Findings page, the README and the tests). UI-free.

Claims (each a pure function of cards, so a test can fail when a rebuild loses the effect):
    coref_claim(card)                      a head -> "law", another -> "application" (mission s1)
                                           and an antecedent head right on >= 90% of test sentences
    induction_contrast(card_2l, card_1l)   2 layers: induction head + repeat loss far below
                                           chance on held-out inputs past the training length;
                                           1 layer: neither
    positional_ordering(cards)             loss growth from 1x to 4x the training length per scheme
    norm_contrast(card_pre, card_post)     post-norm unstable (loss spikes, a larger gradient in
                                           layer 0 early on, worse on fresh text), pre-norm stable
    compare_frame(cards)                   the shipped pairs that differ in one setting, measured
                                           side by side (the Findings page's Compare section)
Live helpers take a model; the caller holds the model's lock when it is shared (the app's).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analysis import THRESHOLDS
from ..analysis.explorer import role_line
from ..paths import zoo_dir
from ..recording import record
from .cards import POSITIONS, headline
from ..analysis.induction import (condition_probes, floor_halves, floor_table, pool_positions, position_curve,
                                 position_losses)
from .measure import (CANDIDATES, CROSS, HELDOUT_BATCH, HELDOUT_SEED, MISSION_MIN_WEIGHT, PATTERN,
                      alignment_targets, heldout_conditions, induction_scores)

SEEDS = {
    "coref": "Vaswani et al. 2017, Fig. 4 ('Attention is all you need'): in layer 5 of 6, "
             "'its' in 'The Law will never be perfect, but its application should be just' "
             "attends sharply to 'Law' and 'application' in two heads (5 and 6), "
             "'apparently involved in anaphora resolution'. Clark et al. 2019 find BERT heads "
             "whose top attention from a mention is its antecedent.",
    "agreement": "Jain & Wallace 2019, 'Attention is not explanation': attention weights often do "
                 "not say which inputs an answer depends on; Wiegreffe & Pinter 2019, 'Attention "
                 "is not not explanation': whether they do must be tested, not assumed — here by "
                 "switching a head off and by patching it from the sentence with the other noun "
                 "meant (Vig et al. 2020; Wang et al. 2022).",
    "induction": "Olsson et al. 2022, 'In-context learning and induction heads': a two-layer "
                 "attention-only model forms a previous-token head (layer 0) and an induction "
                 "head (layer 1) that attends to the token after the earlier occurrence of the "
                 "current one and copies it; one-layer attention-only models do not.",
    "positional": "Press et al. 2021, 'Train short, test long' (ALiBi): sinusoidal and learned "
                  "positions degrade past the training length (learned cannot even run there); "
                  "rotary degrades less than sinusoidal but still degrades, while ALiBi's linear "
                  "distance penalty keeps the loss flat far beyond the training length.",
    "translate": "Bahdanau et al. 2015: the decoder's attention over the source is a soft "
                 "alignment; in English->French the adjective-noun order flips ('black cat' -> "
                 "'chat noir') and the alignment crosses.",
    "norm": "'Transformers and LLMs — A Complete Guide', section 9.2; Xiong et al. 2020 ('On "
            "layer normalization in the Transformer architecture'): with the norm after each "
            "residual addition (post-norm, the original Transformer) training needs a learning-rate "
            "warmup and is unstable without one; with the norm before each sublayer (pre-norm) the "
            "gradients are well-behaved and warmup can be dropped.",
    "phase": "Olsson et al. 2022, 'In-context learning and induction heads', Argument 1: "
             "in-context learning (loss at token 500 minus token 50) appears abruptly in a narrow "
             "window early in training, the window in which induction heads form; one-layer "
             "models show neither.",
    "cost": "Self-attention costs O(n^2) in sequence length; a sliding window makes it O(n·w). "
            "GQA/MQA (Ainslie et al. 2023; Shazeer 2019) shrink the KV cache by sharing "
            "key/value heads.",
}
ANTECEDENT_THRESHOLD = 0.9  # >= 90% of test sentences
FAR_BELOW = 0.25            # "far below": repeat loss under a quarter of chance (ln symbols)


def zoo_path(name: str, folder: str | Path | None = None) -> Path:
    """The checkpoint of zoo model ``name`` in ``folder`` (default ``tfviz.paths.zoo_dir()``)."""
    return Path(folder or zoo_dir()) / f"{name}.safetensors"


# ------------------------------------------------------------------------------ claims (cards)
def coref_claim(card: dict) -> dict:
    """holds: test accuracy >= 95%, a head with its argmax on the referent in >= 90% of test
    sentences, and on mission sentence 1 (read at the final pronoun) one head with most of its
    weight on "law" and another on "application"."""
    m, f = card["metrics"], card["finding"]
    s1 = next(r for r in f["mission"] if r["sentence"] == 1 and r["position"] == "query")
    a = f["antecedent_head"]
    out = {"accuracy": m["accuracy"], "antecedent_head": a, "mission_s1": s1,
           "mission": f["mission"]}
    out["holds"] = bool(m["accuracy"] >= 0.95 and a["antecedent_max"] >= ANTECEDENT_THRESHOLD
                        and s1["holds"])
    return out


def induction_contrast(card_2l: dict, card_1l: dict) -> dict:
    """holds: on the test split and on every held-out condition (fresh sequences of the model's
    full length, segment lengths and repeat counts outside training), the 2-layer model has a head
    with induction score > 0.4 and a repeat loss under a quarter of chance (ln of the number of
    symbols), also at the positions past the longest training sequence; the 1-layer model has
    neither anywhere."""
    def side(card):
        m, f = card["metrics"], card["finding"]
        held = f["heldout"]
        return {"max_induction": m["max_induction"], "loss_repeat": m["loss_repeat"],
                "accuracy_repeat": m["accuracy_repeat"], "chance": f["chance"],
                "beyond_loss": m["beyond.loss_repeat"], "beyond_accuracy": m["beyond.accuracy_repeat"],
                "heldout_max_loss": max(r["loss_repeat"] for r in held),
                "heldout_min_loss": min(r["loss_repeat"] for r in held),
                "heldout_min_accuracy": min(r["accuracy_repeat"] for r in held),
                "heldout_max_accuracy": max(r["accuracy_repeat"] for r in held),
                "heldout_min_induction": min(r["max_induction"] for r in held),
                "heldout_max_induction": max(r["max_induction"] for r in held),
                "train_length": f["train_length"], "max_len": f["max_len"],
                "induction_heads": f["induction_heads"],
                "previous_token_heads": f["previous_token_heads"]}
    two, one = side(card_2l), side(card_1l)
    cut, far = THRESHOLDS["induction"], FAR_BELOW * two["chance"]
    holds = (two["max_induction"] > cut and two["heldout_min_induction"] > cut
             and max(two["loss_repeat"], two["heldout_max_loss"], two["beyond_loss"]) < far
             and one["max_induction"] <= cut and one["heldout_max_induction"] <= cut
             and min(one["loss_repeat"], one["heldout_min_loss"], one["beyond_loss"]) >= far)
    return {"2L": two, "1L": one, "holds": bool(holds)}


def heldout_frame(card_2l: dict, card_1l: dict) -> pd.DataFrame:
    """The held-out conditions side by side: condition, then loss / accuracy on the repeated
    tokens and best induction score for 2 layers and for 1 layer (from the cards)."""
    one = {r["name"]: r for r in card_1l["finding"]["heldout"]}
    rows = []
    for r in card_2l["finding"]["heldout"]:
        o = one.get(r["name"], {})
        rows.append({"condition": r["name"], "tokens": r["length"] + 1,
                     "2L loss": r["loss_repeat"], "2L accuracy": r["accuracy_repeat"],
                     "2L induction": r["max_induction"], "1L loss": o.get("loss_repeat", math.nan),
                     "1L accuracy": o.get("accuracy_repeat", math.nan),
                     "1L induction": o.get("max_induction", math.nan)})
    return pd.DataFrame(rows)


def extrapolation_frame(cards: dict[str, dict], *, required: bool = False) -> pd.DataFrame:
    """The positional family's measured curves from their cards: model, scheme, length, loss,
    note (one row per model and length; loss NaN where the model cannot run). With ``required``,
    a ValueError saying how to build the family when no card has it."""
    rows = []
    for name, c in cards.items():
        if c.get("family") != "positional":
            continue
        f = c["finding"]
        for n, loss in zip(f["lengths"], f["loss"]):
            rows.append((name, c["model"]["pos"], n, math.nan if loss is None else loss,
                         f["note"] if loss is None else ""))
    if required and not rows:
        raise ValueError("The positional family (pos-*) is missing: `python -m tfviz.zoo build`.")
    return pd.DataFrame(rows, columns=["model", "scheme", "length", "loss", "note"])


def positional_ordering(df: pd.DataFrame, train_length: int) -> pd.DataFrame:
    """Per scheme: loss at 1x and 4x the training length and the growth between them (NaN where
    the model cannot run at 4x), sorted by growth (learned last)."""
    rows = []
    for scheme, g in df.groupby("scheme", sort=False):
        at = dict(zip(g["length"], g["loss"]))
        l1, l4 = at.get(train_length, math.nan), at.get(4 * train_length, math.nan)
        rows.append({"scheme": scheme, "loss_1x": l1, "loss_4x": l4, "growth": l4 - l1,
                     "ratio": l4 / l1 if l1 else math.nan})
    out = pd.DataFrame(rows)
    return out.sort_values("growth", na_position="last", kind="stable").reset_index(drop=True)


def lm_family_frame(cards: dict[str, dict]) -> pd.DataFrame:
    """MHA / GQA / MQA language models: kv heads, validation loss, perplexity, KV bytes/token."""
    rows = [(n, c["model"]["n_heads"], c["model"]["n_kv_heads"], c["metrics"]["val_loss"],
             c["metrics"]["val_ppl"], c["metrics"]["kv_bytes_per_token"])
            for n, c in cards.items() if c.get("kind") == "lm"]
    return pd.DataFrame(rows, columns=["model", "n_heads", "n_kv_heads", "val_loss", "val_ppl",
                                       "kv_bytes_per_token"])


def norm_contrast(card_pre: dict, card_post: dict) -> dict:
    """Pre-norm vs post-norm trained identically (same seed, batches, learning rate, no warmup, no
    clipping). holds: the post-norm run's training loss spiked (>= 1 spike) and the pre-norm
    run's did not; post-norm's layer-0 gradient norm over the early steps is above pre-norm's;
    and the pre-norm model has the lower loss on fresh text (grammar sentences of another seed)."""
    def side(card):
        m, f = card["metrics"], card["finding"]
        per = f["layer_grad_norms"]
        return {"spikes": int(m["spikes"]), "largest_rise": m["largest_rise"],
                "spike_steps": [r["step"] for r in f["spikes"]],
                "fresh_loss": m["fresh_loss"], "fresh_accuracy": m["fresh_accuracy"],
                "val_loss": m["val_loss"], "peak_loss_late": m["peak_loss_late"],
                "grad_first": per[0]["norm"], "grad_last": per[-1]["norm"],
                "grad_layers": [r["norm"] for r in per], "early_steps": f["early_steps"],
                "lr": card["train"]["lr"], "warmup": card["train"]["warmup"],
                "n_layers": card["model"]["n_layers"]}
    pre, post = side(card_pre), side(card_post)
    holds = (post["spikes"] >= 1 and pre["spikes"] == 0 and post["grad_first"] > pre["grad_first"]
             and pre["fresh_loss"] < post["fresh_loss"])
    return {"pre": pre, "post": post, "holds": bool(holds)}


NORM_PAIR = ("norm-pre", "norm-post")
LM_KINDS = ("lm", "lm-gqa", "lm-mqa")


def compare_frame(cards: dict[str, dict]) -> pd.DataFrame:
    """Every shipped pair (or family) that differs in one setting, measured, from the cards:
    comparison, setting, model, value (what the model has: "rope", "post-norm", "2 layers"),
    measure, number. Comparisons whose models are not all shipped are left out."""
    rows = []

    def add(comparison, setting, name, value, measures):
        rows.extend((comparison, setting, name, value, k, v) for k, v in measures.items())

    pos = extrapolation_frame(cards)
    if len(pos):
        L = train_length(cards)
        for r in positional_ordering(pos, L).to_dict("records"):
            name = next(n for n, c in cards.items()
                        if c.get("family") == "positional" and c["model"]["pos"] == r["scheme"])
            add("positional family", "positional scheme", name, r["scheme"],
                {f"loss at {L} tokens": r["loss_1x"], f"loss at {4 * L} tokens": r["loss_4x"],
                 "growth 1x -> 4x": r["growth"]})
    if all(n in cards for n in LM_KINDS):
        for n in LM_KINDS:
            m, c = cards[n]["metrics"], cards[n]["model"]
            kind = "MHA" if c["n_kv_heads"] == c["n_heads"] else "MQA" if c["n_kv_heads"] == 1 else "GQA"
            add("MHA / GQA / MQA", "attention kind", n, f"{kind} ({c['n_kv_heads']} kv heads)",
                {"validation loss": m["val_loss"], "KV cache bytes per token": m["kv_bytes_per_token"]})
    if all(n in cards for n in NORM_PAIR):
        c = norm_contrast(cards[NORM_PAIR[0]], cards[NORM_PAIR[1]])
        for n, k in zip(NORM_PAIR, ("pre", "post")):
            s = c[k]
            add("pre-norm vs post-norm", "norm placement", n, f"{k}-norm",
                {"loss spikes": s["spikes"], "largest rise (nats)": s["largest_rise"],
                 f"layer 0 gradient norm (steps <= {s['early_steps']})": s["grad_first"],
                 f"layer {len(s['grad_layers']) - 1} gradient norm (steps <= {s['early_steps']})": s["grad_last"],
                 "loss on fresh text": s["fresh_loss"], "validation loss": s["val_loss"]})
    if "induction-2L" in cards and "induction-1L" in cards:
        c = induction_contrast(cards["induction-2L"], cards["induction-1L"])
        for n, k in (("induction-1L", "1L"), ("induction-2L", "2L")):
            s = c[k]
            add("1 layer vs 2 layers", "layers", n, f"{k[0]} layer{'s' if k == '2L' else ''}",
                {"repeat loss (test)": s["loss_repeat"], "repeat loss, held out (worst)": s["heldout_max_loss"],
                 "best induction score": s["max_induction"]})
    return pd.DataFrame(rows, columns=["comparison", "setting", "model", "value", "measure", "number"])


def norm_frames(cards: dict[str, dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The norm pair's cards as the Compare figures' frames: (curves: model, step, metric
    "train_loss", value — for ``viz.compare_curves``; bars: model, layer, norm, steps — the
    per-block gradient norm over the early steps, for ``viz.layer_grad_norm_bars``)."""
    curves, bars = [], []
    for n in NORM_PAIR:
        f = cards[n]["finding"]
        curves += [(n, s, "train_loss", v) for s, v in f["train_loss"]]
        bars += [(n, r["layer"], r["norm"], r["steps"]) for r in f["layer_grad_norms"]]
    return (pd.DataFrame(curves, columns=["model", "step", "metric", "value"]),
            pd.DataFrame(bars, columns=["model", "layer", "norm", "steps"]))


def norm_metrics(c: dict) -> list[tuple]:
    """The Findings page's pre/post-norm metrics: (label, value[, st.metric keywords]) each."""
    pre, post = c["pre"], c["post"]
    return [("loss spikes: post / pre", f"{post['spikes']} / {pre['spikes']}",
             dict(help="times the training loss rose more than 0.5 nats above its lowest so far")),
            (f"layer 0 gradient norm, steps <= {pre['early_steps']}: post / pre",
             f"{post['grad_first']:.2f} / {pre['grad_first']:.2f}"),
            ("loss on fresh text: post / pre", f"{post['fresh_loss']:.2f} / {pre['fresh_loss']:.2f}",
             dict(help="grammar sentences of another seed, never trained on"))]


def norm_sentence(c: dict) -> str:
    pre, post = c["pre"], c["post"]
    steps = ", ".join(map(str, post["spike_steps"])) or "none"
    return (f"**Measured** ({pre['n_layers']} layers, learning rate {pre['lr']:g} from step 1, no "
            f"warmup, no clipping, same seed and batches): post-norm's training loss spiked "
            f"{post['spikes']} time(s) (step {steps}; largest rise {post['largest_rise']:.2f} nats), "
            f"pre-norm's {pre['spikes']} time(s). Over the first {pre['early_steps']} steps layer 0's "
            f"gradient norm was {post['grad_first']:.3g} in post-norm vs {pre['grad_first']:.3g} in "
            f"pre-norm. On fresh text: loss {post['fresh_loss']:.3f} (post) vs "
            f"{pre['fresh_loss']:.3f} (pre). Claim holds: {c['holds']}.")


NORM_PAIR_INTRO = ("**Pre-norm vs post-norm**: the same 6-layer model, seed, batches and learning rate "
                   "from step 1 (no warmup); only where each norm sits differs.")
PAIRS_INTRO = ("**Every shipped pair or family that differs in one setting** (card); open any of them "
               "side by side on the Compare page.")


def summary_frame(cards: dict[str, dict]) -> pd.DataFrame:
    return pd.DataFrame([(n, c["task"]["name"], c["model"]["arch"], c["model"]["pos"],
                          c["train"]["steps"], c["build"]["train_seconds"], headline(c))
                         for n, c in cards.items()],
                        columns=["model", "task", "arch", "pos", "steps", "train s", "measured"])


# ------------------------------------------------------------------------------ live helpers
def mission_weights(model, task, sentence: int = 1, position: str = "query") -> dict:
    """The pronoun's attention row in every head for one mission sentence: weights
    [layer, head, k_pos], token strings, candidates {"law": [...], "application": [...]}, q_pos."""
    ex = task.mission_sentences()[sentence - 1]
    q = ex.meta[f"{position}_index"]
    rec = record(model, torch.tensor([ex.tokens]),
                 names=[PATTERN.format(l=l) for l in range(model.config.n_layers)])
    p = rec.stack_layers(PATTERN)[:, 0, :, q, :].numpy()  # [layer, head, k_pos]
    return {"weights": p, "tokens": task.tokenizer.tokens_of(ex.tokens), "q_pos": q,
            "candidates": dict(zip(("law", "application"), ex.meta["candidate_mentions"])),
            "text": ex.text}


def induction_frame(models: dict) -> pd.DataFrame:
    """Induction and previous-token scores of every head of each model (name -> model), on the
    zoo's fixed induction probe: model, layer, head, induction, prev_token, label."""
    frames = []
    for name, model in models.items():
        df = induction_scores(model)[["layer", "head", "induction", "prev_token", "label"]]
        df.insert(0, "model", name)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def translate_example(model, task, index: int = 0, layer: int | None = None,
                      head: int | None = None) -> dict:
    """Cross-attention of test sentence ``index`` ([tgt_pos, src_pos], one head or the mean over
    heads when ``head`` is None), token strings, and the expected alignment (tgt_pos, src_pos) of
    its target adjectives and nouns."""
    test = task.examples("test")
    if not 0 <= index < len(test):
        raise ValueError(f"index {index} is outside the test split (0..{len(test) - 1})")
    ex = test[index]
    layer = model.config.n_layers - 1 if layer is None else layer
    rec = record(model, torch.tensor([ex.src]), torch.tensor([ex.tokens]),
                 names=[CROSS.format(l=layer)])
    p = rec[CROSS.format(l=layer)][0].numpy()  # [head, tgt_pos, src_pos]
    p = p.mean(0) if head is None else p[head]
    tok = task.tokenizer
    return {"pattern": p, "src_tokens": tok.tokens_of(ex.src), "tgt_tokens": tok.tokens_of(ex.tokens),
            "alignment": [(q, s) for q, s, _ in alignment_targets(ex)], "text": ex.text,
            "target": ex.meta["target"]}


# ------------------------------------------------------------------------------ text
def _w(x: float) -> str:
    return f"{x:.2f}"


def findings_markdown(cards: dict[str, dict]) -> str:
    """The measured findings, in words and numbers, for checkpoints/README.md."""
    out = ["## Findings (measured by `python -m tfviz.zoo build`)", ""]
    if "coref" in cards:
        c = coref_claim(cards["coref"])
        a = c["antecedent_head"]
        out += ["### The \"it\" heads (coref)", ""]
        for r in c["mission"]:
            law, app = r["law"], r["application"]
            out.append(f"- Mission sentence {r['sentence']}, {POSITIONS[r['position']]}: "
                       f"L{law['layer']}H{law['head']} puts {_w(law['weight'])} of its attention on "
                       f"\"law\", L{app['layer']}H{app['head']} {_w(app['weight'])} on \"application\".")
        out += [f"- Antecedent head L{a['layer']}H{a['head']}: of the two candidate nouns it "
                f"attends most to the true referent in {100 * a['antecedent_max']:.1f}% of test "
                f"sentences (its overall argmax is the referent in {100 * a['antecedent_top']:.1f}%); "
                f"test accuracy {100 * c['accuracy']:.1f}%. Claim holds: {c['holds']}.", "",
                f"Seed: {SEEDS['coref']}", ""]
    if "induction-2L" in cards and "induction-1L" in cards:
        c = induction_contrast(cards["induction-2L"], cards["induction-1L"])
        two = c["2L"]
        out += ["### Induction heads: 2 layers vs 1", ""]
        for k in ("2L", "1L"):
            s = c[k]
            out.append(f"- {k}: max induction score {_w(s['max_induction'])} "
                       f"(heads > 0.4: {', '.join(s['induction_heads']) or 'none'}; previous-token "
                       f"heads: {', '.join(s['previous_token_heads']) or 'none'}); loss on the "
                       f"repeated tokens {s['loss_repeat']:.3f} on the test split, "
                       f"{s['beyond_loss']:.3f} from position {s['train_length']} on (no training "
                       f"sequence reaches it) "
                       f"(accuracy {100 * s['beyond_accuracy']:.1f}%); chance {s['chance']:.2f}.")
        out += ["", f"Held out (fresh sequences of {two['max_len'] - 1} tokens after [BOS], twice "
                f"the longest training sequence of {two['train_length']} tokens; segment lengths "
                "and repeat counts outside training):", "",
                "| condition | 2L loss | 2L accuracy | 2L induction | 1L loss | 1L accuracy | 1L induction |",
                "|---|---|---|---|---|---|---|"]
        for r in heldout_frame(cards["induction-2L"], cards["induction-1L"]).itertuples(index=False):
            out.append(f"| {r[0]} | {r[2]:.3f} | {100 * r[3]:.1f}% | {r[4]:.2f} | {r[5]:.3f} | "
                       f"{100 * r[6]:.1f}% | {r[7]:.2f} |")
        floors = [(k, cards[n]["finding"].get("floor")) for k, n in (("2L", "induction-2L"), ("1L", "induction-1L"))]
        if all(f for _, f in floors):
            out += ["", "Repeats inside the repeated part (fresh [BOS] r r, r drawn with replacement): "
                    "loss on the repeat vs the floor of a perfect copier of the first half's bigrams:", "",
                    "| model | " + " | ".join(f"r of {r['half']}" for r in floors[0][1]) + " |",
                    "|---|" + "---|" * len(floors[0][1])]
            out += [f"| {k} | " + " | ".join(f"{r['loss']:.3f}" for r in f) + " |" for k, f in floors]
            out += ["| floor | " + " | ".join(f"{r['floor']:.3f}" for r in floors[0][1]) + " |"]
            above = [r["half"] for r in floors[0][1] if r["loss"] - r["floor"] > NEAR_FLOOR]
            out += ["", (f"- The 2-layer model is more than {NEAR_FLOOR} nats above the floor at r of "
                         f"{', '.join(map(str, above))}: where a token had followed several tokens it "
                         "bets on one (see induction-2L.md, 'tried', for retrainings that reached the "
                         "floor and what they cost; the Train page's induction preset reaches it)."
                         if above else f"- The 2-layer model is within {NEAR_FLOOR} nats of the floor, "
                         "or below it, at every r.")]
        out += ["", f"- Contrast holds: {c['holds']}. Training sequences have random segments "
                "recurring at random offsets in random filler, so only 'copy what followed the "
                "earlier occurrence of this token' predicts the repeats (see induction-2L.md, "
                "'tried', for what failed).", "", f"Seed: {SEEDS['induction']}", ""]
    df = extrapolation_frame(cards)
    if len(df):
        L = next(c["finding"]["train_length"] for c in cards.values() if c.get("family") == "positional")
        lengths = sorted(df["length"].unique())
        out += [f"### Positional extrapolation (trained on {L} tokens)", "",
                "| scheme | " + " | ".join(f"loss@{n}" for n in lengths) + " | growth 1x->4x |",
                "|---|" + "---|" * (len(lengths) + 1)]
        order = positional_ordering(df, L)
        for r in order.to_dict("records"):
            g = df[df["scheme"] == r["scheme"]].set_index("length")["loss"]
            losses = ["n/a" if math.isnan(g.get(n, math.nan)) else f"{g[n]:.3f}" for n in lengths]
            growth = "n/a" if math.isnan(r["growth"]) else f"{r['growth']:+.3f}"
            out.append(f"| {r['scheme']} | " + " | ".join(losses) + f" | {growth} |")
        out += ["", positional_sentence(order, L).replace("**Measured:**", "Measured:"),
                "", "Growth = loss at 4x minus loss at 1x the training length (validation text "
                "packed into sequences of each length). A learned table has no vector past its "
                f"{L} positions, so it cannot run beyond the training length.", "",
                f"Seed: {SEEDS['positional']}", ""]
    if "translate" in cards:
        c = cards["translate"]
        b, br = c["finding"]["best_head"], c["finding"]["best_head_reordered"]
        out += ["### Cross-attention follows the reordering (translate)", "",
                f"- Exact-match test accuracy {100 * c['metrics']['accuracy']:.1f}% (every test sentence "
                "has an adjective-noun pair never seen in training).",
                f"- Cross-attention head L{b['layer']}H{b['head']} puts its argmax on the aligned "
                f"source word for {100 * b['share']:.1f}% of target adjectives/nouns; inside reordered "
                f"adjective-noun phrases, best head L{br['layer']}H{br['head']}: {100 * br['share']:.1f}%.",
                "", f"Seed: {SEEDS['translate']}", ""]
    lm = lm_family_frame(cards)
    if len(lm):
        out += ["### KV cache: MHA vs GQA vs MQA (lm)", "",
                "| model | kv heads | val loss | val ppl | KV bytes/token |", "|---|---|---|---|---|"]
        out += [f"| {r.model} | {r.n_kv_heads} of {r.n_heads} | {r.val_loss:.3f} | {r.val_ppl:.2f} | "
                f"{r.kv_bytes_per_token:.0f} |" for r in lm.itertuples()]
        out += ["", "KV bytes/token measured from a real cache (float32). Time and memory vs "
                "sequence length (O(n^2) vs a sliding window) are measured live on the Cost page.", ""]
    if all(n in cards for n in NORM_PAIR):
        c = norm_contrast(cards[NORM_PAIR[0]], cards[NORM_PAIR[1]])
        pre, post = c["pre"], c["post"]
        out += ["### Pre-norm vs post-norm (norm-pre, norm-post)", "",
                "| | loss spikes | largest rise | layer 0 grad (early) | last layer grad (early) "
                "| validation loss | fresh-text loss |", "|---|---|---|---|---|---|---|"]
        out += [f"| {k}-norm | {s['spikes']} | {s['largest_rise']:.2f} | {s['grad_first']:.3g} | "
                f"{s['grad_last']:.3g} | {s['val_loss']:.3f} | {s['fresh_loss']:.3f} |"
                for k, s in (("pre", pre), ("post", post))]
        out += ["", norm_sentence(c).replace("**Measured**", "Measured"), "",
                f"Seed: {SEEDS['norm']}", ""]
    cmp = compare_frame(cards)
    if len(cmp):
        out += ["### Compare: shipped pairs that differ in one setting", "",
                "| comparison | model | value | measure | number |", "|---|---|---|---|---|"]
        out += [f"| {r.comparison} | {r.model} | {r.value} | {r.measure} | "
                f"{'n/a' if math.isnan(r.number) else f'{r.number:.4g}'} |"
                for r in cmp.itertuples()]
        out += ["", "Open any of them side by side on the Compare page (same input, same axes).", ""]
    if "mlm" in cards:
        m = cards["mlm"]["metrics"]
        out += ["### Masked LM", "", f"- Masked-token accuracy {100 * m['accuracy']:.1f}% "
                f"(loss {m['loss']:.3f}) on the test split; always answering the most frequent "
                f"token scores {100 * m.get('accuracy_majority_baseline', float('nan')):.1f}%. The "
                "grammar draws nouns, adjectives and verbs at random, so many masked words cannot "
                "be known from context: the ceiling is far below 100%.", ""]
    return "\n".join(out)




# ------------------------------------------------------------------------------ page sentences
def strongest_heads(d: dict) -> dict:
    """From ``mission_weights``: for each candidate, the head putting most weight on it."""
    w = np.asarray(d["weights"])
    out = {}
    for noun, pos in d["candidates"].items():
        mass = w[:, :, list(pos)].sum(-1)  # [layer, head]
        l, h = np.unravel_index(int(mass.argmax()), mass.shape)
        out[noun] = {"layer": int(l), "head": int(h), "weight": float(mass[l, h])}
    return out


def coref_sentence(claim: dict) -> str:
    s1, a = claim["mission_s1"], claim["antecedent_head"]
    law, app = s1["law"], s1["application"]
    return (f"**Measured (card):** in *“The law will never be perfect, but its application should "
            f"be just.”*, read at the final *its*, head L{law['layer']}H{law['head']} puts "
            f"{law['weight']:.2f} of its attention on *law* and head L{app['layer']}H{app['head']} "
            f"{app['weight']:.2f} on *application* — the two-head picture of Vaswani et al.'s "
            f"Fig. 4. Head L{a['layer']}H{a['head']} attends to the true referent rather than the "
            f"other noun in {100 * a['antecedent_max']:.1f}% of unseen test sentences (its top key "
            f"overall is the referent in {100 * a['antecedent_top']:.1f}%). The in-sentence *its* "
            "of sentence 1 cannot see *application*: the decoder is causal and the noun comes later.")


def mission_paragraph(claim: dict, d: dict, live: dict, roles, sentence: int, position: str) -> str:
    """The Findings page's paragraph for the mission sentence and pronoun position the reader
    chose, from the live numbers (``mission_weights`` ``d``, ``strongest_heads`` ``live``) and
    each head's role on the task's sentences (``explorer.head_table`` ``roles``): which head puts
    most weight on each noun, whether that is a clean pick (more than half its attention, on a
    head whose role is not "diffuse", the two nouns picked by different heads), and the card's
    sentence-independent claim. Sentence 1 read at the final pronoun is the two-head picture."""
    from ..analysis.explorer import role_of

    where = ("the final pronoun (it sees the whole sentence)" if position == "query"
             else "the pronoun inside the sentence")
    parts, clean = [], {}
    for noun in CANDIDATES:
        h = live[noun]
        role = role_of(roles, h["layer"], h["head"]) if roles is not None else None
        clean[noun] = h["weight"] > MISSION_MIN_WEIGHT and role not in (None, "diffuse")
        parts.append(f"head L{h['layer']}H{h['head']} puts {h['weight']:.2f} of its attention on "
                     f"*{noun}*" + (f" (its role on the task's sentences: {role})" if role else ""))
    same = (live["law"]["layer"], live["law"]["head"]) == (live["application"]["layer"], live["application"]["head"])
    out = [f"**Measured (live):** in *“{d['text']}”*, read at {where}, " + "; ".join(parts) + "."]
    if all(clean.values()) and not same:
        out.append("Two heads, one per noun: the two-head picture of Vaswani et al.'s Fig. 4.")
    else:
        for noun in CANDIDATES:
            if not clean[noun]:
                h = live[noun]
                out.append(f"No head cleanly picks *{noun}* here: the best, L{h['layer']}H{h['head']}, "
                           f"puts {h['weight']:.2f} on it"
                           + (f" and is {role_of(roles, h['layer'], h['head'])} on the task's sentences."
                              if roles is not None and role_of(roles, h["layer"], h["head"]) else "."))
        if same:
            out.append("One head carries the most weight on both nouns.")
    if sentence == 1 and position == "pronoun":
        out.append("This *its* cannot see *application*: the decoder is causal and the noun comes later.")
    if sentence == 2:
        out.append("This sentence's final *it* could mean either noun: the task gives it no answer, so "
                   "only where the heads look can be measured here, not whether they choose.")
    a = claim["antecedent_head"]
    out.append(f"Over unseen test sentences (card), head L{a['layer']}H{a['head']} attends to the true "
               f"referent rather than the other noun in {100 * a['antecedent_max']:.1f}%.")
    return " ".join(out)


def induction_sentence(c: dict) -> str:
    two, one = c["2L"], c["1L"]
    return (f"**Measured (card):** on fresh sequences up to {two['max_len']} tokens — twice the "
            f"longest training sequence ({two['train_length']}) — with segment lengths and repeat "
            "counts the models never saw, the 2-layer model's loss on the repeated tokens stays "
            f"between {two['heldout_min_loss']:.3f} and {two['heldout_max_loss']:.3f} (chance: "
            f"{two['chance']:.2f}; accuracy at least {100 * two['heldout_min_accuracy']:.0f}%), and "
            f"its best head's induction score at least {two['heldout_min_induction']:.2f} (heads "
            f"above 0.4: {', '.join(two['induction_heads']) or 'none'}; previous-token heads: "
            f"{', '.join(two['previous_token_heads']) or 'none'}). The 1-layer model stays near "
            f"chance ({one['heldout_min_loss']:.2f}-{one['heldout_max_loss']:.2f}, best induction "
            f"score {one['heldout_max_induction']:.2f}): one layer cannot attend to the token "
            "*after* an earlier copy — that needs a previous-token head in an earlier layer whose "
            "output the induction head's keys read (K-composition).")


NEAR_FLOOR = 0.1  # nats: "near the floor" means at most this much above it


def floor_frame(models: dict, vocab: int, max_len: int, batch: int | None = None,
                seed: int | None = None) -> pd.DataFrame:
    """Live: each model's loss on the repeat of fresh [BOS] r r with r drawn with replacement,
    beside the copier's floor (``analysis.induction.floor_table`` at ``floor_halves(max_len)``;
    the card's batch and seed by default): model, half, loss, floor, ambiguous_loss,
    ambiguous_floor, n_ambiguous, n. The caller holds the models' locks."""
    frames = []
    for name, model in models.items():
        df = floor_table(model, vocab, floor_halves(max_len), batch or HELDOUT_BATCH,
                         HELDOUT_SEED if seed is None else seed)
        df.insert(0, "model", name)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def floor_sentence(df: pd.DataFrame, model: str, train_length: int | None = None) -> str:
    """``floor_frame``'s rows of ``model`` in words: its loss against the floor at each |r|,
    where it is near (within ``NEAR_FLOOR`` nats), below (it reads more than the last token to
    tell which earlier occurrence it is at) or above it, and on the positions whose token had
    more than one continuation."""
    g = df[df["model"] == model].sort_values("half")
    parts = [f"|r| = {r.half}: {r.loss:.3f} vs floor {r.floor:.3f}" for r in g.itertuples()]
    near = [r.half for r in g.itertuples() if r.loss - r.floor <= NEAR_FLOOR]
    below = [r.half for r in g.itertuples() if r.loss < r.floor]
    above = [r.half for r in g.itertuples() if r.loss - r.floor > NEAR_FLOOR]
    out = [f"**Repeats inside the repeated part (live; fresh [BOS] r r, r drawn with replacement, "
           f"{int(g['n'].iloc[0] // max(1, g['half'].iloc[0] - 1))} sequences per |r|):** the "
           f"{model} model's loss on the repeat — " + "; ".join(parts) + ". The floor is the loss "
           "of a perfect copier that, at each repeated token, splits its bet among the tokens that "
           "followed it in the first half, in proportion to how often each did."]
    if near:
        out.append(f"Near the floor (within {NEAR_FLOOR} nats) at |r| = {', '.join(map(str, near))}"
                   + (f"; below it at |r| = {', '.join(map(str, below))} — it also reads the token "
                      "before, which tells which earlier occurrence it is at, and a bigram copier "
                      "cannot" if below else "") + ".")
    if above:
        worst = g.loc[(g["loss"] - g["floor"]).idxmax()]
        out.append(f"Above it at |r| = {', '.join(map(str, above))} (worst: {worst['loss']:.3f} vs "
                   f"{worst['floor']:.3f} at |r| = {int(worst['half'])}; on the tokens with more than "
                   f"one continuation {worst['ambiguous_loss']:.3f} vs {worst['ambiguous_floor']:.3f})"
                   + (f"; [BOS] r r is {2 * int(worst['half']) + 1} tokens long there, the longest "
                      f"training sequence {train_length}." if train_length else "."))
    return " ".join(out)


def repeat_curves_note(max_len: int, train_length: int) -> str:
    """What a point of ``repeat_curves`` is, for the figure's caption."""
    return (f"Fresh random sequences of {max_len} tokens in which a segment recurs (lengths and "
            "repeat counts never trained on). Each point: the mean over the sequences whose token "
            "at that position recurs, predicting the token that followed its earlier occurrence. "
            "Right of the dashed line lie positions no training sequence reached (the longest "
            f"had {train_length} tokens).")


def repeat_curves(models: dict, vocab: int, max_len: int, condition: str | None = None,
                  batch: int | None = None, seed: int | None = None) -> pd.DataFrame:
    """Live: per-position loss and accuracy on the repeated tokens of fresh held-out sequences
    (one condition of ``heldout_conditions``, or all of them pooled when None) for each model
    (name -> model; the caller holds their locks): model, position, n_repeat, loss_repeat,
    accuracy_repeat, n_new, loss_new. ``POOLED`` is the same as None."""
    condition = None if condition == POOLED else condition
    conditions = heldout_conditions(max_len)
    names = [c["name"] for c in conditions]
    if condition is not None and condition not in names:
        raise ValueError(f"unknown condition {condition!r}; known: {', '.join(names)}")
    probes = condition_probes(vocab, conditions, batch or HELDOUT_BATCH,
                              HELDOUT_SEED if seed is None else seed)
    chosen = [probes[condition]] if condition else list(probes.values())
    frames = []
    for name, model in models.items():
        df = position_curve(pool_positions([position_losses(model, t) for t in chosen]))
        df.insert(0, "model", name)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def train_length(cards: dict[str, dict]) -> int:
    return next(c["finding"]["train_length"] for c in cards.values() if c.get("family") == "positional")


def positional_sentence(order: pd.DataFrame, train_length: int) -> str:
    runs = order[order["growth"].notna()]
    parts = [f"{r.scheme} {r.growth:+.2f}" for r in runs.itertuples()]
    cannot = [r.scheme for r in order.itertuples() if math.isnan(r.growth)]
    return (f"**Measured:** loss growth from {train_length} to {4 * train_length} tokens, least "
            f"first: {', '.join(parts)}." + (f" {', '.join(cannot)} cannot run past "
                                              f"{train_length} tokens (a learned table has no "
                                              "vector for later positions)." if cannot else ""))


def translate_sentence(card: dict) -> str:
    b, br = card["finding"]["best_head"], card["finding"]["best_head_reordered"]
    return (f"**Measured (card):** exact-match accuracy {100 * card['metrics']['accuracy']:.1f}% on "
            "test sentences whose adjective-noun pairs were never seen in training. Head "
            f"L{b['layer']}H{b['head']}'s argmax falls on the aligned source word for "
            f"{100 * b['share']:.1f}% of target adjectives and nouns; inside the reordered "
            f"adjective-noun phrases the best head (L{br['layer']}H{br['head']}) manages "
            f"{100 * br['share']:.1f}%. Red squares mark the expected alignment.")


__all__ = ["SEEDS", "condition_choices", "coref_claim", "coref_roles", "coref_sentence", "mission_paragraph",
           "extrapolation_frame", "findings_markdown", "floor_frame", "floor_sentence", "heldout_frame", "induction_contrast",
           "induction_frame", "induction_sentence", "lm_family_frame", "mission_weights",
           "positional_ordering", "positional_sentence", "repeat_curves", "repeat_curves_note",
           "strongest_heads", "summary_frame", "train_length", "translate_example", "translate_sentence",
           "zoo_path"]


def coref_metrics(claim: dict, live: dict) -> list[tuple]:
    """The Findings page's coref metrics: (label, value[, st.metric keyword arguments]) each —
    the card's test accuracy and antecedent head, and the heads ``live`` (``strongest_heads``)
    finds for "law" and "application"."""
    a = claim["antecedent_head"]
    return [("test accuracy (card)", f"{100 * claim['accuracy']:.1f}%"),
            (f"antecedent head L{a['layer']}H{a['head']} (card)", f"{100 * a['antecedent_max']:.1f}%",
             dict(help="share of test sentences where, of the two nouns, it attends most to the referent")),
            *[(f"→ {n}: L{live[n]['layer']}H{live[n]['head']} (live)", f"{live[n]['weight']:.2f}")
              for n in ("law", "application")]]


MISSION_SENTENCES = {1: "“… its application should be just.”", 2: "“… because it is too complex.”"}
PRONOUN_AT = {"query": "final (sees the whole sentence)", "pronoun": "in the sentence"}
POOLED = "all held-out conditions (pooled)"
REPEAT_VALUES = {"loss_repeat": "loss", "accuracy_repeat": "accuracy"}  # repeat_curves column -> label


def coref_roles(roles, live: dict) -> str:
    """The roles (``explorer.head_table``, on the task's own sentences) of the heads ``live``
    (``strongest_heads``) finds for "law" and "application", as markdown lines."""
    return ("Their roles on the task's own sentences (Attention explorer → Head roles):  \n"
            + "  \n".join(role_line(roles, live[n]["layer"], live[n]["head"]) for n in ("law", "application")))


def condition_choices(max_len: int) -> list[str]:
    """The held-out conditions ``repeat_curves`` takes, ``POOLED`` (all of them) first."""
    return [POOLED] + [c["name"] for c in heldout_conditions(max_len)]


def induction_metrics(contrast: dict) -> list[tuple]:
    """The Findings page's induction metrics for the 2- and the 1-layer model (``induction_contrast``):
    repeat loss past the training length against chance, and the largest induction score."""
    return [item for k in ("2L", "1L") for s in [contrast[k]] for item in (
        (f"{k}: repeat loss from position {s['train_length']} (card)", f"{s['beyond_loss']:.3f}",
         dict(delta=f"chance {s['chance']:.2f}", delta_color="off")),
        (f"{k}: max induction score (card)", f"{s['max_induction']:.2f}"))]
