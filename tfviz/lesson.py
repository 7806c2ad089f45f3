"""The lesson's words that depend on numbers (issue 32): the lecture's parts, and for each step a
"what to notice" sentence written from the numbers its view shows (``ui.lesson_steps``), for the
model, input and settings on screen — never a canned sentence. Each function takes the view's
``numbers`` dict and returns markdown; where a number says the effect is weak or absent, the
sentence says so.

Claims as checks (issue 42): a sentence that asserts something about the view ("related words end
up close", "the RNN's gradient fades most") is a ``Claim`` — a name, whether it ``holds`` on these
numbers, and the sentence of the branch taken, each branch with its numbers. A step with claims has
a ``<notice>_claims(numbers)`` function listed in ``CLAIMS`` (``claims(notice, numbers)``); its
notice is written from them, so the words can never say more than the check found.

Pure functions of plain numbers: no torch, no Streamlit (``tests/test_lesson.py`` checks them).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Claim:
    """One thing a step says about its view, checked on the view's numbers: ``name`` (stable:
    tests and the page refer to it), ``holds`` and ``text``, the sentence of the branch taken
    (both branches quote the numbers that decided it)."""
    name: str
    holds: bool
    text: str


def check(name: str, holds, yes: str, no: str) -> Claim:
    """The claim ``name``: ``yes`` when ``holds``, else ``no``."""
    return Claim(name, bool(holds), yes if holds else no)


CLAIMS: dict[str, Callable[[dict], list[Claim]]] = {}


def claims(notice: Callable | str, numbers: dict) -> list[Claim]:
    """The claims of the step whose notice is ``notice`` (a function of this module or its name),
    checked on ``numbers``; [] for a step that asserts nothing beyond its numbers."""
    name = notice if isinstance(notice, str) else notice.__name__
    return CLAIMS[name](numbers) if name in CLAIMS else []


def _claims_of(notice: str):
    def register(fn):
        CLAIMS[notice] = fn
        return fn
    return register

# The lecture's parts, in its order: each step names the part it teaches.
PARTS = {
    "tokens": "Tokens",
    "vectors": "From tokens to vectors",
    "order": "A bag of words",
    "rnn": "Reading in order: RNNs",
    "attention": "Attention: queries, keys, values",
    "heads": "Many heads",
    "block": "The transformer block: residual stream, layer norm, MLP, the next token",
    "decoder": "The decoder looks at the encoder: cross-attention",
    "it": "Reading attention maps: the heads that resolve “it”",
    "positions": "Positions: learned and sinusoidal",
    "rope": "Rotary positions (RoPE)",
    "masks": "Masks",
    "taxonomy": "A family tree: encoders, decoders, both",
    "bert": "BERT: masked-language modelling",
    "cost": "What attention costs",
}


def _w(x: float) -> str:
    return f"{x:.2f}"


def _g(x: float) -> str:
    return f"{x:.3g}"


def _d(x: float) -> str:
    """A difference to two decimals with its sign; one that rounds to zero is "+0.00", not "-0.00"."""
    return f"{round(x, 2) + 0.0:+.2f}"


def tokens(n: dict) -> str:
    r = n["rows"]
    c, w, b = r.get("char"), r.get("word"), r.get("bpe")
    parts = []
    if c:
        cu = (f", **{c['unknowns']}** of them unknown ([UNK]: characters the corpus never had)"
              if c.get("unknowns") else "")
        parts.append(f"characters give **{c['count']}** tokens{cu} from a vocabulary of {c['vocab_size']}")
    if w:
        unk = f", **{w['unknowns']}** of them unknown ([UNK])" if w["unknowns"] else ", none unknown"
        parts.append(f"words give **{w['count']}**{unk} (vocabulary {w['vocab_size']})")
    if b:
        parts.append(f"BPE gives **{b['count']}** ({n['chars'] / max(b['count'], 1):.1f} characters "
                     f"each, {b['unknowns']} unknown) from a vocabulary of {b['vocab_size']}")
    out = f"The text has {n['chars']} characters: " + "; ".join(parts) + "."
    if b and n.get("bpe_asked") and b["vocab_size"] < n["bpe_asked"]:
        out += (f" BPE was allowed {n['bpe_asked']} pieces but learned {b['vocab_size']}: the corpus "
                "ran out of pairs frequent enough to merge before the limit.")
    if w and b and w["unknowns"] > b["unknowns"]:
        out += " BPE cuts the words the word tokenizer does not know into pieces it does."
    return out


@_claims_of("onehot")
def onehot_claims(n: dict) -> list[Claim]:
    """"Related words end up close": the mean cosine of the pairs within a group above that of
    the pairs across groups (``n``: within, across, groups — ``ui.lesson_steps.group_cosines``).
    No claim when the words shown do not make both kinds of pair."""
    if n.get("within") is None or n.get("across") is None:
        return []
    groups = "; ".join(f"{g}: {', '.join(ws)}" for g, ws in n["groups"].items())
    w, a = n["within"], n["across"]
    return [check(
        "related words end up close", w > a,
        f"Related words end up closer here: pairs within a group ({groups}) average cosine "
        f"**{_w(w)}**, pairs across groups **{_w(a)}**" + (" — a small margin." if w - a < 0.05 else "."),
        f"Related words do **not** end up closer in these vectors: pairs within a group ({groups}) "
        f"average cosine **{_w(w)}**, pairs across groups **{_w(a)}**. Its vectors are no longer "
        "all at right angles, but its training did not place these groups apart; word2vec (next "
        "step) is trained for exactly that.")]


def onehot(n: dict) -> str:
    a, b = n["pair"]
    group = {w: g for g, ws in (n.get("groups") or {}).items() for w in ws}
    kin = ""
    if a in group and b in group:
        kin = (f", both in the {group[a]} group" if group[a] == group[b]
               else f", from the {group[a]} and {group[b]} groups")
    out = (f"All {n['n'] * (n['n'] - 1) // 2} one-hot pairs have cosine exactly **0**. In "
           f"{n['model']}'s learned vectors ({n['d']} numbers each) the same pairs range from "
           f"**{_w(n['lo'])}** to **{_w(n['hi'])}**; the closest are '{a}' and '{b}' ({_w(n['pair_cos'])}{kin}).")
    cs = onehot_claims(n)
    out += " " + cs[0].text if cs else (" These words do not make pairs within and across the step's "
                                        "groups, so whether related words end up close is not checked here.")
    if n.get("unknown"):
        out += f" Not in its vocabulary, left out: {', '.join(map(repr, n['unknown'][:6]))}."
    return out


@_claims_of("word2vec")
def word2vec_claims(n: dict) -> list[Claim]:
    """"Words used in the same places get similar vectors", on the built-in corpus's groups:
    within-group mean cosine above across-group (``within``, ``across``, ``groups``)."""
    if n.get("within") is None or n.get("across") is None:
        return []
    w, a = n["within"], n["across"]
    return [check("words of a group end up close", w > a,
                  f"Over the corpus's {n['groups']} groups, words of the same group average cosine "
                  f"**{_w(w)}**, words of different groups **{_w(a)}**.",
                  f"Over the corpus's {n['groups']} groups, words of the same group average cosine "
                  f"**{_w(w)}**, **not** above words of different groups (**{_w(a)}**): this run did "
                  "not learn the groups.")]


def word2vec(n: dict) -> str:
    near = ", ".join(f"'{w}' ({_w(c)})" for w, c in n["near"])
    out = (f"word2vec learned {n['words']} words × {n['dim']} numbers (its guessing loss fell from "
           f"{_w(n['loss'][0])} to {_w(n['loss'][1])}). Nearest to '{n['word']}': {near}.")
    if n["analogy"]:
        w, c = n["analogy"][0]
        verdict = "" if w == "queen" else " — not 'queen': the corpus is small, the analogy fails here"
        out += f" king − man + woman lands nearest '{w}' (cosine {_w(c)}){verdict}."
    return out + "".join(" " + c.text for c in word2vec_claims(n))


def bag(n: dict) -> str:
    if n["same_order"]:
        return "The two sentences are the same: type B with the words of A rearranged."
    if n["same"]:
        return (f"'{n['a']}' and '{n['b']}' give the same count for each of their {n['words']} words: "
                "**identical** bag-of-words vectors for two different sentences.")
    return (f"These two sentences differ in the words {', '.join(map(repr, n['differ'][:6]))}, so "
            "their bags differ too; rearrange the same words to see two sentences collide.")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _model_name(m: str) -> str:
    return {"rnn": "the RNN", "lstm": "the LSTM", "gru": "the GRU", "transformer": "the transformer",
            "gru-attention": "the GRU with attention"}.get(m, m)


FALLS = 0.05  # recall "falls with distance" when it loses more than 5 points from the nearest gap


@_claims_of("recall")
def recall_claims(n: dict) -> list[Claim]:
    """The step's "the further back, the harder" per recurrent model: its recall at the farthest
    gap more than ``FALLS`` below the nearest (``rows``: model -> (x0, y0, x1, y1))."""
    out = []
    for m, (x0, y0, x1, y1) in n["rows"].items():
        if m == "transformer":
            continue
        out.append(check(f"{m}: recall falls with distance", y1 < y0 - FALLS,
                         f"{_cap(_model_name(m))} loses {100 * (y0 - y1):.0f} points from gap {x0:g} to {x1:g}: "
                         "the further back, the harder.",
                         f"{_cap(_model_name(m))} does **not** fall with distance here ({100 * y0:.0f}% → "
                         f"{100 * y1:.0f}%): it carries the symbol across every gap measured."))
    return out


def recall(n: dict) -> str:
    parts = [f"{_model_name(m)} {100 * y0:.0f}% at {x0:g} → **{100 * y1:.0f}%** at {x1:g}"
             for m, (x0, y0, x1, y1) in n["rows"].items()]
    return (f"Recall on fresh sequences, from the nearest to the farthest gap: {'; '.join(parts)} "
            f"(chance {100 * n['chance']:.0f}%; trained up to a gap of {n['trained']})."
            + "".join(" " + c.text for c in recall_claims(n)))


FADED = 0.1  # the key gets less than a tenth of the gradient one step back: it has faded
NEAR_ZERO_LOSS = 0.01  # below this mean loss every gradient is small: compare shapes, not heights
_RANK = {"rnn": 0, "gru": 1, "lstm": 1, "transformer": 2}  # the textbook: most faded first


def _times(x: float) -> str:
    return f"{x:.2g}×" if x < 0.01 else f"{x:,.0f}×" if x >= 100 else f"{x:.2f}×"


@_claims_of("gradient")
def gradient_claims(n: dict) -> list[Claim]:
    """The vanishing gradient (issue 42): per stage (initialisation, trained), the textbook
    ordering — the RNN's gradient reaching the key fades most, the LSTM's less, the
    transformer's not at all (its key keeps at least ``FADED`` of the gradient one step back).
    ``n``: distance (steps back to the key), rows: stage -> model -> {key (key / one step back),
    per_step (the factor per step over the fillers), loss, near (the gradient one step back)}."""
    out = []
    for stage, rows in n["rows"].items():
        models = list(rows)
        by_fade = sorted(models, key=lambda m: rows[m]["key"])  # most faded first
        ranked = [m for m in models if m in _RANK]
        pairs = [(a, b) for a in ranked for b in ranked if _RANK[a] < _RANK[b]]
        attention_keeps = all(rows[m]["key"] >= FADED for m in ranked if _RANK[m] == 2)
        holds = attention_keeps and all(rows[a]["key"] < rows[b]["key"] for a, b in pairs)
        per = "; ".join(f"{_model_name(m)} **{_times(rows[m]['key'])}** (×{rows[m]['per_step']:.2f} per "
                        f"step, loss {_g(rows[m]['loss'])})" for m in models)
        words = stage_words(stage)
        said = f"{words[0].upper()}{words[1:]}, the key ({n['distance']} steps back) gets: {per}."
        faded = [m for m in models if rows[m]["key"] < FADED]
        out.append(check(
            f"textbook ordering, {stage}", holds,
            f"{said} The textbook ordering holds {words}: the RNN's signal fades most"
            + (", the LSTM's less" if "lstm" in models else "") + ", attention's not at all.",
            f"{said} The textbook ordering does **not** hold {words}: from most to least "
            f"faded it is {', '.join(_model_name(m) for m in by_fade)}"
            + (f", and the transformer's key gets under {FADED:g}× of its neighbour's" if not attention_keeps else "")
            + (f"; faded below {FADED:g}×: {', '.join(_model_name(m) for m in faded)}" if faded else "") + "."))
    return out


def gradient_numbers(summary) -> dict:
    """``gradient``'s numbers from ``longrange.through_time_summary``'s rows (a DataFrame)."""
    rows: dict = {}
    for r in summary.itertuples():
        rows.setdefault(str(r.stage), {})[str(r.model)] = {
            "key": float(r.key_over_near), "per_step": float(10 ** r.decay_per_step),
            "loss": float(r.loss), "near": float(r.near)}
    return {"distance": int(summary["key_steps_back"].iloc[0]), "rows": rows}


def stage_words(stage: str) -> str:
    return {"initialisation": "at initialisation", "trained": "after training"}.get(stage, stage)


def gradient(n: dict) -> str:
    out = ("Each number: the gradient of the answer's loss at the key divided by the gradient one "
           "step back from the question (1× = as strong as a neighbour's). "
           + " ".join(c.text for c in gradient_claims(n)))
    small = {m: r for m, r in n["rows"].get("trained", {}).items() if r["loss"] < NEAR_ZERO_LOSS}
    if small:
        out += (" Trained to a loss near zero, " + ", ".join(f"{_model_name(m)} has a gradient of only "
                f"{_g(r['near'])} one step back" for m, r in small.items())
                + ": every gradient is small, so compare the shape of each line, not its height.")
    return out


@_claims_of("bottleneck")
def bottleneck_claims(n: dict) -> list[Claim]:
    """The bottleneck: "attention removes the squeeze" — at the longest trained length every
    model that attends (``attends``) gets more whole outputs right than every one that does not —
    and "it still works one token longer" (``next``: at length + 1), the failure explained with
    the cross-attention's ``alignment`` (model -> {length: share of output positions whose
    strongest weight is on the source token to copy}) and ``next_tokens`` (token accuracy)."""
    L, at, nxt = n["trained"], n["at"], n.get("next") or {}
    att = [m for m in at if m in n.get("attends", [])]
    plain = [m for m in at if m not in att]
    if not att or not plain:
        return []
    name = lambda ms, d: ", ".join(f"{_model_name(m)} {100 * d[m]:.0f}%" for m in ms)  # noqa: E731
    out = [check("attention removes the squeeze", min(at[m] for m in att) > max(at[m] for m in plain),
                 f"At length {L} attention removes the squeeze: {name(att, at)} against {name(plain, at)} "
                 "without attention.",
                 f"At length {L} attention does **not** beat the single vector here: {name(att, at)} "
                 f"against {name(plain, at)} without attention.")]
    if nxt and all(m in nxt for m in at):
        fails = [m for m in att if nxt[m] < max(nxt[m2] for m2 in plain)]
        why = []
        for m in fails:
            a = n.get("alignment", {}).get(m, {})
            before = max((k for k in a if k <= L), default=None)
            after = min((k for k in a if k > L), default=None)
            tok = n.get("next_tokens", {}).get(m)
            line = f"{_model_name(m)} gets {100 * nxt[m]:.0f}% of whole outputs right at length {L + 1}"
            line += f" (but {100 * tok:.0f}% of single tokens)" if tok is not None else ""
            if before is not None and after is not None:
                line += (f"; its cross-attention points at the source token to copy at "
                         f"{100 * a[before]:.0f}% of output positions at length {before} and "
                         f"{100 * a[after]:.0f}% at {after}: past the lengths it trained on, its "
                         "attention no longer finds the right token, and one wrong token spoils the "
                         "whole output")
            why.append(line[0].upper() + line[1:])
        out.append(check(
            "attention still helps one token longer", not fails,
            f"One token longer than any training input ({L + 1}): {name(att, nxt)} against "
            f"{name(plain, nxt)} without attention.",
            f"One token longer than any training input ({L + 1}) attention does **not** save every "
            f"model: {name(att, nxt)} against {name(plain, nxt)} without attention. " + "; ".join(why) + "."))
    return out


def bottleneck(n: dict) -> str:
    L = n["trained"]
    at = "; ".join(f"{_model_name(m)} **{100 * a:.0f}%**" for m, a in n["at"].items())
    out = f"Whole outputs right on fresh inputs of length {L}, the longest trained: {at}."
    cs = bottleneck_claims(n)
    if cs:
        return out + "".join(" " + c.text for c in cs)
    if n["next"]:
        nxt = ", ".join(f"{_model_name(m)} {100 * a:.0f}%" for m, a in n["next"].items())
        out += f" One token longer than any training input ({L + 1}): {nxt}."
    return out


@_claims_of("paths")
def paths_claims(n: dict) -> list[Claim]:
    """"The path does not grow with the distance" for each model, from its longest path at the
    shortest and longest n (``rows``: model -> (n0, path0, n1, path1)); with ``layers`` (model ->
    its layer count) the attention path is said per layer: one hop in each layer, whatever n."""
    out = []
    for m, (x0, y0, x1, y1) in n["rows"].items():
        L = n.get("layers", {}).get(m)
        flat = y1 == y0
        per_layer = f" — one hop in each of its {L} layer{'s' if L != 1 else ''}" if L and flat and y1 == L else ""
        out.append(check(
            f"{m}: the path does not grow with n", flat,
            f"{_model_name(m)} **{y1:g}** steps at n = {x1:g} as at n = {x0:g}{per_layer}",
            f"{_model_name(m)} {y0:g} steps at n = {x0:g} → **{y1:g}** at n = {x1:g}: it grows with n"))
    return out


def paths(n: dict) -> str:
    cs = paths_claims(n)
    out = "Longest path from an input to an output: " + "; ".join(c.text for c in cs) + "."
    if any(c.holds for c in cs) and any(not c.holds for c in cs):
        out += (" A chain must pass every token in between; attention reads every token directly, "
                "so its path is the number of layers, not the distance.")
    return out


def qkv(n: dict) -> str:
    (qt, q), (l, h) = n["query"], n["head"]
    (t1, j1, s1, w1), *rest = n["top"]
    second = f"; next is '{rest[0][0]}' ({_w(rest[0][3])})" if rest else ""
    masked = f" {n['masked']} later keys are masked out (−∞)." if n["masked"] else ""
    check = (f" Recomputed from the recorded q, k and v, the weights and the output match the "
             f"model's own to {n['error']:.0e}." if n["ok"] else
             f" Recomputed, they differ from the model's by {n['error']:.1e}: check the model.")
    return (f"In layer {l}, head {h}, '{qt}' (pos {q}) scores its query against {n['keys']} keys "
            f"(÷√{n['d']}). The highest is '{t1}' (pos {j1}, {s1:.2f}); the softmax gives it "
            f"**{_w(w1)}** of the weight{second}.{masked}{check}")


def heatmap(n: dict) -> str:
    (l, h), (qt, q), (kt, k, w) = n["head"], n["query"], n["top"]
    return (f"In layer {l}, head {h}, the row of '{qt}' (pos {q}) puts **{_w(w)}** on '{kt}' (pos {k}). "
            f"Every one of the {n['rows']} rows sums to 1 (largest error {n['row_sum_error']:.0e}); "
            f"on average a row's largest weight is {_w(n['sharp'])}.")


@_claims_of("heads")
def heads_claims(n: dict) -> list[Claim]:
    """"Different heads look for different things", read at one query: more than one token is
    some head's strongest target (``targets``: (layer, head) -> (token, weight))."""
    distinct = sorted({tok for tok, _ in n["targets"].values()})
    return [check("different heads look at different tokens", len(distinct) > 1,
                  f"They pick {len(distinct)} different tokens: {', '.join(map(repr, distinct[:6]))}.",
                  f"Every head looks hardest at the same token, '{distinct[0]}', from here: on this "
                  "query the heads do **not** differ.")]


