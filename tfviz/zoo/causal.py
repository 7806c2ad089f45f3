"""Does the head the pattern shows matter? The zoo's head claims re-measured by switching heads off,
and the sentences that report them, written from the numbers (like ``why_story``).

    d = coref_effects(model, task)             # head sets off: held-out and fresh sentences
    coref_story(d)                             # the pronoun story, pattern vs effect, measured
    i = induction_effects(model_2l, model_1l, n_symbols)
    induction_story(i)
    python -m tfviz.zoo causal                 # the "Does each head matter?" sections of the cards

Which heads are tested is itself measured, never hand-picked: the pattern's heads (those whose
attention picks the referent over the other noun in more than ``PATTERN_CUT`` of the sentences,
the head-role table's antecedent rule), every head of the last layer, and the one and two heads
whose removal hurts the choice between the two nouns most. Both metrics are reported: the task's
own (the referent is the argmax over the whole vocabulary) and the pairwise one (the referent's
logit above the other noun's): they answer different questions ("is the answer still said?" vs
"is the right noun still chosen?").
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analysis.effects import coref_probe, head_effects, induction_repeat_probe, repeat_sequences, set_effects
from ..analysis.heads import THRESHOLDS
from ..analysis.interventions import head

COREF_TEST, COREF_FRESH, FRESH_SEED = 300, 192, 1      # the issue's sizes; tests draw other seeds
REPEAT_HALF, REPEAT_BATCH, REPEAT_SEED = 40, 32, 0     # [BOS] r r, |r| = 40, 32 sequences
PATTERN_CUT = THRESHOLDS["antecedent_max"]            # the antecedent label's cut-off (0.9)
KEEPS = 0.98        # pairwise accuracy at least this: "still prefers the referent"
MATTERS = 0.5       # a rise of the repeat loss by more than this many nats: the head matters
VOCAB, PAIR = "whole-vocabulary accuracy", "pairwise accuracy"
CATEGORY = "top word: a noun of the referent's category"
LOSS = "loss on the repeat"


def _heads(names) -> str:
    return " + ".join(names)


def _sites(names):
    return [head(int(n[1:n.index("H")]), int(n[n.index("H") + 1:])) for n in names]


# ------------------------------------------------------------------------------ coref
def coref_effects(model, task, n_test: int = COREF_TEST, n_fresh: int = COREF_FRESH,
                  seed: int = FRESH_SEED) -> dict:
    """Heads switched off (zeroed slices of ``attn.hook_z``) on the first ``n_test`` test sentences
    and ``n_fresh`` new ones (``CorefTask.fresh_examples(seed)``) -> {"heads": per head, pattern vs
    effect (held-out), "sets": one row per (head set, data), "pattern_heads",
    "effect_heads", "n": {data: sentences}}."""
    data = {"held-out": task.examples("test")[:n_test], "fresh": task.fresh_examples(n_fresh, seed)}
    probes = {k: coref_probe(v) for k, v in data.items()}
    for k, probe in probes.items():  # which of the task's categories the top word is a noun of
        probe.metrics[CATEGORY] = _category_metric(data[k], task.tokenizer)
    heads = head_effects(model, probes["held-out"])
    pick = "picks the referent over the other noun"
    pattern_heads = list(heads[heads[pick] > PATTERN_CUT].sort_values(pick, ascending=False)["name"])
    effect_heads = list(heads.sort_values([f"Δ {PAIR}", f"Δ {VOCAB}"])["name"][:2])
    last = model.config.n_layers - 1
    sets: dict[str, list] = {}
    if pattern_heads:
        sets[pattern_heads[0]] = pattern_heads[:1]
        if len(pattern_heads) > 1:
            sets[_heads(pattern_heads)] = pattern_heads
    sets[f"all of layer {last}"] = [f"L{last}H{h}" for h in range(model.config.n_heads)]
    sets[effect_heads[0]] = effect_heads[:1]
    sets[_heads(effect_heads)] = effect_heads
    frames = []
    for name, probe in probes.items():
        df = set_effects(model, probe, {k: _sites(v) for k, v in sets.items()})
        df.insert(1, "sentences", f"{name} ({len(data[name])})")
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)[["heads off", "sentences", VOCAB, PAIR, CATEGORY, "P(referent)"]]
    control = category_control(model, task, data["held-out"] + data["fresh"], sets[f"all of layer {last}"],
                               f"all of layer {last}")
    return {"heads": heads, "sets": out, "pattern_heads": pattern_heads,
            "effect_heads": effect_heads, "set_members": sets, "control": control,
            "n": {k: len(v) for k, v in data.items()}}


def _category_metric(examples, tokenizer):
    """f(logits): the share of sentences whose top word at the final pronoun is one of the nouns
    of the referent's category (``tfviz.tasks.coref.CATEGORIES``), whichever noun it is."""
    import torch

    from ..tasks.coref import CATEGORIES
    ids = {c: [tokenizer.token_to_id(n) for n in nouns] for c, (nouns, _, _) in CATEGORIES.items()}
    mask = torch.zeros(len(examples), tokenizer.vocab_size, dtype=torch.bool)
    for i, e in enumerate(examples):
        mask[i, ids[e.meta["category"]]] = True
    q = torch.tensor([e.meta["query_index"] for e in examples])

    def f(logits):
        rows = torch.arange(logits.shape[0])
        top = logits[rows, q.to(logits.device)].argmax(-1).cpu()
        return mask[rows.cpu(), top].float().mean()
    return f