def heads(n: dict) -> str:
    qt, q = n["query"]
    t = n["targets"]
    distinct = sorted({tok for tok, _ in t.values()})
    best = sorted(t.items(), key=lambda kv: -kv[1][1])[:3]
    sharpest = ", ".join(f"L{l}·H{h} → '{tok}' ({_w(w)})" for (l, h), (tok, w) in best)
    return (f"{n['layers']} layers × {n['heads']} heads. From '{qt}' (pos {q}) the {len(t)} heads look "
            f"hardest at {len(distinct)} different tokens; the sharpest: {sharpest}. "
            + heads_claims(n)[0].text)


FOLLOWS = 2.0  # a head "follows" a noun when it puts at least this many times the other's weight there
HALF = 0.5       # ... and at least half of its weight


@_claims_of("it_heads")
def it_heads_claims(n: dict) -> list[Claim]:
    """Per noun, the head putting most weight on it (``heads``: noun -> (layer, head, weight)),
    with that head's weight on every noun (``on``: noun -> {noun: weight}): the claim "a head
    follows '<noun>'" holds when that head puts more on it than on any other noun — worded by
    which noun gets more, "follows" only when it gets ≥ ``HALF`` and ≥ ``FOLLOWS``× any other,
    else "leans towards". A noun after the pronoun (``positions``, causal) is unseen, said so.
    Then "different heads follow different nouns": every noun followed, by different heads."""
    pt, p = n["pronoun"]
    out, held = [], []
    for noun, (l, h, w) in n["heads"].items():
        on = n.get("on", {}).get(noun, {noun: w})
        others = {o: x for o, x in on.items() if o != noun}
        rival, rw = max(others.items(), key=lambda kv: kv[1]) if others else (None, 0.0)
        head = f"**L{l}·H{h}**"
        later = n.get("causal") and all(q > p for q in n.get("positions", {}).get(noun, [])) \
            and n.get("positions", {}).get(noun)
        more = w > rw
        if later:
            text = (f"'{noun}' comes after '{pt}' (pos {p}): under the causal mask no head can look "
                    f"at it (the most any head puts there: {_w(w)}).")
            more = False
        elif more and w >= HALF and w >= FOLLOWS * rw:
            text = f"{head} follows '{noun}': {_w(w)} of its weight" + (
                f", {_w(rw)} on '{rival}'." if rival else ".")
        elif more:
            text = (f"{head} leans towards '{noun}' ({_w(w)}) but still puts {_w(rw)} on '{rival}': "
                    "it splits its weight rather than following one noun.")
        else:
            text = (f"No head prefers '{noun}': the one putting most on it, {head} ({_w(w)}), puts "
                    f"more on '{rival}' ({_w(rw)}).")
        out.append(Claim(f"a head follows '{noun}'", bool(more), text))
        held.append(more)
    heads = {(l, h) for l, h, _ in n["heads"].values()}
    different = all(held) and len(heads) == len(n["heads"])
    out.append(check("different heads follow different nouns", different,
                     "Different heads prefer different nouns on this sentence.",
                     "One head is strongest on both nouns here: no head separates them on this sentence."
                     if len(heads) == 1 else
                     "So on this sentence the heads do **not** split the two nouns between them."))
    return out


def it_heads(n: dict) -> str:
    pt, p = n["pronoun"]
    return f"Read at '{pt}' (pos {p}): " + " ".join(c.text for c in it_heads_claims(n))


def it_effects(n: dict) -> str:
    m, (name, d) = n["metric"], n["worst"]
    out = (f"On {n['on']}, {m} is {_w(n['baseline'])} with every head on. Switching **{name}** off "
           f"changes it most: {d:+.3f}.")
    if n["looks"]:
        who, score, value, dl = n["looks"]
        if who == name:
            out += f" It is also the head whose pattern scores highest ({score} {_w(value)})."
        else:
            out += (f" The head that looks at the referent most, {who} ({score} {_w(value)}), "
                    f"changes it by {dl:+.3f}: where a head looks is not what the answer depends on.")
    return out


def it_choice(n: dict) -> str:
    """The agreement model's head: what the sentence's answer becomes with it off, and what the
    held-out pairwise accuracy does — both said, and whether the head decides (≤ 65%: a guess)."""
    (a0, p0), (a1, p1) = n["before"], n["after"]
    base, off = n["pairwise"]
    out = (f"On “{n['text']}” the model answers **{a0}** ({_w(p0)}); **{n['head']}** puts "
           f"{_w(n['weight'])} of the pronoun's attention on '{n['referent']}'. Switched off, the "
           f"answer becomes **{a1}** ({_w(p1)})"
           + (", neither of the two nouns" if n.get("candidates") and a1 not in n["candidates"] else "")
           + f". Over {n['on']}, choosing the right noun of the two "
           f"falls from {base:.0%} to {off:.0%}")
    if off <= 0.65:
        out += ": a guess. Here the head that looks is the head that decides."
    else:
        out += ": still mostly right, so this head's look is not the whole decision."
    if a1 == a0:
        out += " (On this one sentence the answer does not change; the average is over many.)"
    return out