OTHER_IN_CAT = "another noun of the referent's category, not in the sentence"
DISTRACTOR = "the other noun of the sentence"
DECIDING_CAT = "a noun of the deciding word's category"
IN_SENTENCE = "a noun of the sentence"


def neither_fits(task, examples) -> list:
    """``examples`` with the deciding word (predicate or part) replaced by one of a third category
    that fits neither noun (deterministic per sentence): the deciding word's category is then
    none of the sentence's nouns'. meta["category"] becomes the new word's category."""
    from ..tasks.base import Example
    from ..tasks.coref import CATEGORIES

    tok, out = task.tokenizer, []
    noun_cat = {n: c for c, (ns, _, _) in CATEGORIES.items() for n in ns}
    for e in examples:
        at, cat = e.meta.get("attribute_index"), e.meta.get("category")
        if at is None:
            continue
        nouns = tok.tokens_of([e.tokens[i] for i in e.meta["candidate_indices"]])
        taken = {noun_cat[n] for n in nouns}
        is_part = e.meta["attribute"] in CATEGORIES[cat][2]
        third = sorted(c for c in CATEGORIES if c not in taken)
        c = third[sum(e.tokens) % len(third)]
        words = CATEGORIES[c][2 if is_part else 1]
        new = words[(sum(e.tokens) // len(third)) % len(words)]
        tokens = list(e.tokens)
        tokens[at] = tok.token_to_id(new)
        out.append(Example(tokens, list(e.targets), text=e.text, meta={**e.meta, "category": c, "attribute": new}))
    return out


def category_control(model, task, examples, last_layer: list[str], name: str = "the last layer") -> dict:
    """Issue 36's control of the coref story: what the model answers with its last layer off.
    On ``examples`` (the task's sentences): the share of top words that are ``OTHER_IN_CAT``
    (a noun of the referent's category the sentence does not name) and ``DISTRACTOR``. On the
    same sentences with the deciding word replaced by one that fits neither noun
    (``neither_fits``), the share that are ``DECIDING_CAT`` and ``IN_SENTENCE``, with every head
    on and with the last layer off. -> {"answers": DataFrame, "n": sentences, "n_neither": ...}."""
    from ..analysis.interventions import effect
    from ..tasks.coref import CATEGORIES

    tok = task.tokenizer
    cat_ids = {c: {tok.token_to_id(n) for n in ns} for c, (ns, _, _) in CATEGORIES.items()}
    variants = {"none": [], name: _sites(last_layer)}

    def shares(exs, rules):
        x, q = _padded(exs), torch.tensor([e.meta["query_index"] for e in exs])
        meta = [(e.meta["category"], {int(e.tokens[i]) for m in e.meta["candidate_mentions"] for i in m},
                 int(e.tokens[e.meta["candidate_indices"][1 - e.meta["referent"]]]) if e.meta.get("referent") is not None else None)
                 for e in exs]

        def metric(name):
            def f(logits):
                top = logits[torch.arange(logits.shape[0]), q.to(logits.device)].argmax(-1).cpu().tolist()
                return torch.tensor([float(rules[name](t, *m)) for t, m in zip(top, meta)]).mean()
            return f
        vals = effect(model, (x,), list(variants.values()), {k: metric(k) for k in rules}, reduce="mean")
        return vals  # [variant, rule]

    same = {OTHER_IN_CAT: lambda t, cat, named, other: t in cat_ids[cat] and t not in named,
            DISTRACTOR: lambda t, cat, named, other: t == other}
    third = {DECIDING_CAT: lambda t, cat, named, other: t in cat_ids[cat],
             IN_SENTENCE: lambda t, cat, named, other: t in named}
    moved = neither_fits(task, examples)
    a, b = shares(examples, same), shares(moved, third)
    rows = []
    for i, name in enumerate(variants):
        rows.append({"heads off": name, **{k: a[i, j] for j, k in enumerate(same)},
                     **{f"neither fits: {k}": b[i, j] for j, k in enumerate(third)}})
    return {"answers": pd.DataFrame(rows), "n": len(examples), "n_neither": len(moved),
            "off": list(variants)[1]}


def _row(d: dict, name: str, data: str) -> pd.Series:
    s = d["sets"]
    return s[(s["heads off"] == name) & s["sentences"].str.startswith(data)].iloc[0]


def _span(d: dict, name: str, col: str) -> str:
    a, b = (100 * _row(d, name, k)[col] for k in ("held-out", "fresh"))
    return f"{min(a, b):.0f}%" if round(a) == round(b) else f"{min(a, b):.0f}–{max(a, b):.0f}%"


def coref_checks(d: dict) -> dict[str, bool]:
    """The story's claims as booleans (tests re-measure them on fresh sentences):
    pattern_keeps_choice: with the pattern's heads off the referent still beats the other noun
    (pairwise >= KEEPS, held-out and fresh); pattern_moves_output: the whole-vocabulary accuracy
    falls by at least 5 points with them off; choice_elsewhere: the head whose removal hurts the
    choice most is not a pattern head and sits in an earlier layer; choice_needs_it: without it
    the pairwise accuracy is below KEEPS on both; category_before_last_layer: with the whole last
    layer off the top word is still a noun of the referent's category (>= KEEPS, both);
    category_first: ``category_first`` of the control (when measured)."""
    ph, eh = d["pattern_heads"], d["effect_heads"][0]
    if not ph:
        return {"pattern_heads": False}
    all_p = _heads(ph) if len(ph) > 1 else ph[0]
    layer = lambda n: int(n[1:n.index("H")])  # noqa: E731
    return {
        "pattern_keeps_choice": all(_row(d, all_p, k)[PAIR] >= KEEPS for k in ("held-out", "fresh")),
        "pattern_moves_output": all(_row(d, all_p, k)[VOCAB] <= 0.95 for k in ("held-out", "fresh")),
        "choice_elsewhere": eh not in ph and layer(eh) < min(layer(n) for n in ph),
        "choice_needs_it": all(_row(d, eh, k)[PAIR] < KEEPS for k in ("held-out", "fresh")),
        "category_before_last_layer": all(_row(d, _last(d), k)[CATEGORY] >= KEEPS for k in ("held-out", "fresh")),
        **({"category_first": category_first(d["control"])} if d.get("control") is not None else {}),
    }


def category_first(control: dict) -> bool:
    """The control's claim (issue 36): the layers before the last deliver the category, the last
    picks the sentence's noun — with the last layer off no answer is the other noun (<= 2%) and,
    where the deciding word fits neither noun, the answers are nouns of its category (>= KEEPS)
    and not nouns of the sentence (<= 2%)."""
    a, off = control["answers"].set_index("heads off"), control["off"]
    return bool(a.loc[off, DISTRACTOR] <= 0.02 and a.loc[off, f"neither fits: {DECIDING_CAT}"] >= KEEPS
                and a.loc[off, f"neither fits: {IN_SENTENCE}"] <= 0.02)


def _last(d: dict) -> str:
    return next(k for k in d["set_members"] if k.startswith("all of layer"))


def disagreements(heads: pd.DataFrame) -> pd.DataFrame:
    """Where pattern and effect disagree: heads whose pattern picks the referent (> PATTERN_CUT)
    while switching them off leaves the choice between the nouns (pairwise accuracy) within 1
    point, and heads whose pattern is at chance (< 0.6) while switching them off costs the choice
    more than 2 points."""
    pick = heads["picks the referent over the other noun"]
    dp = heads[f"Δ {PAIR}"]
    out = heads[((pick > PATTERN_CUT) & (dp > -0.01)) | ((pick < 0.6) & (dp < -0.02))].copy()
    out["disagreement"] = np.where(out["picks the referent over the other noun"] > PATTERN_CUT,
                                   "looks at the referent, the choice does not need it",
                                   "looks anywhere, the choice needs it")
    return out[["name", "picks the referent over the other noun", "weight on the referent",
                f"Δ {PAIR}", f"Δ {VOCAB}", "disagreement"]]


def coref_story(d: dict) -> str:
    """The pronoun story, written from ``coref_effects``' numbers."""
    heads, ph, eh = d["heads"].set_index("name"), d["pattern_heads"], d["effect_heads"]
    n = d["n"]
    pick = "picks the referent over the other noun"
    head_line = f"**Pattern vs effect (measured: heads switched off, {n['held-out']} held-out and " \
                f"{n['fresh']} new sentences):** "
    if not ph:
        return head_line + ("no head's pattern picks the referent over the other noun in more than "
                            f"{100 * PATTERN_CUT:.0f}% of the sentences.")
    shares = " and ".join(f"{100 * heads.loc[h, pick]:.0f}%" for h in ph)
    out = [head_line + f"the pattern points at {' and '.join(ph)}: from the final pronoun "
           f"{'they pick' if len(ph) > 1 else 'it picks'} the referent over the other noun in "
           f"{shares} of held-out sentences."]
    c = coref_checks(d)
    all_p = _heads(ph) if len(ph) > 1 else ph[0]
    for name in dict.fromkeys([ph[0], all_p]):
        r = _span(d, name, PAIR)
        out.append(f"With {name} off the model still prefers the referent to the other noun in "
                   f"{r} of sentences, but the referent is the top word over the whole vocabulary "
                   f"in only {_span(d, name, VOCAB)}.")
    last = _last(d)
    out.append(f"With {last} off: pairwise {_span(d, last, PAIR)}, whole vocabulary "
               f"{_span(d, last, VOCAB)} — yet the top word is a noun of the referent's category in "
               f"{_span(d, last, CATEGORY)}" + (": what is left knows the kind of thing the pronoun "
               "refers to, not yet which noun of that kind the sentence names." if c["category_before_last_layer"] else "."))
    e1, e2 = eh[0], _heads(eh)
    out.append(f"The choice between the two nouns depends most on {e1} (its pattern picks the "
               f"referent in {100 * heads.loc[e1, pick]:.0f}% of sentences): switched off, the "
               f"pairwise accuracy falls to {_span(d, e1, PAIR)}; with {e2} off, "
               f"{_span(d, e2, PAIR)}.")
    ctl = d.get("control")
    last_l = int(last.split()[-1])
    before = "layer 0" if last_l == 1 else f"layers 0–{last_l - 1}"
    if ctl is not None:
        a, off = ctl["answers"].set_index("heads off"), ctl["off"]
        nf = lambda k, v=off: 100 * a.loc[v, f"neither fits: {k}"]  # noqa: E731
        out.append(f"The control: with {last} off, {100 * a.loc[off, OTHER_IN_CAT]:.0f}% of the answers are "
                   f"another noun of the referent's category that the sentence does not name, and "
                   f"{100 * a.loc[off, DISTRACTOR]:.0f}% the other noun; in {ctl['n_neither']} sentences whose "
                   f"deciding word fits neither noun, {before} alone answers a noun of that word's category "
                   f"in {nf(DECIDING_CAT):.0f}% and a noun of the sentence in {nf(IN_SENTENCE):.0f}% (the whole "
                   f"model: {nf(DECIDING_CAT, 'none'):.0f}% and {nf(IN_SENTENCE, 'none'):.0f}%).")
    if c.get("category_first") and c["pattern_keeps_choice"]:
        out.append(f"So {before} delivers the category, read from the deciding word, and layer {last_l} "
                   "picks the noun of that category the sentence names. In this task the other noun is "
                   "always of another category, so the category alone already tells the two nouns apart: "
                   f"that is why {e1} off lowers the pairwise accuracy, and why the heads the pattern shows "
                   "can be switched off with the pairwise choice intact while the whole-vocabulary answer "
                   "drops. Attention is not explanation: where a head looks does not say whether the "
                   "answer depends on it.")
    elif c["pattern_keeps_choice"] and c["choice_elsewhere"]:
        out.append(f"So the heads the pattern shows are not needed for the choice between the two nouns; "
                   f"it depends on earlier heads, {e1} above all. Attention is not explanation: where a "
                   "head looks does not say whether the answer depends on it.")
    else:
        out.append("Here pattern and effect agree on which heads matter.")
    return " ".join(out)


# ------------------------------------------------------------------------------ agreement
# The pronoun task in which only the pronoun's link to a noun tells which noun is meant
# (``tfviz.tasks.agreement``): here the pattern can *be* the choice.
STILL_GUESSING = 0.65   # pairwise accuracy at most this: the model guesses between the two nouns
FLIPS = 0.8             # patched from the other-noun sentence, the answer flips in at least this share
ACCURATE = 0.95         # whole-vocabulary and pairwise accuracy of the unchanged model
FLIP = "answer flips to the other noun"


def _padded(examples) -> torch.Tensor:
    n = max(len(e.tokens) for e in examples)
    return torch.tensor([list(e.tokens) + [0] * (n - len(e.tokens)) for e in examples])


def flip_rates(model, task, examples, variants: dict[str, list[str]]) -> dict[str, float]:
    """Activation patching with the other noun meant: each sentence runs with the named heads'
    outputs (their slices of ``attn.hook_z``, every position) taken from the same sentence with
    the pronouns of the other number (``task.flipped``) -> name -> the share of sentences whose
    answer flips: the other noun's answer now above the referent's ("none": nothing patched)."""
    from ..analysis.effects import candidate_answers
    from ..analysis.interventions import effect, pairwise

    x = _padded(examples)
    xf = _padded([task.flipped(e) for e in examples])
    good, bad = candidate_answers(x, [e.meta for e in examples])
    q = torch.tensor([e.meta["query_index"] for e in examples])
    names = ["none", *variants]
    vals = effect(model, (x,), [[]] + [_sites(v) for v in variants.values()], pairwise(bad, good, q),
                  mode="patch", reference=(xf,))
    return dict(zip(names, map(float, vals)))


def agreement_effects(model, task, n_test: int = COREF_TEST, n_fresh: int = COREF_FRESH,
                      seed: int = FRESH_SEED) -> dict:
    """The agreement model's heads switched off and patched, on the first ``n_test`` test
    sentences (frames and noun pairs never trained on) and ``n_fresh`` new ones
    (``fresh_examples(seed)``) -> {"heads": per head, pattern vs effect (held-out), "sets": one row
    per (head set off, data), "patch": one row per (heads patched, data) with the share of
    answers that flip, "pattern_heads", "other_heads", "effect_heads", "baseline" (data ->
    metric -> value), "n"}."""
    data = {"held-out": task.examples("test")[:n_test], "fresh": task.fresh_examples(n_fresh, seed)}
    probes = {k: coref_probe(v) for k, v in data.items()}
    heads = head_effects(model, probes["held-out"])
    pick = "picks the referent over the other noun"
    pattern_heads = list(heads[heads[pick] > PATTERN_CUT].sort_values(pick, ascending=False)["name"])
    other_heads = [h for h in heads["name"] if h not in pattern_heads]
    effect_heads = list(heads.sort_values([f"Δ {PAIR}", f"Δ {VOCAB}"])["name"][:2])
    sets: dict[str, list] = {h: [h] for h in pattern_heads}
    if len(pattern_heads) > 1:
        sets[_heads(pattern_heads)] = pattern_heads
    if other_heads:
        sets["every other head"] = other_heads
    if effect_heads[0] not in sets:
        sets[effect_heads[0]] = effect_heads[:1]
    frames, patches, baseline = [], [], {}
    for name, probe in probes.items():
        label = f"{name} ({len(data[name])})"
        df = set_effects(model, probe, {k: _sites(v) for k, v in sets.items()})
        df.insert(1, "sentences", label)
        frames.append(df)
        baseline[name] = df.iloc[0][list(probe.metrics)].to_dict()
        rates = flip_rates(model, task, data[name], {k: v for k, v in sets.items()}
                           | {h: [h] for h in other_heads})
        patches.append(pd.DataFrame({"heads patched": list(rates), "sentences": label,
                                     FLIP: list(rates.values())}))
    return {"heads": heads, "sets": pd.concat(frames, ignore_index=True)[
                ["heads off", "sentences", VOCAB, PAIR, "P(referent)"]],
            "patch": pd.concat(patches, ignore_index=True), "pattern_heads": pattern_heads,
            "other_heads": other_heads, "effect_heads": effect_heads, "set_members": sets,
            "baseline": baseline, "n": {k: len(v) for k, v in data.items()}}


def _prow(d: dict, name: str, data: str) -> pd.Series:
    s = d["patch"]
    return s[(s["heads patched"] == name) & s["sentences"].str.startswith(data)].iloc[0]


def _pattern_set(d: dict) -> str:
    ph = d["pattern_heads"]
    return _heads(ph) if len(ph) > 1 else ph[0]


def agreement_checks(d: dict) -> dict[str, bool]:
    """The agreement story's claims as booleans, each on held-out and fresh sentences alike:
    accurate: whole-vocabulary and pairwise accuracy >= ACCURATE; pattern_is_choice: with the
    heads whose pattern picks the referent off, pairwise accuracy <= STILL_GUESSING; others_keep:
    with every other head off, pairwise >= KEEPS; patch_flips: those heads patched from the
    sentence with the other noun meant flip the answer in >= FLIPS of sentences."""
    if not d["pattern_heads"]:
        return {"pattern_heads": False}
    both = ("held-out", "fresh")
    ps = _pattern_set(d)
    out = {"accurate": all(min(d["baseline"][k][VOCAB], d["baseline"][k][PAIR]) >= ACCURATE for k in both),
           "pattern_is_choice": all(_row(d, ps, k)[PAIR] <= STILL_GUESSING for k in both),
           "patch_flips": all(_prow(d, ps, k)[FLIP] >= FLIPS for k in both)}
    if d["other_heads"]:
        out["others_keep"] = all(_row(d, "every other head", k)[PAIR] >= KEEPS for k in both)
    return out


def agreement_story(d: dict) -> str:
    """The agreement story, written from ``agreement_effects``' numbers."""
    heads, ph, n = d["heads"].set_index("name"), d["pattern_heads"], d["n"]
    pick = "picks the referent over the other noun"
    b = d["baseline"]
    span = lambda col: _span_of([b[k][col] for k in ("held-out", "fresh")])  # noqa: E731
    out = [f"**Pattern vs effect (measured: heads switched off and patched, {n['held-out']} held-out "
           f"and {n['fresh']} new sentences; both nouns of one kind, only the pronoun's number says "
           f"which is meant):** the model names the referent in {span(VOCAB)} of sentences (whole "
           f"vocabulary) and prefers it to the other noun in {span(PAIR)}."]
    if not ph:
        return " ".join(out + ["No head's pattern picks the referent over the other noun in more than "
                               f"{100 * PATTERN_CUT:.0f}% of the sentences."])
    ps, c = _pattern_set(d), agreement_checks(d)
    shares = " and ".join(f"{100 * heads.loc[h, pick]:.0f}%" for h in ph)
    out.append(f"The pattern points at {' and '.join(ph)}: from the final pronoun "
               f"{'they pick' if len(ph) > 1 else 'it picks'} the referent over the other noun in "
               f"{shares} of held-out sentences.")
    out.append(f"Switched off, the model prefers the referent in only {_span(d, ps, PAIR)} of "
               f"sentences (whole vocabulary: {_span(d, ps, VOCAB)})"
               + (" — it now guesses between the two nouns." if c["pattern_is_choice"] else "."))
    if d["other_heads"]:
        out.append(f"With every other head off instead ({', '.join(d['other_heads'])}), it still "
                   f"prefers the referent in {_span(d, 'every other head', PAIR)}.")
    flips = [_prow(d, ps, k)[FLIP] for k in ("held-out", "fresh")]
    others = d["patch"][d["patch"]["heads patched"].isin(d["other_heads"])][FLIP]
    out.append(f"Patching {ps}'s output from the same sentence with the other noun meant (the "
               f"pronouns of the other number) flips the answer in {_span_of(flips)} of sentences"
               + ("." if not len(others) else "; patching any other head flips none." if others.max() == 0
                  else f"; patching any other head flips at most {100 * others.max():.0f}%."))
    if c.get("pattern_is_choice") and c.get("patch_flips") and c.get("others_keep", True):
        out.append(f"Here the pattern is the choice: where {ps} looks decides which noun is said. "
                   "Attention is not always explanation — in this model it is, and switching the "
                   "head off shows it.")
    else:
        out.append("The pattern alone does not make the choice here (see the checks above).")
    return " ".join(out)


def _span_of(values) -> str:
    a, b = (100 * v for v in (min(values), max(values)))
    return f"{a:.0f}%" if round(a) == round(b) else f"{a:.0f}–{b:.0f}%"


def agreement_markdown(d: dict) -> str:
    lines = [SECTION, "", agreement_story(d).replace("**", ""), "",
             "Head sets switched off (zeroed outputs), both metrics:", ""]
    lines += _table(d["sets"], ["heads off", "sentences", VOCAB, PAIR, "P(referent)"], pct=(VOCAB, PAIR))
    lines += ["", "Heads patched from the same sentence with the other noun meant:", ""]
    lines += _table(d["patch"], ["heads patched", "sentences", FLIP], pct=(FLIP,))
    lines += ["", "Every head, pattern vs effect (held-out sentences):", ""]
    lines += _table(d["heads"], ["name", "picks the referent over the other noun", "weight on the referent",
                                 f"Δ {PAIR}", f"Δ {VOCAB}"])
    lines += ["", "Re-measure with `python -m tfviz.zoo causal`; the Attention explorer's Effects tab "
              "shows the same for any input.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ one sentence
def mission_effects(model, task, heads: list[str] | None = None, sentences=None) -> list[dict]:
    """The pronoun sentences (default: the task's mission sentences) with pattern and effect side
    by side, for a lesson or a page: per sentence, its text, tokens, query position, the two
    candidates (answer words and positions), every head's attention from the final pronoun
    ("pattern" [layer, head, k_pos]) and on each candidate ("weights": [layer, head] per
    candidate), and what the model answers at the query
    unchanged and with each of ``heads`` (default: every head) switched off, as (token,
    probability), with P(each candidate's answer)."""
    from ..analysis.effects import top_answers
    from ..analysis.interventions import effect, prob
    from ..recording import record

    cfg = model.config
    heads = heads or [f"L{l}H{h}" for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    tok = task.tokenizer
    out = []
    for ex in sentences if sentences is not None else task.mission_sentences():
        x = torch.tensor([list(ex.tokens)])
        q, m = ex.meta["query_index"], ex.meta
        rec = record(model, x, names=[f"blocks.{l}.attn.hook_pattern" for l in range(cfg.n_layers)])
        p = rec.stack_layers("blocks.{l}.attn.hook_pattern")[:, 0, :, q, :].float().numpy()  # [layer, head, k]
        ids = ([int(i) for i in m["answer_ids"]] if "answer_ids" in m
               else [int(x[0, c]) for c in m["candidate_indices"]])
        words = tok.tokens_of(ids)
        variants = [[]] + [_sites([h]) for h in heads]
        answers = top_answers(model, (x,), q, variants)
        probs = effect(model, (x,), variants, {w: prob(i, q) for w, i in zip(words, ids)})
        rows = []
        for name, (a, pa), pr in zip(["none", *heads], answers, probs):
            rows.append({"heads off": name, "answer": tok.tokens_of([a])[0], "P(answer)": pa,
                         **{f"P({w})": float(v) for w, v in zip(words, pr)}})
        out.append({"text": ex.text, "tokens": tok.tokens_of(list(ex.tokens)), "query": q,
                    "candidates": words, "referent": m.get("referent"),
                    "positions": [list(c) for c in m["candidate_mentions"]],
                    "weights": {w: p[:, :, list(c)].sum(-1) for w, c in zip(words, m["candidate_mentions"])},
                    "pattern": p,
                    "answers": pd.DataFrame(rows)})
    return out


def pronoun_contrast(coref_model, coref_task, agreement_model, agreement_task,
                     coref_effects_d: dict | None = None, agreement_effects_d: dict | None = None) -> dict:
    """Both pronoun stories side by side, for the Findings page and the lesson (UI-free): the
    shipped coref model (the pattern points at the noun, the choice is made elsewhere) and the
    agreement model (the pattern is the choice), each told by switching its pattern head off —
    on its mission sentence (what it answers then) and over held-out sentences (pairwise
    accuracy). Pass ``*_effects_d`` (``coref_effects`` / ``agreement_effects``) to reuse them.
    -> {"coref": side, "agreement": side}; side: head, sentence (``mission_effects``' first
    sentence), before / after ((token, probability) on the sentence), pairwise before / after
    (held-out), weight (the head's attention on the referent from the final pronoun), line (one
    sentence saying both), story (the model's full measured story)."""
    cd = coref_effects_d or coref_effects(coref_model, coref_task)
    ad = agreement_effects_d or agreement_effects(agreement_model, agreement_task)
    out = {}
    for key, model, task, d, story in (("coref", coref_model, coref_task, cd, coref_story),
                                       ("agreement", agreement_model, agreement_task, ad, agreement_story)):
        h = d["pattern_heads"][0] if d["pattern_heads"] else d["effect_heads"][0]
        s = mission_effects(model, task, [h])[0]
        a = s["answers"].set_index("heads off")
        ref = s["candidates"][s["referent"]]
        layer, head_ = int(h[1:h.index("H")]), int(h[h.index("H") + 1:])
        base, off = _row(d, "none", "held-out")[PAIR], _row(d, h, "held-out")[PAIR]
        side = {"head": h, "sentence": s, "referent": ref,
                "before": (a.loc["none", "answer"], float(a.loc["none", "P(answer)"])),
                "after": (a.loc[h, "answer"], float(a.loc[h, "P(answer)"])),
                "pairwise_before": float(base), "pairwise_after": float(off),
                "weight": float(s["weights"][ref][layer, head_]), "n": d["n"]["held-out"],
                "story": story(d)}
        side["line"] = (f"{h} puts {side['weight']:.2f} of the final pronoun's attention on "
                        f"“{ref}”. Switched off, the model answers “{side['after'][0]}” "
                        f"({side['after'][1]:.4g}; with every head on “{side['before'][0]}”, "
                        f"{side['before'][1]:.4g}) on this sentence, and over {side['n']} held-out "
                        f"sentences it prefers the referent to the other noun in "
                        f"{100 * off:.0f}% (with every head on {100 * base:.0f}%).")
        out[key] = side
    c, a = out["coref"], out["agreement"]
    out["summary"] = (
        f"Both models look from the pronoun to the noun it means. In the coref model, {c['head']}'s "
        f"pattern picks the referent, yet switched off the choice between the nouns holds "
        f"({100 * c['pairwise_after']:.0f}%): the pattern is not the choice. In the agreement model, "
        f"{a['head']}'s pattern picks it, and switched off the model "
        + ("guesses" if a["pairwise_after"] <= STILL_GUESSING else "still chooses")
        + f" ({100 * a['pairwise_after']:.0f}%): "
        + ("the pattern is the choice." if a["pairwise_after"] <= STILL_GUESSING else "not the choice either."))
    return out


# ------------------------------------------------------------------------------ induction
def induction_effects(model_2l, model_1l, n_symbols: int, half: int = REPEAT_HALF,
                      batch: int = REPEAT_BATCH, seed: int = REPEAT_SEED) -> dict:
    """[BOS] r r (|r| = ``half``, ``batch`` fresh sequences, ``seed``) through both models with
    heads off: per head (pattern vs effect) for each, and head sets of the 2-layer model: its
    strongest previous-token head, each single, each pair and all of the last layer's heads."""
    tokens = repeat_sequences(7 + n_symbols, half, batch, seed)
    probe = induction_repeat_probe(tokens)
    two, one = head_effects(model_2l, probe), head_effects(model_1l, probe)
    first = two[two["layer"] == 0]
    prev = first.sort_values("previous-token score", ascending=False)["name"].iloc[0]
    last = model_2l.config.n_layers - 1
    late = [f"L{last}H{h}" for h in range(model_2l.config.n_heads)]
    sets = {prev: [prev]}
    sets |= {h: [h] for h in late}
    sets |= {_heads(p): list(p) for p in itertools.combinations(late, 2)}
    sets[f"all of layer {last}"] = late
    df = set_effects(model_2l, probe, {k: _sites(v) for k, v in sets.items()})
    df.insert(1, "size", [0] + [len(v) for v in sets.values()])
    return {"2L": two, "1L": one, "sets": df, "previous_token_head": prev, "late": late,
            "chance": math.log(n_symbols), "half": half, "batch": batch, "seed": seed,
            "baseline_1l": one.attrs["baseline"][LOSS]}


def induction_checks(i: dict) -> dict[str, bool]:
    """previous_token_needed: without the previous-token head the repeat loss rises by more than
    MATTERS nats; late_redundant: no single last-layer head raises it by more than MATTERS...;
    late_together: ...but all of them together do; one_layer_none: no head of the 1-layer model
    changes its repeat loss by more than MATTERS."""
    s = i["sets"].set_index("heads off")[LOSS]
    base = s["none"]
    singles = [s[h] for h in i["late"]]
    return {"previous_token_needed": s[i["previous_token_head"]] - base > MATTERS,
            "late_redundant": max(singles) - base <= MATTERS,
            "late_together": s[next(k for k in s.index if k.startswith("all of layer"))] - base > MATTERS,
            "one_layer_none": bool((i["1L"][f"Δ {LOSS}"].abs() <= MATTERS).all())}


def induction_story(i: dict) -> str:
    """The induction story, written from ``induction_effects``' numbers."""
    s = i["sets"]
    by = s.set_index("heads off")[LOSS]
    base, prev = by["none"], i["previous_token_head"]
    singles = s[s["size"] == 1].iloc[1:]
    pairs, whole = s[s["size"] == 2], s[s["size"] == len(i["late"])]
    c = induction_checks(i)
    pt = i["2L"].set_index("name").loc[prev, "previous-token score"]
    out = [f"**Switching heads off (measured: [BOS] r r, |r| = {i['half']}, {i['batch']} fresh "
           f"sequences, seed {i['seed']}):** the 2-layer model's loss on the repeat is {base:.3f} nats "
           f"(chance {i['chance']:.2f})."]
    out.append(f"Without the previous-token head {prev} (previous-token score {pt:.2f}) it is "
               f"{by[prev]:.2f}" + (" — the head is necessary." if c["previous_token_needed"] else "."))
    out.append(f"Without any one layer-{i['late'][0][1]} induction head: {singles[LOSS].min():.3f}–"
               f"{singles[LOSS].max():.3f}; any two: {pairs[LOSS].min():.3f}–{pairs[LOSS].max():.3f}; "
               f"all {len(i['late'])} together: {whole[LOSS].iloc[0]:.2f}.")
    if c["late_redundant"] and c["late_together"]:
        out.append("The circuit is real and redundant across the last layer: each induction head "
                   "alone can be removed, not all of them.")
    d1 = i["1L"][f"Δ {LOSS}"]
    out.append(f"The 1-layer model's repeat loss is {i['baseline_1l']:.2f}; switching off any of its "
               f"heads changes it by {d1.abs().max():.2f} nats at most"
               + (" — no head matters, as there is no circuit to break." if c["one_layer_none"] else "."))
    return " ".join(out)


# ------------------------------------------------------------------------------ cards
SECTION = "## Does each head matter? (measured)"


def _table(df: pd.DataFrame, cols, pct=()) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df[cols].itertuples(index=False):
        lines.append("| " + " | ".join(f"{100 * v:.1f}%" if c in pct else (f"{v:.3f}" if isinstance(v, float) else str(v))
                                       for c, v in zip(cols, r)) + " |")
    return lines


def coref_markdown(d: dict) -> str:
    lines = [SECTION, "", coref_story(d).replace("**", ""), "",
             "Head sets switched off (zeroed outputs), both metrics:", ""]
    lines += _table(d["sets"], ["heads off", "sentences", VOCAB, PAIR, CATEGORY], pct=(VOCAB, PAIR, CATEGORY))
    if d.get("control") is not None:
        c = d["control"]
        lines += ["", f"The control: what the top word is ({c['n']} sentences; 'neither fits': the same "
                  f"sentences with the deciding word replaced by one that fits neither noun):", ""]
        cols = [x for x in c["answers"].columns if x != "heads off"]
        lines += _table(c["answers"], ["heads off", *cols], pct=tuple(cols))
    lines += ["", "Every head, pattern vs effect (held-out sentences):", ""]
    h = d["heads"]
    lines += _table(h, ["name", "picks the referent over the other noun", "weight on the referent",
                        f"Δ {PAIR}", f"Δ {VOCAB}"])
    lines += ["", "Re-measure with `python -m tfviz.zoo causal`; the Attention explorer's Effects tab "
              "shows the same for any input.", ""]
    return "\n".join(lines)


def induction_markdown(i: dict, which: str) -> str:
    lines = [SECTION, "", induction_story(i).replace("**", ""), ""]
    if which == "2L":
        lines += _table(i["sets"], ["heads off", LOSS, "accuracy on the repeat"], pct=("accuracy on the repeat",))
        lines.append("")
    lines += _table(i[which], ["name", "induction score", "previous-token score", f"Δ {LOSS}"])
    lines += ["", "Re-measure with `python -m tfviz.zoo causal`.", ""]
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """``text`` with its ``SECTION`` (up to the next "## " heading) replaced by ``section``, or
    with it added before "## Heads" (else at the end)."""
    lines = text.rstrip("\n").split("\n")
    if SECTION in lines:
        start = lines.index(SECTION)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        lines[start:end] = section.rstrip("\n").split("\n") + [""]
    elif "## Heads" in lines:
        at = lines.index("## Heads")
        lines[at:at] = section.rstrip("\n").split("\n") + [""]
    else:
        lines += [""] + section.rstrip("\n").split("\n")
    return "\n".join(lines).rstrip("\n") + "\n"


def write_sections(folder: str | Path, log=print) -> list[Path]:
    """Measure the coref and induction models in ``folder`` and write their cards' "Does each head
    matter?" section (NAME.md) and the README's. Models that are absent are skipped."""
    from ..train.checkpoint import load_checkpoint
    folder, written = Path(folder), []
    path = lambda n: folder / f"{n}.safetensors"  # noqa: E731
    sections = {}
    if path("coref").is_file():
        ck = load_checkpoint(path("coref"))
        sections["coref"] = coref_markdown(coref_effects(ck.model.eval(), ck.shared_task()))
    if path("agreement").is_file():
        ck = load_checkpoint(path("agreement"))
        sections["agreement"] = agreement_markdown(agreement_effects(ck.model.eval(), ck.shared_task()))
    if path("induction-2L").is_file() and path("induction-1L").is_file():
        two, one = load_checkpoint(path("induction-2L")), load_checkpoint(path("induction-1L"))
        i = induction_effects(two.model.eval(), one.model.eval(), int(two.task["n_symbols"]))
        sections["induction-2L"], sections["induction-1L"] = induction_markdown(i, "2L"), induction_markdown(i, "1L")
    readme = [SECTION, ""]
    for name, section in sections.items():
        md = folder / f"{name}.md"
        if md.is_file():
            md.write_text(replace_section(md.read_text(), section))
            written.append(md)
            log(f"wrote {md}")
        if name != "induction-1L":  # the story covers both induction models
            readme += [f"### {name}", "", section.split("\n")[2], ""]
    md = folder / "README.md"
    if md.is_file() and sections:
        md.write_text(replace_section(md.read_text(), "\n".join(readme)))
        written.append(md)
    return written


__all__ = ["SECTION", "agreement_checks", "agreement_effects", "agreement_markdown", "agreement_story",
           "flip_rates", "mission_effects", "pronoun_contrast", "coref_checks", "coref_effects", "coref_markdown", "coref_story", "disagreements",
           "induction_checks", "induction_effects", "induction_markdown", "induction_story",
           "replace_section", "write_sections"]