def order(n: dict) -> str:
    first = "; ".join(f"{label} {x:.2g}" for label, x in n["first"].items())
    last = "; ".join(f"{label} **{x:.2g}**" for label, x in n["last"].items())
    out = (f"Entering the model, the same word's vector differs between the two sentences by: "
           f"{first}. {n['stage'][0].upper()}{n['stage'][1:]}: {last}.")
    none_first, none_last = n["first"].get("no positions"), n["last"].get("no positions")
    if none_first is not None and none_first < 1e-6:
        out += " Without positions a word enters with the same vector wherever it stands."
    if none_last is not None and none_last > 1e-4 and n.get("causal"):
        out += (" That model still tells them apart after its layers only because it is a decoder: "
                "its causal mask lets each word see just the words before it, and that is order.")
    elif none_last is not None and none_last <= 1e-4:
        out += " After its layers too: it cannot tell the two sentences apart."
    cs = order_claims(n)
    return out + "".join(" " + c.text for c in cs)


ROUNDING = 1e-5  # a difference below this share of the vectors' size is float rounding


@_claims_of("order")
def order_claims(n: dict) -> list[Claim]:
    """"Attention alone has no sense of order", checked on the no-positions decoder's weights run
    without its causal mask (``unmasked``: relative — the largest difference over the vectors'
    size —, most — the largest difference; ``order.without_causal_mask``)."""
    u = n.get("unmasked")
    if not u:
        return []
    return [check(
        "attention alone has no sense of order", u["relative"] <= ROUNDING,
        f"The same weights without the causal mask ('{u['label']}': every word sees every word, "
        f"attention alone) give each word the same vector in both sentences after every layer: "
        f"the largest difference is {u['most']:.1e}, {u['relative']:.0e} of the vectors' size — "
        "float rounding. Attention alone has no sense of order.",
        f"The same weights without the causal mask ('{u['label']}') still tell the two sentences "
        f"apart by up to **{_g(u['most'])}** ({u['relative']:.1e} of the vectors' size): on these "
        "sentences something besides attention carries order (check that they are rearrangements "
        "of the same words).")]


UNRELATED = 0.1  # a mean cosine within ±0.1 of zero: unrelated on average


@_claims_of("learned")
def learned_claims(n: dict) -> list[Claim]:
    """Learned positions: neighbours more alike than positions far apart (``far``: the signed mean
    cosine of the pairs at least ``far_gap`` apart — its sign said, never hidden in an absolute
    value)."""
    nb, far, neg = n["neighbour"], n["far"], n["far_negative"]
    apart = f"positions {n['far_gap']} or more apart average **{_d(far)}**"
    if far < -UNRELATED:
        how = (f" — negative, {100 * neg:.0f}% of those {n['far_pairs']} pairs below zero: the model "
               "points far positions in opposite directions rather than leaving them unrelated")
    elif far > UNRELATED:
        how = f" — still alike ({100 * neg:.0f}% of those pairs below zero)"
    else:
        how = f" — unrelated on average ({100 * neg:.0f}% of those pairs below zero)"
    return [check("neighbours alike, far positions not", nb > far,
                  f"Neighbouring positions have cosine **{_d(nb)}** on average; {apart}{how}.",
                  f"Neighbouring positions are **not** more alike than far ones here: neighbours "
                  f"average **{_d(nb)}**, {apart}{how}.")]


def learned(n: dict) -> str:
    return (f"{n['model']} learned **{n['max_len']}** position vectors: there is none for position "
            f"{n['max_len']} or later. " + learned_claims(n)[0].text)


@_claims_of("sinusoidal")
def sinusoidal_claims(n: dict) -> list[Claim]:
    """"Every position gets a different row": the closest two rows are apart (``closest``, the
    smallest distance between two rows, above float rounding)."""
    return [check("no two positions share a vector", n["closest"] > 1e-6,
                  f"The two closest rows are still {_g(n['closest'])} apart: no two positions share a vector.",
                  f"Two rows are only {_g(n['closest'])} apart: at this size some positions **share** "
                  "a vector (to float precision).")]


def sinusoidal(n: dict) -> str:
    return (f"{n['n']} positions × {n['d']} dimensions. The fastest wave repeats every "
            f"{n['fast']:.1f} positions, the slowest every {n['slow']:,.0f}. Neighbours have cosine "
            f"{_w(n['neighbour'])}. " + sinusoidal_claims(n)[0].text)


def extrapolation(n: dict) -> str:
    L = n["train"]
    parts = [f"{s} {_w(a)} → " + ("cannot run" if math.isnan(b) else f"**{_w(b)}**")
             for s, a, b in n["rows"]]
    return f"Loss at {L} tokens (trained) → at {4 * L}: " + "; ".join(parts) + "."


@_claims_of("rope")
def rope_claims(n: dict) -> list[Claim]:
    """"The score depends only on the distance": along every diagonal of the (m, n) grid the
    score varies by at most 1e-4 of its largest size (``spread``, ``by_distance``)."""
    scale = max([abs(x) for x in n["by_distance"].values()] + [1e-12])
    return [check("the score depends on the distance alone", n["spread"] <= 1e-4 * max(scale, 1.0),
                  f"Along every diagonal the score varies by at most **{n['spread']:.0e}**: it depends "
                  "on the distance alone",
                  f"Along a diagonal the score varies by **{_g(n['spread'])}**: here it does **not** "
                  "depend on the distance alone")]


def rope(n: dict) -> str:
    l, h = n["head"]
    m, k, model_score, own = n["model"]
    d = n["by_distance"]
    by = ", ".join(f"{x:.2f} at distance {k_}" for k_, x in d.items())
    return (f"Layer {l}, head {h}: the q of '{n['q']}' and the k of '{n['k']}' placed at every pair "
            f"of positions. {rope_claims(n)[0].text} ({by}). At their real positions ({m}, {k}) the "
            f"rotated vectors give {own:.3f}; the model computed {model_score:.3f}.")


@_claims_of("nopeek")
def nopeek_claims(n: dict) -> list[Claim]:
    """A causal model: "changing a later token changes nothing before it" — the largest logit
    change before the edited position (``before``) is 0 (within 1e-5: float rounding)."""
    if not n["causal"]:
        return []
    p = n["pos"]
    exact = "exactly **0**" if n["before"] == 0 else f"{_g(n['before'])} (float rounding)"
    return [check("no peeking: nothing before the edit changes", n["before"] <= 1e-5,
                  f"Replacing '{n['old']}' by '{n['new']}' at position {p}: the outputs before it change "
                  f"by {exact}; from position {p} on by up to **{_g(n['after'])}**.",
                  f"Replacing '{n['old']}' by '{n['new']}' at position {p} **does** change the outputs "
                  f"before it, by up to {_g(n['before'])}: this model peeks ahead.")]


def nopeek(n: dict) -> str:
    p = n["pos"]
    if not n["causal"]:
        return (f"Replacing '{n['old']}' by '{n['new']}' at position {p} moves every position's output "
                f"(before it by up to {_g(n['before'])}): this model reads both ways.")
    return nopeek_claims(n)[0].text


def mask(n: dict) -> str:
    total = n["n"] * n["n"]
    unused = (" (the window setting does not apply to this kind of mask)"
              if n.get("window") is None and n.get("asked_window") is not None else "")
    out = (f"{n['kind']}{unused}: **{n['allowed']}** of {total} query–key pairs allowed "
           f"({100 * n['allowed'] / total:.0f}%), at most {n['most']} keys per query.")
    out += (f" Run under this mask, the model puts weight {_g(n['blocked_weight'])} on every blocked pair."
            if n["blocked_weight"] == 0 else
            f" The model's largest weight on a blocked pair: {_g(n['blocked_weight'])}.")
    return out


GROWTH_CUT = 2 ** 1.5  # doubling n: nearer 4 (quadratic) or nearer 2 (linear), on a log scale


@_claims_of("cost")
def cost_claims(n: dict) -> list[Claim]:
    """The title's "full attention costs n², a window n·w": doubling n multiplies full attention's
    measurement by more than 2^1.5 (nearer 4) and the window's by less (nearer 2)."""
    out = []
    for label, (n0, y0, n1, y1) in n["rows"].items():
        if not y0:
            continue
        r = y1 / y0
        full = label.startswith("full")
        out.append(check(f"{label}: grows as expected", (r > GROWTH_CUT) == full,
                         f"{label} grows {r:.1f}× per doubling, "
                         + ("nearer 4: quadratic." if full else "nearer 2: linear."),
                         f"{label} grows {r:.1f}× per doubling, **not** "
                         + ("the quadratic 4× here." if full else "the linear 2× here.")))
    return out


def cost(n: dict) -> str:
    unit = " s" if n["what"] == "time" else " MiB"
    scale = 1.0 if n["what"] == "time" else 1 / 2 ** 20
    parts = []
    for label, (n0, y0, n1, y1) in n["rows"].items():
        parts.append(f"{label}: {_g(y1 * scale)}{unit} at n = {n1:,}, **{y1 / y0:.1f}×** its value at "
                     f"n = {n0:,}" if y0 else f"{label}: {_g(y1 * scale)}{unit} at n = {n1:,}")
    return (f"Doubling n ({n['what']}): " + "; ".join(parts) +
            ". Quadratic cost multiplies by 4 when n doubles, linear cost by 2."
            + "".join(" " + c.text for c in cost_claims(n) if not c.holds))


def sinks(n: dict) -> str:
    """The window past the training length: each scheme's mean loss beyond it against recomputing
    the window, whether the paper's signature holds (window blows up, sinks bring it back), and
    how many heads are sinks — the absence said with its numbers."""
    f, g, k, w = n["loss_far"], n["gap"], n["kmax"], n["window"]
    out = (f"Beyond its training length ({n['train_length']} tokens, up to token {n['end']}), "
           f"{n['label']} loses **{_w(f['recompute'])}** nats per token when the last {w} tokens are "
           f"recomputed from scratch, **{_w(f['window'])}** ({_d(g['window'])}) with a sliding window "
           f"of {w}, **{_w(f[f'sinks {k}'])}** ({_d(g[f'sinks {k}'])}) with the first {k} tokens kept "
           f"as sinks, and {_w(f['dense'])} ({_d(g['dense'])}) with full attention over everything.")
    heads = (f"{n['sink_heads']} of {n['heads']} heads put more than {n['sink_ratio']:g}× the even "
             f"share on the first token (the strongest, {n['top_head']}, {_w(n['top_share'])} against "
             f"{_w(n['top_even'])})")
    if n["signature"]:
        out += (f" That is the paper's signature: evicting the first tokens costs {_d(g['window'])} "
                f"nats, keeping {k} brings the window back within {n['close']:g} of recomputation; "
                f"{heads}.")
    elif not n["window_blows_up"]:
        out += (f" The paper's signature is **absent** here: the plain window stays within "
                f"{n['blowup']:g} nats of recomputation, so this model never needed its first tokens; "
                f"{heads}. The paper's models are billions of parameters trained on long text.")
    else:
        out += (f" Only half the paper's signature: the window blows up, but {k} sinks do not bring "
                f"it within {n['close']:g} nats of recomputation; {heads}.")
    if g["dense"] > n["blowup"]:
        out += " What breaks far past the training length is full attention, not the window."
    return out


QUALITY = 0.05  # nats: a shared-K/V model within this of the full model's loss costs little


@_claims_of("kv")
def kv_claims(n: dict) -> list[Claim]:
    """MHA / GQA / MQA measured now (``rows``: model, heads, kv_heads, bytes — the cache measured per
    cached position —, formula — 2 · layers · kv_heads · d_head · 4 bytes —, loss): "sharing keys and
    values shrinks the cache in proportion" (measured = formula for every model, so the cache is
    kv_heads / heads of the full one) and "at little cost" (every shared model's loss within
    ``QUALITY`` of the model with one K/V head per query head)."""
    rows = n["rows"]
    full = [r for r in rows if r["kv_heads"] == r["heads"]]
    shared = [r for r in rows if r["kv_heads"] < r["heads"]]
    if not full or not shared:
        return []
    f = full[0]
    exact = all(r["bytes"] == r["formula"] for r in rows)
    sizes = "; ".join(f"{r['model']} **{r['bytes']:,.0f}** bytes per token ({r['kv_heads']} K/V head"
                      f"{'s' if r['kv_heads'] != 1 else ''})" for r in rows)
    out = [check("sharing K/V shrinks the cache in proportion", exact,
                 f"Measured cache: {sizes} — exactly 2 × layers × K/V heads × head size × 4 bytes, so "
                 f"sharing shrinks it to K/V heads / {f['heads']} of {f['model']}'s.",
                 f"Measured cache: {sizes} — **not** the formula's "
                 + ", ".join(f"{r['formula']:,}" for r in rows) + " bytes per token.")]
    worst = max(shared, key=lambda r: r["loss"] - f["loss"])
    d = worst["loss"] - f["loss"]
    losses = ", ".join(f"{r['model']} {r['loss']:.3f}" for r in rows)
    out.append(check("at little cost in quality", d <= QUALITY,
                     f"Validation loss now: {losses}. The worst of the shared models, {worst['model']}, is "
                     f"{d:+.3f} nats from {f['model']}" + (" (within 0.05 counts as little)" if d > 0 else "")
                     + ": the smaller cache costs little here.",
                     f"Validation loss now: {losses}. {worst['model']} is **{d:+.3f}** nats worse than "
                     f"{f['model']}: here the smaller cache costs quality."))
    return out


def kv(n: dict) -> str:
    cs = kv_claims(n)
    if not cs:
        return "; ".join(f"{r['model']}: {r['bytes']:,.0f} bytes per token, loss {r['loss']:.3f}" for r in n["rows"]) + "."
    return " ".join(c.text for c in cs)


# ------------------------------------------------------------------------------ the block (issue 42, item 2)
ADDS = 1e-5      # a stream that differs from (before + the sublayer's output) by more than this share of its size is not a plain sum
LN_MEAN = 1e-3   # layer norm's output: |mean| at most this ...
LN_SPREAD = 0.05  # ... and a standard deviation within this of 1 (a vector with almost no spread keeps less: the norm's ε)


@_claims_of("block")
def block_claims(n: dict) -> list[Claim]:
    """The block step (``ui.lesson_steps.block_view``): "each sublayer adds to the stream" (the
    recorded stream after attention / the MLP minus (the stream before + that sublayer's output),
    largest over every layer and position, relative to the stream's size: ``sum_error``), "layer
    norm gives each vector mean 0 and spread 1" (``ln``: largest |mean|, smallest and largest
    standard deviation of what every ln1 hands attention, and the spreads it was given) and "the
    layers build the prediction" (``stages``: label, stream size, P(final next token) read out
    there — the last stage above the embeddings)."""
    e, ln, st = n["sum_error"], n["ln"], n["stages"]
    post = " — this model normalises *after* adding (post-norm), so each sublayer rescales the stream" \
        if n.get("norm") == "post" else ""
    out = [check("each sublayer adds to the stream", e <= ADDS,
                 f"Each sublayer **adds** its output to the stream: after every attention and every MLP the "
                 f"stream equals the stream before plus that sublayer's output (largest difference "
                 f"{e:.0e} of the stream's size).",
                 f"Here the stream is **not** a plain sum: after a sublayer it differs from the stream "
                 f"before plus the sublayer's output by up to {_g(e)}× the stream's own size{post}.")]
    lo, hi = ln["spread"]
    ok = ln["mean"] <= LN_MEAN and abs(lo - 1) <= LN_SPREAD and abs(hi - 1) <= LN_SPREAD
    given = (("After attention's output is added (post-norm)" if n.get("norm") == "post" else
              "Before attention reads it") + ", the vectors the norm is given have "
             + ("root mean squares" if ln.get("kind") == "rmsnorm" else "spreads (standard deviations)")
             + f" from {_g(ln['given'][0])} to {_g(ln['given'][1])}")
    if ln.get("kind") == "rmsnorm":
        out.append(check("layer norm: mean 0, spread 1", abs(lo - 1) <= LN_SPREAD and abs(hi - 1) <= LN_SPREAD,
                         f"{given}; this model's RMSNorm divides each by its root mean square: every one is "
                         f"handed over at root mean square 1 ({_w(lo)} to {_w(hi)}), not centred.",
                         f"{given}; its RMSNorm does **not** hand every one over at root mean square 1 here "
                         f"({_g(lo)} to {_g(hi)}): a vector of almost nothing is held back by the norm's ε."))
        return out + _prediction_claim(n, st)
    out.append(check("layer norm: mean 0, spread 1", ok,
                     f"{given}; layer norm hands every one over with mean 0 "
                     f"(largest |mean| {ln['mean']:.0e}) and spread 1 ({_w(lo)} to {_w(hi)}).",
                     f"{given}; layer norm does **not** hand every one over "
                     f"with spread 1 here ({_g(lo)} to {_g(hi)}, largest |mean| {_g(ln['mean'])}): a "
                     "vector with almost no spread is held back by the norm's ε."))
    return out + _prediction_claim(n, st)


def _prediction_claim(n: dict, st: list) -> list[Claim]:
    (first, _, p0), (last, _, p1) = st[0][:3], st[-1][:3]
    nxt = n["next"]
    steps = [(st[i][0], st[i][2] - st[i - 1][2]) for i in range(1, len(st))]
    where, up = max(steps, key=lambda x: x[1]) if steps else (last, 0.0)
    return [check("the layers build the prediction", p1 > p0,
                     f"Read out after the embeddings alone, the stream gives '{nxt}' **{_w(p0)}**; after "
                     f"the last block **{_w(p1)}**: the layers built the prediction, the largest step at "
                     f"{where} ({_d(up)}).",
                     f"Read out after the embeddings alone, the stream already gives '{nxt}' "
                     f"**{_w(p0)}**, and the layers do **not** raise it (**{_w(p1)}** after the last block).")]


def block(n: dict) -> str:
    tok, p = n["query"]
    return (f"At '{tok}' (pos {p}) the stream grows from size {_g(n['stages'][0][1])} after the embeddings "
            f"to {_g(n['stages'][-1][1])} after {n['layers']} blocks. "
            + " ".join(c.text for c in block_claims(n)))


TEMPERATURE_SAME = 1e-6  # P(top) closer than this at two temperatures: the same (it was already ~1)


@_claims_of("next_token")
def next_token_claims(n: dict) -> list[Claim]:
    """Logits -> the next token: "temperature below 1 sharpens, above 1 flattens" (``p_top``: the
    most likely token's probability at temperature 1 and at ``temperature`` with no top-k;
    temperature 0 is greedy: that token's probability is 1) and "top-k leaves only k tokens"
    (``kept``: tokens with a probability above 0 under the setting, ``top_k`` 0 = off)."""
    t, k = n["temperature"], n["top_k"]
    (p1, pt), top = n["p_top"], n["top"]
    out = []
    if t == 0:
        out.append(check("temperature 0 is greedy", pt == 1.0,
                         f"At temperature 0 the most likely token, '{top}', is always chosen (probability 1, "
                         f"against {_w(p1)} at temperature 1).",
                         f"At temperature 0 '{top}' should be chosen every time, but it gets {_g(pt)}."))
    elif t != 1:
        sharp = t < 1
        moved = pt > p1 + TEMPERATURE_SAME if sharp else pt < p1 - TEMPERATURE_SAME
        out.append(check("temperature sharpens below 1, flattens above", moved,
                         f"Temperature {t:g} divides every logit by {t:g}: '{top}' goes from {_w(p1)} to "
                         f"**{_w(pt)}** — " + ("sharper, the likely tokens more likely." if sharp else
                                              "flatter, unlikely tokens get more of a chance."),
                         f"Temperature {t:g} leaves '{top}' at {_g(pt)} (from {_g(p1)} at temperature 1): "
                         "**not** " + ("sharper" if sharp else "flatter") + " here — the model was already "
                         "certain of it."))
    if k:
        out.append(check("top-k leaves only k tokens", n["kept"] <= k,
                         f"Top-k {k} sets every token outside the {k} most likely to 0 and shares their "
                         f"probability among those {k} ({n['kept']} left with a chance).",
                         f"Top-k {k} should leave {k} tokens, but {n['kept']} keep a chance (ties at the cut)."))
    return out


def next_token(n: dict) -> str:
    tok, p = n["query"]
    out = (f"After '{tok}' (pos {p}) the model's {n['vocab']} logits run from {_w(n['logits'][1])} to "
           f"{_w(n['logits'][0])}; softmax turns them into probabilities that sum to 1: '{n['top']}' "
           f"**{_w(n['p_top'][0])}**, then " + ", ".join(f"'{w}' {_w(x)}" for w, x in n["runners"])
           + f". Greedy decoding writes '{n['top']}'.")
    cs = next_token_claims(n)
    return out + "".join(" " + c.text for c in cs) + (
        f" Under this setting {n['kept']} token{'s' if n['kept'] != 1 else ''} can be drawn; the effective number of choices "
        f"(e to the entropy) is {n['choices'][0]:.1f} at temperature 1 and {n['choices'][1]:.1f} here.")


# ------------------------------------------------------------------------------ cross-attention
@_claims_of("cross")
def cross_claims(n: dict) -> list[Claim]:
    """Cross-attention on a translation (``pairs``: per expected alignment, the position, the word
    about to be written, its source word and position, where the row's largest weight is and how
    much is on the source word): "the decoder looks at the word it translates" (every expected
    pair's row peaks on its source word) and, where the sentence reorders words (``crossing``: two
    pairs in opposite orders), "the look follows the reordering" (both of them peak there)."""
    pairs = n["pairs"]
    if not pairs:
        return []
    hit = [p for p in pairs if p["argmax"] == p["src_pos"]]
    miss = [p for p in pairs if p["argmax"] != p["src_pos"]]
    said = lambda ps: "; ".join(f"about to write '{p['writes']}' → '{p['src']}' {_w(p['weight'])}"  # noqa: E731
                                for p in ps)
    out = [check("the decoder looks at the word it translates", not miss,
                 f"In {n['head']}, every one of the {len(pairs)} aligned words puts its largest weight on "
                 f"the English word it translates ({said(hit)}).",
                 f"In {n['head']}, only **{len(hit)} of {len(pairs)}** aligned words put their largest "
                 f"weight on the English word they translate; missed: "
                 + "; ".join(f"about to write '{p['writes']}' it looks most at '{p['argmax_tok']}', "
                             f"{_w(p['weight'])} on '{p['src']}'" for p in miss)
                 + ". For those words this head looks elsewhere: try another head.")]
    c = n.get("crossing")
    if c:
        a, b = pairs[c[0]], pairs[c[1]]
        both = a["argmax"] == a["src_pos"] and b["argmax"] == b["src_pos"]
        out.append(check("the look follows the reordering", both,
                         f"French swaps the order here, and so does the look: writing '{a['writes']}' it "
                         f"reads '{a['src']}' (pos {a['src_pos']}), then writing '{b['writes']}' it goes "
                         f"back to '{b['src']}' (pos {b['src_pos']}).",
                         f"French swaps the order of '{a['src']}' and '{b['src']}' here, but this head's "
                         f"look does **not** follow it (largest weights on '{a['argmax_tok']}' and "
                         f"'{b['argmax_tok']}')."))
    return out


def cross(n: dict) -> str:
    return (f"“{n['text']}” → “{n['target']}”. Each row is the decoder at one French position, its "
            f"query scoring the encoder's {n['src_len']} English keys. "
            + " ".join(c.text for c in cross_claims(n)))


# ------------------------------------------------------------------------------ BERT
NEAR_TIE = 0.05  # top three guesses closer than this: the model spreads its bet
BOTH_SIDES = 0.1  # a head "reads" a side when it puts at least this much of the [MASK]'s weight there


@_claims_of("mlm")
def mlm_claims(n: dict) -> list[Claim]:
    """The masked word: "it recovers the hidden word" (``rank`` 1 among the vocabulary) and "it
    reads both sides" (``before`` / ``after``: the most any head puts on the words before / after
    the [MASK]; at least ``BOTH_SIDES`` each; no claim when the hidden word is first or last)."""
    (top, pt), h = n["guesses"][0], n["hidden"]
    out = [check("it recovers the hidden word", n["rank"] == 1,
                 f"Hiding '{h}' (word {n['pos']} of {n['words']}), the model's top guess is '{h}' "
                 f"(**{_w(pt)}**).",
                 f"Hiding '{h}' (word {n['pos']} of {n['words']}), the model's top guess is '{top}' "
                 f"({_w(pt)}); '{h}' is **not** its first choice: number {n['rank']}, with "
                 f"{_w(n['p_hidden'])}" + (" — another word fits the blank as well here." if n["rank"] <= 3 else "."))]
    if n.get("before") is not None and n.get("after") is not None:
        b, a = n["before"], n["after"]
        out.append(check("it reads both sides", b >= BOTH_SIDES and a >= BOTH_SIDES,
                         f"It reads both sides: some head puts **{_w(b)}** of the [MASK]'s attention on the "
                         f"words before it, some head **{_w(a)}** on the words after it (averaged over "
                         f"heads {_w(n['before_mean'])} and {_w(n['after_mean'])}).",
                         f"It does **not** read both sides here: at most {b:.3f} of the [MASK]'s attention "
                         f"goes to the words before it and {a:.3f} to the words after it in any head (a side "
                         f"counts as read from {BOTH_SIDES:g})"
                         + (" — a causal mask hides what follows." if n.get("causal") else ".")))
    return out


def mlm(n: dict) -> str:
    guesses = ", ".join(f"'{w}' {_w(p)}" for w, p in n["guesses"][:3])
    out = f"“{n['text']}” → its guesses at the blank: {guesses}. " + " ".join(c.text for c in mlm_claims(n))
    g = n["guesses"]
    if len(g) >= 3 and g[0][1] - g[2][1] < NEAR_TIE:
        out += (f" Its top three guesses are within {g[0][1] - g[2][1]:.2f} of each other: many words fit "
                "this blank, and the model spreads its bet over them.")
    if n.get("before") is None or n.get("after") is None:
        out += " The hidden word is at an end of the sentence: hide a middle word to see both sides."
    return out


# ------------------------------------------------------------------------------ the taxonomy
@_claims_of("families")
def families_claims(n: dict) -> list[Claim]:
    """The taxonomy step: each mask as its family needs it, measured (``rows``: "model · stack" ->
    family, expected "full" | "causal", pairs with a weight above 0 — all of them, those ahead of the
    query (above the diagonal), those at or behind it). Full: every pair; causal: none ahead, every
    one behind."""
    out = []
    for label, r in n["rows"].items():
        if r["expected"] == "full":
            holds = r["allowed"] == r["pairs"]
            who = "every decoder position sees every source word" if label.endswith("cross") else \
                "every query sees every key, before and after it"
            yes = f"**{label}** ({r['family']}): {who} ({r['allowed']} of {r['pairs']} pairs)."
            no = (f"**{label}** ({r['family']}): **not** every pair is seen — {r['allowed']} of {r['pairs']} have "
                  "a weight above 0.")
        else:
            holds = r["ahead"] == 0 and r["behind"] == r["behind_pairs"]
            yes = (f"**{label}** ({r['family']}): each query sees itself and every earlier key and none ahead "
                   f"({r['behind']} of {r['behind_pairs']} behind, 0 of {r['ahead_pairs']} ahead).")
            no = (f"**{label}** ({r['family']}): **not** the causal mask — {r['ahead']} of {r['ahead_pairs']} "
                  f"pairs ahead get weight, {r['behind']} of {r['behind_pairs']} behind.")
        out.append(check(f"{label}: {r['expected']}", holds, yes, no))
    return out


def families(n: dict) -> str:
    cs = families_claims(n)
    out = f"On the first {n['n']} positions of a real input: " + " ".join(c.text for c in cs)
    if all(c.holds for c in cs):
        out += (" Same attention, different masks: the mask, with what each is trained to predict, is "
                "what separates the families.")
    return out


# ------------------------------------------------------------------------------ the same word in context
SAME = 1e-4  # two vectors whose difference is below this share of their length: the same vector


@_claims_of("context")
def context_claims(n: dict) -> list[Claim]:
    """The same word in two sentences (``rows``: stage, cosine, the difference's length over the
    vector's): "one vector per word at the input" (its own embedding identical) and "after the
    layers its vector depends on the sentence" (the last stage's difference above ``SAME``), the
    failure explained when the model is a decoder and the word's past is the same (``same_past``)."""
    w = n["word"]
    (_, c0, d0), (last, c1, d1) = n["rows"][0], n["rows"][-1]
    out = [check("one vector per word at the input", d0 <= SAME,
                 f"'{w}' enters with the very same vector in both sentences (difference "
                 + ("exactly 0" if d0 == 0 else f"{d0:.0e}") + "): "
                 "like word2vec, one vector per word.",
                 f"'{w}' enters with **different** vectors in the two sentences (difference {_g(d0)})."),
           check("after the layers the vector depends on the sentence", d1 > SAME,
                 f"{_cap(last)} the two vectors differ by **{_w(d1)}** of their length (cosine "
                 f"{c1:.3f}): " + (
                     f"the other words changed '{w}'." if n["pos"][0] == n["pos"][1] else
                     f"the other words and its different position changed '{w}' (put it at the same "
                     "position in both to see the context alone).") + (
                     f" Both sentences start '{n['past']}', so only the words *after* "
                     f"'{w}' differ: this encoder reads both ways." if n.get("same_past") and not n["causal"] else ""),
                 f"{_cap(last)} the two vectors are **the same** (difference {d1:.0e})" + (
                     f": {n['model']} is a decoder, it sees only the words before '{w}', and those are the "
                     "same in both sentences." if n["causal"] and n.get("same_past") else
                     ": the other words did not change it."))]
    return out


def context(n: dict) -> str:
    (ia, ib) = n["pos"]
    return (f"'{n['word']}' at position {ia} in A and {ib} in B, in {n['model']}. "
            + " ".join(c.text for c in context_claims(n)))
