"""The lesson's steps, as data (issue 32): the lecture's order of ideas, one ``Step`` each — a
title, two to four sentences, one live view, at most two controls, a "what to notice" sentence
written from the view's own numbers (``tfviz.lesson``), the lecture part it teaches and the full
page that goes deeper (opened with the same model and input: ``View.link``).

A view calls the same library function and ``ui.cache`` / ``ui.why`` / ``ui.effects`` wrapper its
full page calls — never a second copy of the page's logic — and returns a ``View``: the figure,
the numbers the notice reads, and the full page's settings. It draws nothing itself (the lesson
page shows it; the offline export writes it into one HTML file), so one function serves both.

To add a step: a view function here and one ``Step`` in ``STEPS`` at its place in the lecture
(the list's order is the lesson's order), its notice in ``tfviz.lesson``.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import threading
from collections import OrderedDict

import numpy as np

from tfviz import lesson as say

from . import cache

DEFAULT_TEXT = "the dogs near the old cat run. The zebra sings unbelievably!"
WORDS = ("dog cat horse bird fox teacher doctor student child farmer run sleep sing happy big "
         "small law application car soup")  # the one-hot step's words, those the model knows
WORD_GROUPS = {"animal": "dog cat horse bird fox", "person": "teacher doctor student child farmer",
               "verb": "run sleep sing", "adjective": "happy big small"}
"""The groups the one-hot step's claim "related words end up close" is checked with (words of
``WORDS``; 'law application car soup' belong to none)."""
LESSON_MAX = 24  # tokens an attention or mask step reads (a grid a room can read)


@dataclass
class View:
    """What a step shows: ``figure`` (a Plotly figure, shared read-only: ``cache.figure``), the
    ``numbers`` its notice reads, a ``caption`` under it, ``html`` drawn under the figure on the
    page (e.g. coloured token spans), ``link``: the full page's settings (``ui.links`` names)."""
    figure: Any
    numbers: dict
    caption: str = ""
    html: str = ""
    link: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Control:
    """One of a step's (at most two) controls. ``kind``: select | radio | slider | text.
    ``options`` / ``default``: values, or functions of the step's model (None without one);
    ``fmt(value, model)``: an option's label. ``lo``/``hi``/``step``: a slider's range (``hi`` may
    be a function of the model)."""
    name: str
    label: str
    kind: str
    options: Sequence | Callable | None = None
    default: Any = None
    fmt: Callable | None = None
    lo: int = 0
    hi: int | Callable = 0
    step: int = 1
    type: type = str       # of its value (a slider's is int)


@dataclass(frozen=True)
class Step:
    id: str                # in links: ?step=<id>
    part: str              # tfviz.lesson.PARTS key: the lecture part it teaches
    title: str
    text: str              # two to four sentences
    view: Callable         # (model or None, values) -> View
    notice: Callable       # numbers -> the "what to notice" sentence (tfviz.lesson)
    page: str              # the full page (app_pages/<page>.py)
    model: str | None = None       # the shipped (zoo) model it opens on; None: it takes no model
    fits: Callable | None = None   # (card: checkpoint metadata) -> True when a model can show it
    controls: tuple[Control, ...] = ()


def view_of(step: "Step", lm, values: dict) -> View:
    """``step``'s view for this model and these values: computed once per (step, model, values)
    for the server when the step reads a model (its key changes with the file), so a class of
    followers redrawing the same step asks for the shared result instead of copying recordings
    out of ``ui.cache`` thirty times. Views of model-free steps are cheap and always fresh."""
    if lm is None:
        return step.view(lm, values)
    return _memo(("view", step.id, *lm.key, tuple(sorted(values.items()))), lambda: step.view(lm, values))


# ------------------------------------------------------------------------------ shared helpers
def _cfg(card: dict) -> dict:
    return card.get("model_config") or {}


def _transformer(card: dict) -> bool:
    c = _cfg(card)
    return c.get("family", "transformer") == "transformer" and "d_model" in c


def _self_attention(card: dict) -> bool:
    return _transformer(card) and _cfg(card).get("arch") in ("decoder", "encoder")


def _decoder(card: dict) -> bool:
    return _transformer(card) and _cfg(card).get("arch") == "decoder"


def _block(card: dict) -> bool:
    """A decoder whose blocks have both halves (an attention-only model has no MLP to show)."""
    return _decoder(card) and not _cfg(card).get("attn_only")


def _encdec(card: dict) -> bool:
    return _transformer(card) and _cfg(card).get("arch") == "encoder-decoder" and _task(card) == "translate"


def _mlm(card: dict) -> bool:
    return _transformer(card) and _cfg(card).get("arch") == "encoder" and _task(card) == "mlm"


def _task(card: dict) -> str | None:
    return (card.get("task") or {}).get("name")


def _agreement(card: dict) -> bool:
    return _decoder(card) and _task(card) == "agreement"


def _coref(card: dict) -> bool:
    return _decoder(card) and _task(card) == "coref"


def _grammar_lm(card: dict) -> bool:
    from tfviz.analysis.sinks import text_setting

    return _decoder(card) and text_setting(card.get("task")) is not None


def _pos(scheme: str) -> Callable:
    return lambda card: _transformer(card) and _cfg(card).get("pos") == scheme


def heads_of(lm) -> list[str]:
    return [f"L{l}·H{h}" for l in range(lm.config.n_layers) for h in range(lm.config.n_heads)]


def parse_head(value: str) -> tuple[int, int]:
    layer, head = value[1:].split("·H")
    return int(layer), int(head)


def lesson_input(lm):
    """The input every attention and mask step reads: the model's first task example (a coref
    model's mission sentence 1: "…its application…") when it has at most ``LESSON_MAX`` tokens,
    else the start of its default text, as many words as fit; and the full pages' settings that
    open the same input (``Task example`` 0, or the typed text). Once per model for the server,
    shared read-only (a plain dict lookup: a follower's redraw asked for it once per option of the
    query selector)."""
    return _memo(("input", *lm.key), lambda: _lesson_input(lm))


_MEMO: OrderedDict = OrderedDict()
_MEMO_LOCK = threading.Lock()


def _memo(key: tuple, compute):
    """``compute()`` once per ``key`` (a model's key in it: a retrained file is another key) for the
    server; the last 64 kept. Results are shared: never changed by a caller."""
    with _MEMO_LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
    value = compute()
    with _MEMO_LOCK:
        _MEMO[key] = value
        while len(_MEMO) > 64:
            _MEMO.popitem(last=False)
    return value


def _lesson_input(lm):
    from tfviz.analysis import explorer

    limit = min(explorer.length_limit(lm.config)[0], LESSON_MAX)
    tok = lm.tokenizer
    choices = explorer.example_choices(cache.task_of(lm), 1)
    if choices and len(choices[0][1].tokens) <= limit and choices[0][1].src is None:
        e = choices[0][1]
        return explorer.ModelInput(list(e.tokens), tok.tokens_of(e.tokens), meta=dict(e.meta)), \
            {"input": "example", "example": 0}
    words = cache.default_texts(lm)[0].split()
    layout = explorer.template_layout(tok)
    if choices:
        layout = explorer.layout_of(choices[0][1].tokens, tok.special_ids)
    while True:  # the longest start of the text that fits with the model's own wrapping
        text = " ".join(words)
        p = explorer.prepare_text(tok, text, *layout, limit=10 ** 6)
        if len(p.ids) <= limit or len(words) <= 1:
            break
        words = words[:-1]
    p = explorer.prepare_text(tok, text, *layout, limit=limit)
    return explorer.ModelInput(p.ids, p.tokens), {"input": "text", "text": text}


def _candidates(inp) -> dict[str, list[int]]:
    from tfviz.analysis import explorer

    return explorer.probe_candidates(inp.tokens, inp.meta)


def default_head(lm) -> str:
    """The head the attention steps open on: the one putting most weight from the input's query
    on its candidate nouns (a coref model's "it" head), else the last layer's first head."""
    return _memo(("head", *lm.key), lambda: _default_head(lm))


def _default_head(lm) -> str:
    from tfviz.analysis import explorer

    inp, _ = lesson_input(lm)
    cands = [p for ps in _candidates(inp).values() for p in ps if p != inp.query]
    if cands and lm.config.arch != "encoder-decoder":
        stack = explorer.layer_stack(cache.record(lm, inp.key), explorer.sites(lm.config)[0])
        mass = stack[:, :, inp.query, cands].sum(-1)  # [layer, head]
        l, h = np.unravel_index(int(mass.argmax()), mass.shape)
        return f"L{l}·H{h}"
    return f"L{lm.config.n_layers - 1}·H0"


def _queries(lm) -> list[int]:
    inp, _ = lesson_input(lm)
    return list(range(len(inp.ids)))


def _query_label(i: int, lm) -> str:
    inp, _ = lesson_input(lm)
    return f"pos {i} · '{inp.tokens[i]}'" if 0 <= i < len(inp.tokens) else f"pos {i}"


def _attention_link(lm, inp_link: dict, tab: str, layer: int | None = None, head: int | None = None,
                    **more) -> dict:
    out = {**inp_link, "tab": tab, **more}
    if layer is not None:
        out.update(layer=layer, head=head)
    return out


# ------------------------------------------------------------------------------ 1. tokens
def tokens_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis.embeddings import clean_text, clip_spans, tokenize_all

    text, _ = clean_text(v["text"])
    if not text:
        raise ValueError("type some text to cut into tokens")
    rows = tokenize_all(text, cache.tokenizers(cache.default_corpus(), int(v["bpe"])))
    fig = cache.figure_for(("lesson-tokens", text, int(v["bpe"])), viz.token_pieces, rows)
    spans = "".join(f"<p style='margin:0.2em 0'><b>{r['kind']}</b></p>"
                    + viz.token_spans_html(*clip_spans(text, r["offsets"], r["tokens"], r["ids"]))
                    for r in rows)
    numbers = {"chars": len(text), "rows": {r["kind"]: {k: r[k] for k in ("count", "unknowns", "vocab_size")}
                                            for r in rows}, "bpe_asked": int(v["bpe"])}
    return View(fig, numbers, "Hover a segment for its token id and characters.", spans,
                {"text": text, "bpe": int(v["bpe"])})


# ------------------------------------------------------------------------------ 2-3. vectors
def onehot_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.viz.data import cosine_similarity

    from . import why

    vectors, labels = why.embeddings(lm)
    index = {w: i for i, w in enumerate(labels)}
    asked = [w for w in str(v["words"]).replace(",", " ").split() if w in index]
    words = list(dict.fromkeys(asked))[:12] or default_words(lm).split()
    if len(words) < 2:
        raise ValueError(f"{lm.ref.label} knows fewer than two of these words")
    rows = [index[w] for w in words]
    fig = cache.figure_for(("lesson-onehot", *lm.key, tuple(words)), viz.one_hot_vs_learned,
                           vectors[rows], words)
    cos = cosine_similarity(vectors[rows])
    off = ~np.eye(len(words), dtype=bool)
    i, j = np.unravel_index(int(np.where(off, cos, -np.inf).argmax()), cos.shape)
    numbers = {"model": lm.ref.label.split(" (")[0], "n": len(words), "d": int(vectors.shape[1]),
               "one_hot_max": 0.0, "lo": float(cos[off].min()), "hi": float(cos[off].max()),
               "pair": (words[i], words[j]), "pair_cos": float(cos[i, j]),
               "unknown": [w for w in dict.fromkeys(str(v["words"]).replace(",", " ").split()) if w not in index],
               **group_cosines(words, cos)}
    return View(fig, numbers, link={"text": " ".join(words)})


def group_cosines(words: list[str], cos: np.ndarray) -> dict:
    """The one-hot step's claim's numbers: ``group_means`` over ``WORD_GROUPS``."""
    return group_means(words, cos, {w: g for g, ws in WORD_GROUPS.items() for w in ws.split()})


def group_means(words: list[str], cos: np.ndarray, group: dict) -> dict:
    """Each word's group (``group``: word -> group; a word in none is left out): ``groups`` (group
    -> its words shown), the mean cosine of the pairs within a group and of the pairs across two
    groups (None where there is no such pair), and how many pairs of each."""
    of = [group.get(w) for w in words]
    within, across = [], []
    for a in range(len(words)):
        for b in range(a + 1, len(words)):
            if of[a] and of[b]:
                (within if of[a] == of[b] else across).append(float(cos[a, b]))
    shown: dict = {}
    for w, g in zip(words, of):
        if g:
            shown.setdefault(g, []).append(w)
    return {"groups": shown, "within": float(np.mean(within)) if within else None,
            "across": float(np.mean(across)) if across else None,
            "within_pairs": len(within), "across_pairs": len(across)}


def default_words(lm) -> str:
    """Up to ten of ``WORDS`` the model knows, else its first eight words."""
    from . import why

    labels = why.embeddings(lm)[1]
    known = set(labels)
    return " ".join([w for w in WORDS.split() if w in known][:10] or labels[:8])


def word2vec_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis.word2vec import GROUPS, analogy, neighbours

    from . import why

    w2v = why.word2vec_trained(None) or why.word2vec(None)
    words = [w for w in GROUPS if w in w2v.index]
    shown = [w2v.index[w] for w in words]
    source = why.word2vec_source(None, w2v)
    coords, explained = why._projection(source, tuple(shown), w2v.vectors[shown])
    fig = cache.figure_for((source, "lesson-map"), viz.embedding_map, coords, words,
                           [GROUPS[w] for w in words], explained=tuple(explained))
    word = v["word"] if v["word"] in w2v.index else words[0]
    near = neighbours(w2v.vectors, w2v.words, word, 3)
    best = analogy(w2v.vectors, w2v.words, "king", "man", "woman") if all(
        w in w2v.index for w in ("king", "man", "woman")) else []
    from tfviz.viz.data import cosine_similarity

    groups = group_means(words, cosine_similarity(w2v.vectors[shown]), GROUPS)
    numbers = {"words": len(w2v.words), "dim": int(w2v.config.dim), "loss": (float(w2v.losses[0]),
               float(w2v.losses[-1])), "word": word, "near": [(w, float(c)) for w, c in near],
               "analogy": [(w, float(c)) for w, c in best[:1]],
               "within": groups["within"], "across": groups["across"], "groups": len(groups["groups"])}
    return View(fig, numbers, "Each point is a word; colours are the groups the built-in corpus "
                "was written with (the model never saw them).")


def word_choices(lm) -> list[str]:
    from tfviz.analysis.word2vec import GROUPS

    return list(GROUPS)


# ------------------------------------------------------------------------------ 4. a bag of words
def bag_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis.order import bag_of_words

    a, b = str(v["a"]).strip(), str(v["b"]).strip()
    if not a or not b:
        raise ValueError("type two sentences")
    vocab, counts = bag_of_words([a.split(), b.split()])
    fig = cache.figure_for((a, b), viz.bag_of_words_bars, vocab, counts, [a, b])
    differ = [w for w, x, y in zip(vocab, counts[0], counts[1]) if x != y]
    numbers = {"a": a, "b": b, "words": len(vocab), "same": not differ, "differ": differ,
               "same_order": a.split() == b.split()}
    return View(fig, numbers, link={"a": a, "b": b})


# ------------------------------------------------------------------------------ the same word in context (issue 42)
def _typed(lm, text: str):
    """``text`` as the model reads it: its tokens wrapped like its task's examples (``[CLS] … [SEP]``,
    ``[BOS] …``), cut to ``LESSON_MAX``."""
    from tfviz.analysis import explorer

    choices = explorer.example_choices(cache.task_of(lm), 1)
    layout = explorer.layout_of(choices[0][1].tokens, lm.tokenizer.special_ids) if choices else \
        explorer.template_layout(lm.tokenizer)
    limit = min(explorer.length_limit(lm.config)[0], LESSON_MAX)
    return explorer.prepare_text(lm.tokenizer, text, *layout, limit=limit)


def context_numbers(lm, a: str, b: str, word: str) -> dict:
    """``word``'s vector in sentence ``a`` and in ``b`` (its first occurrence in each): the token's
    own embedding and the residual stream after every block, compared (cosine, and the difference's
    length over the vector's)."""
    pa, pb = _typed(lm, a), _typed(lm, b)
    wid = lm.tokenizer.token_to_id(word)
    if wid is None:
        raise ValueError(f"'{word}' is not in {lm.ref.label}'s vocabulary")
    if wid not in pa.ids or wid not in pb.ids:
        raise ValueError(f"'{word}' must appear in both sentences")
    ia, ib = pa.ids.index(wid), pb.ids.index(wid)
    L = lm.config.n_layers
    names = ("hook_embed", *(f"blocks.{l}.hook_resid_post" for l in range(L)))
    ra, rb = cache.record(lm, (pa.ids,), names), cache.record(lm, (pb.ids,), names)
    rows = []
    for label, name in zip(["embedding", *(f"after block {l}" for l in range(L))], names):
        x, y = ra[name][0, ia].astype(np.float64), rb[name][0, ib].astype(np.float64)
        cos = float(x @ y / max(np.linalg.norm(x) * np.linalg.norm(y), 1e-30))
        rows.append((label, cos, float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-30))))
    same_past = ia == ib and list(pa.ids[:ia + 1]) == list(pb.ids[:ib + 1])
    return {"word": word, "a": a, "b": b, "pos": (ia, ib), "rows": rows, "causal": bool(lm.config.causal),
            "same_past": same_past, "model": lm.ref.label.split(" (")[0],
            "past": " ".join(t for i, t in zip(pa.ids[:ia + 1], pa.tokens[:ia + 1])
                             if i not in set(lm.tokenizer.special_ids))}


def context_view(lm, v) -> View:
    from tfviz.viz import paired_bars

    a, b = str(v["a"]).strip(), str(v["b"]).strip()
    n = context_numbers(lm, a, b, shared_word(lm, a, b))
    labels, cos, gap = zip(*n["rows"])
    fig = cache.figure_for(("lesson-context", *lm.key, n["a"], n["b"], n["word"]), paired_bars, labels, gap, cos,
                           left_name="difference / length", right_name="cosine",
                           title=f"'{n['word']}' in sentence A against sentence B")
    return View(fig, n, "Bars: how far apart the word's two vectors are, relative to the vector's length "
                "(0 = identical); markers: their cosine (1 = the same direction).", link={"input": "text", "text": n["a"], "tab": "Heatmap"})


COMMON = {"the", "a", "an", "some", ".", ",", "and"}


def shared_word(lm, a: str, b: str) -> str:
    """The word the context step follows: the first word of ``a`` (not a common little word) that
    ``b`` also has and the model knows."""
    words_b = set(b.split())
    for w in a.split():
        if w in words_b and w not in COMMON and lm.tokenizer.token_to_id(w) is not None:
            return w
    for w in a.split():
        if w in words_b and lm.tokenizer.token_to_id(w) is not None:
            return w
    raise ValueError("the two sentences share no word this model knows: put one word in both")


# ------------------------------------------------------------------------------ 5-8. RNNs, paths
def _why_results() -> dict:
    from . import why

    return why.results()


def _why_frame(experiment: str, frame: str):
    from . import why

    r = why.results().get(experiment)
    if r is None:
        raise ValueError("the why experiments are not built here: run `python -m tfviz.zoo why`")
    return r[frame], why.results_key()


def recall_view(lm, v) -> View:
    from tfviz.viz.longrange import accuracy_vs_distance

    df, key = _why_frame("recall", "accuracy")
    fig = cache.figure_for(key, accuracy_vs_distance, df)
    return View(fig, {"rows": _ends(df, "distance", "accuracy"),
                      "trained": int(df[df["trained"]]["distance"].max()),
                      "chance": float(df["chance"].iloc[0])})


def _ends(df, x: str, y: str) -> dict:
    """model -> (first x, its y, last x, its y) of one measured curve per model."""
    out = {}
    for model, g in df.sort_values(x).groupby("model", sort=False):
        out[str(model)] = (float(g[x].iloc[0]), float(g[y].iloc[0]), float(g[x].iloc[-1]), float(g[y].iloc[-1]))
    return out


def gradient_view(lm, v) -> View:
    """The vanishing gradient as the lecture means it (issue 42): the answer's gradient reaching
    each earlier token relative to the one a step back, at initialisation and trained, for every
    model of the recall experiment on the same fresh sequences (``longrange.gradient_through_time``,
    measured by ``python -m tfviz.zoo why``)."""
    from tfviz.analysis.longrange import through_time_summary
    from tfviz.viz.longrange import gradient_through_time

    if "through_time" not in (_why_results().get("recall") or {}):
        raise ValueError("the recall experiment was measured without its models at initialisation: "
                         "run `python -m tfviz.zoo why` (or `why.remeasure(['recall'])`)")
    df, key = _why_frame("recall", "through_time")
    fig = cache.figure_for((key, "through_time"), gradient_through_time, df)
    return View(fig, say.gradient_numbers(through_time_summary(df)),
                "Dashed: the models before training (same seed); solid: trained. Each line is divided "
                "by its own value one step back, so a line's drop is how much of the signal is lost "
                "on the way back, whatever the loss's size.")


def bottleneck_view(lm, v) -> View:
    from tfviz.viz.longrange import accuracy_vs_length

    df, key = _why_frame("bottleneck", "accuracy")
    fig = cache.figure_for(key, accuracy_vs_length, df)
    L = int(df[df["trained"]]["length"].max())
    at = lambda n, col="accuracy": {str(m): float(g[g["length"] == n][col].iloc[0])  # noqa: E731
                                    for m, g in df.groupby("model", sort=False) if (g["length"] == n).any()}
    align = (_why_results().get("bottleneck") or {}).get("alignment")
    alignment = {} if align is None or not len(align) else {
        str(m): {int(r.length): float(r.alignment) for r in g.itertuples()} for m, g in align.groupby("model", sort=False)}
    from tfviz.zoo.why import BOTTLENECK

    attends = [m for m, (_, fields) in BOTTLENECK.models.items()
               if fields.get("attention", "additive") != "none"]  # a transformer's cross-attention too
    return View(fig, {"trained": L, "at": at(L), "next": at(L + 1), "shortest": at(int(df["length"].min())),
                      "next_tokens": at(L + 1, "token_accuracy"), "alignment": alignment, "attends": attends})


def paths_view(lm, v) -> View:
    from tfviz.viz.longrange import path_length_curves

    from tfviz.zoo.why import RECALL

    df, key = _why_frame("recall", "paths")
    fig = cache.figure_for(key, path_length_curves, df)
    layers = {m: int(fields.get("n_layers", 1)) for m, (_, fields) in RECALL.models.items()}
    return View(fig, {"rows": _ends(df, "n", "path_length"), "layers": layers})


# ------------------------------------------------------------------------------ 9-13. attention, heads
def _recorded(lm):
    from tfviz.analysis import explorer

    inp, link = lesson_input(lm)
    arrays = cache.record(lm, inp.key)
    site = explorer.sites(lm.config)[0]
    return inp, link, arrays, site


def qkv_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis import explorer

    inp, link, arrays, site = _recorded(lm)
    layer, head = parse_head(v["head"])
    q = int(v["query"]) if int(v["query"]) < len(inp.ids) else inp.query
    s = explorer.step_inputs(arrays, site, layer, head, q)
    table, ok, _ = explorer.step_table(s, inp.tokens, q)
    fig = cache.figure_for(("lesson-qkv", *lm.key, inp.key, layer, head, q), viz.step_through_figure,
                           s.q, s.K, s.V, inp.tokens, q, query_token=inp.tokens[q],
                           bias_row=s.bias_row, mask_row=s.mask_row,
                           title=f"Query '{inp.tokens[q]}' (pos {q}) step by step",
                           subtitle=f"layer {layer} · head {head}")
    w = np.asarray(table["softmax"], dtype=float)
    order = np.argsort(-w)
    d_soft, d_z = explorer.step_check(table["softmax"], explorer.step_through_output(table, s.V), s)
    numbers = {"query": (inp.tokens[q], q), "head": (layer, head), "d": len(s.q),
               "top": [(inp.tokens[j], int(j), float(table["q·k/√d"].iloc[j]), float(w[j])) for j in order[:2]],
               "masked": int((~s.mask_row).sum()), "keys": len(inp.tokens), "ok": bool(ok),
               "error": max(d_soft, d_z)}
    return View(fig, numbers, link=_attention_link(lm, link, "Step-through", layer, head, query=q))


def heatmap_view(lm, v) -> View:
    from tfviz import viz

    inp, link, arrays, site = _recorded(lm)
    layer, head = parse_head(v["head"])
    pattern = arrays[site.name(layer, "hook_pattern")][0, head]  # [q_pos, k_pos]
    fig = cache.figure_for(("lesson-heatmap", *lm.key, inp.key, layer, head), viz.head_heatmap,
                           pattern, inp.tokens, inp.tokens, title=f"layer {layer} · head {head}")
    q = inp.query
    j = int(pattern[q].argmax())
    numbers = {"head": (layer, head), "query": (inp.tokens[q], q), "top": (inp.tokens[j], j, float(pattern[q, j])),
               "rows": len(pattern), "row_sum_error": float(np.abs(pattern.sum(-1) - 1).max()),
               "sharp": float(pattern.max(-1).mean())}
    return View(fig, numbers, "Rows: the token doing the looking (query); columns: the tokens looked "
                "at (keys). Each row sums to 1.", link=_attention_link(lm, link, "Heatmap", layer, head))


def heads_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis import explorer

    inp, link, arrays, site = _recorded(lm)
    stack = explorer.layer_stack(arrays, site)  # [layer, head, q_pos, k_pos]
    fig = cache.figure_for(("lesson-heads", *lm.key, inp.key), viz.heads_grid, stack, inp.tokens,
                           title="Every layer × head on one sentence")
    q = inp.query
    targets = {(l, h): (inp.tokens[int(stack[l, h, q].argmax())], float(stack[l, h, q].max()))
               for l in range(stack.shape[0]) for h in range(stack.shape[1])}
    numbers = {"layers": int(stack.shape[0]), "heads": int(stack.shape[1]), "query": (inp.tokens[q], q),
               "targets": targets}
    return View(fig, numbers, "Each tile is one head's attention map; rows are queries, columns "
                "keys.", link=_attention_link(lm, link, "All heads"))


def it_heads_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.zoo.findings import strongest_heads

    d = cache.mission_weights(lm, int(v["sentence"]), v["pronoun"])
    fig = cache.figure_for(("lesson-it", *lm.key, int(v["sentence"]), v["pronoun"]), viz.pronoun_probe,
                           d["weights"], d["tokens"], d["candidates"], pronoun_index=d["q_pos"],
                           title=f"Where does '{d['tokens'][d['q_pos']]}' look, in every head?")
    live = strongest_heads(d)
    w = np.asarray(d["weights"])
    numbers = {"text": d["text"], "pronoun": (d["tokens"][d["q_pos"]], d["q_pos"]),
               "heads": {n: (x["layer"], x["head"], x["weight"]) for n, x in live.items()},
               "on": {n: {m: float(w[x["layer"], x["head"], list(pos)].sum()) for m, pos in d["candidates"].items()}
                      for n, x in live.items()},
               "positions": {n: [int(q) for q in pos] for n, pos in d["candidates"].items()},
               "causal": bool(lm.config.causal)}
    sentence = int(v["sentence"])
    return View(fig, numbers, link={"input": "example", "example": sentence - 1, "tab": "Pronoun probe",
                                    "probe": f"Mission sentence {sentence}", "pquery": int(d["q_pos"])})


def _got(value, what: str):
    """A shared computation's value; None (another tab of this session is computing a grid, said
    by ``effects.computed``) as the lesson's own refusal."""
    if value is None:
        raise ValueError(f"{what} is not available right now (another tab of yours is computing one); "
                         "come back to this step in a moment")
    return value


def _head_grid(lm, inp, site):
    """Every head switched off on the task's held-out data (or this input): the Effects tab's own
    grid for the same model (one shared result, its key and settings)."""
    from tfviz.analysis import effects as ef

    from . import effects

    data = "task" if lm.task_name in effects.TASK_DATA else "input"
    key = ("heads", data, site.label, inp.key if data == "input" else None)  # the Effects tab's
    df = effects.computed(lm, key, lambda p, m: ef.head_effects(
        m, effects._probe(lm, inp, data, m), stack=site.stack, attention=site.attention, progress=p,
        spread=data != "input"), f"Switching each of {lm.config.n_layers * lm.config.n_heads} heads off")
    return _got(df, "The head grid"), data, key


def it_effects_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis import effects as ef

    from . import effects

    inp, link, _, site = _recorded(lm)
    df, data, key = _head_grid(lm, inp, site)
    metrics = list(df.attrs["baseline"])
    m = "pairwise accuracy" if "pairwise accuracy" in metrics else metrics[0]
    higher = ef.higher_is_better(df, m)
    delta = df[f"Δ {m}"].to_numpy()
    worst = int(np.argmin(delta) if higher else np.argmax(delta))
    pattern = df.attrs.get("pattern", [])
    looks = None
    if pattern:
        p = pattern[0]
        i = int(df[p].to_numpy().argmax())
        looks = (str(df["name"].iloc[i]), p, float(df[p].iloc[i]), float(delta[i]))
    fig = cache.figure_for(("lesson-effects", *lm.key, key, m), viz.effect_heatmap,
                           ef.headline_grid(df, f"Δ {m}"), metric=m, baseline=df.attrs["baseline"][m],
                           higher=higher, title=f"Each head switched off → change in {m}")
    numbers = {"metric": m, "baseline": float(df.attrs["baseline"][m]), "on": effects.TASK_DATA.get(
               lm.task_name, "this sentence") if data == "task" else "this sentence",
               "worst": (str(df["name"].iloc[worst]), float(delta[worst])), "looks": looks}
    return View(fig, numbers, "A head switched off: its output set to zero for the whole input, "
                "every other head left as it was.", link=_attention_link(lm, link, "Effects"))


def it_choice_view(lm, v) -> View:
    """The agreement model (issue 31): the head whose pattern picks the referent most, its pattern
    from the final pronoun on the chosen mission sentence beside what the model answers with each
    head switched off, and the held-out pairwise accuracy with that head off."""
    from tfviz import viz
    from tfviz.zoo import causal as zc

    from . import effects

    sentence = int(v["sentence"])
    inp, link, _, site = _recorded(lm)
    df, _, _ = _head_grid(lm, inp, site)
    task = cache.task_of(lm)
    s = _got(effects.computed(lm, ("findings_agreement_sentence", sentence),  # Findings' own result
                              lambda p, m: zc.mission_effects(m, task, None, [task.mission_sentences()[sentence - 1]])[0],
                              "Switching each head off on the sentence"), "The sentence's answers")
    pick = df.attrs["pattern"][0]  # picks the referent over the other noun
    row = df.iloc[int(df[pick].to_numpy().argmax())]
    head = str(row["name"])
    layer, h = int(row["layer"]), int(row["head"])
    a = s["answers"].set_index("heads off")
    probs = s["answers"][[f"P({w})" for w in s["candidates"]]].to_numpy()
    fig = cache.figure_for(("lesson-choice", *lm.key, sentence, head), viz.pattern_and_effect,
                           s["pattern"][layer, h], s["tokens"], s["candidates"], s["positions"],
                           list(s["answers"]["heads off"]), probs, head=head, query=s["query"],
                           title=f"{head}: where the pronoun looks, and each head switched off")
    m = zc.PAIR
    referent = s["candidates"][s["referent"]]
    numbers = {"text": s["text"], "head": head, "referent": referent, "candidates": list(s["candidates"]),
               "weight": float(s["weights"][referent][layer, h]),
               "before": (str(a.loc["none", "answer"]), float(a.loc["none", "P(answer)"])),
               "after": (str(a.loc[head, "answer"]), float(a.loc[head, "P(answer)"])),
               "pairwise": (float(df.attrs["baseline"][m]), float(row[m])),
               "on": effects.TASK_DATA.get(lm.task_name, "held-out sentences")}
    return View(fig, numbers, "Left: the chosen head's attention from the pronoun at the end. Right: "
                "the probability of each noun's answer with every head on, then with each head "
                "switched off in turn.", link=_attention_link(lm, link, "Effects", layer, h))


# ------------------------------------------------------------------------------ the block (issue 42)
def _last(lm) -> int:
    return len(lesson_input(lm)[0].ids) - 1


def block_numbers(lm, inp, pos: int) -> dict:
    """The block step's numbers from one recording of ``inp``: the residual stream at ``pos``
    after the embeddings and after each attention and MLP (its size, and the probability the
    model's own read-out — final norm, unembedding — gives there to the token the model finally
    predicts), how far the stream is from a plain sum, and what ln1 hands attention."""
    import torch

    from tfviz.analysis.attribution import readout

    L = lm.config.n_layers
    names = [f"blocks.{l}.{k}" for l in range(L) for k in (
        "hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out", "hook_mlp_out",
        "ln1.hook_normalized", "ln1.hook_scale")]
    r = cache.record(lm, inp.key, tuple(names))
    b = lambda l, k: r[f"blocks.{l}.{k}"][0].astype(np.float64)  # noqa: E731
    err = 0.0
    for l in range(L):
        for after, before, part in (("hook_resid_mid", "hook_resid_pre", "hook_attn_out"),
                                    ("hook_resid_post", "hook_resid_mid", "hook_mlp_out")):
            x = b(l, after)
            err = max(err, float(np.abs(x - b(l, before) - b(l, part)).max() / max(np.abs(x).max(), 1e-12)))
    stream = [("embeddings", b(0, "hook_resid_pre"))]
    for l in range(L):
        stream += [(f"L{l} + attention", b(l, "hook_resid_mid")), (f"L{l} + MLP", b(l, "hook_resid_post"))]
    xs = torch.tensor(np.stack([x[pos] for _, x in stream]), dtype=torch.float32)
    with lm.lock, torch.no_grad():
        probs = torch.softmax(readout(lm.model, xs).float(), -1).numpy()  # [stage, vocab]
    top = int(probs[-1].argmax())
    normed = np.concatenate([b(l, "ln1.hook_normalized").reshape(-1, lm.config.d_model) for l in range(L)])
    scale = np.concatenate([b(l, "ln1.hook_scale").ravel() for l in range(L)])
    rms = lm.config.normalization == "rmsnorm"  # RMSNorm divides by the root mean square, never centres
    spread = np.sqrt((normed ** 2).mean(-1)) if rms else normed.std(-1)
    return {"query": (inp.tokens[pos], pos), "layers": L, "norm": lm.config.norm,
            "next": lm.tokenizer.display(top), "sum_error": err,
            "stages": [(label, float(np.linalg.norm(x[pos])), float(p[top])) for (label, x), p in zip(stream, probs)],
            "ln": {"kind": "rmsnorm" if rms else "layernorm", "mean": 0.0 if rms else float(np.abs(normed.mean(-1)).max()),
                   "spread": (float(spread.min()), float(spread.max())),
                   "given": (float(scale.min()), float(scale.max()))}}


def block_view(lm, v) -> View:
    from tfviz.viz import paired_bars

    inp, link = lesson_input(lm)
    pos = min(max(0, int(v["pos"])), len(inp.ids) - 1)
    n = block_numbers(lm, inp, pos)
    labels, sizes, probs = zip(*n["stages"])
    fig = cache.figure_for(("lesson-block", *lm.key, inp.key, pos), paired_bars, labels, sizes, probs,
                           left_name="size of the stream", right_name=f"P('{n['next']}')",
                           title=f"The residual stream at '{inp.tokens[pos]}', block by block")
    return View(fig, n, f"Bars: the size (length) of the stream's vector at pos {pos} after each part; "
                f"markers: the probability of '{n['next']}', the model's final next token, if the stream "
                "were read out there (the model's own final norm and unembedding: the logit lens).",
                link=_attention_link(lm, link, "Effects", view="Logit lens"))


TEMPERATURES = (0.0, 0.5, 1.0, 2.0)
TOP_KS = (0, 3, 10)
SHOWN = 8  # candidate tokens the next-token step draws


def next_token_numbers(logits: np.ndarray, temperature: float, top_k: int) -> dict:
    """Logits -> probabilities as ``tfviz.model.decoding.sample_next`` draws from them: softmax at
    temperature 1 (``plain``), at ``temperature`` alone, and with ``top_k`` (0: off) too (greedy at
    temperature 0: the argmax gets 1)."""
    z = logits.astype(np.float64)

    def soft(x):
        e = np.exp(x - x.max())
        return e / e.sum()

    plain = soft(z)
    if temperature == 0:
        warm = chosen = np.eye(len(z))[int(z.argmax())]
    else:
        warm = soft(z / temperature)
        cut = z.copy()
        if top_k and top_k < len(z):
            cut[z < np.sort(z)[-top_k]] = -np.inf
        chosen = soft(cut / temperature)
    return {"plain": plain, "warm": warm, "chosen": chosen}


def next_token_view(lm, v) -> View:
    from tfviz.viz import next_token_bars

    inp, link = lesson_input(lm)
    t, k = float(v["temperature"]), int(v["top_k"])
    logits = cache.logits(lm, (inp.ids,))[0, -1, :lm.tokenizer.vocab_size]
    d = next_token_numbers(logits, t, k)
    order = np.argsort(-d["plain"])
    shown = order[:SHOWN]
    names = [lm.tokenizer.display(int(i)) for i in shown]
    setting = "greedy (temperature 0)" if t == 0 else f"temperature {t:g}" + (
        f", top-k {k}" if k else " (unchanged)" if t == 1 else "")
    fig = cache.figure_for(("lesson-next", *lm.key, inp.key, t, k), next_token_bars, names, d["plain"][shown],
                           d["chosen"][shown], chosen_name=setting,
                           title=f"The next token after '{inp.tokens[-1]}'")
    entropy = lambda p: float(np.exp(-(p[p > 0] * np.log(p[p > 0])).sum()))  # noqa: E731
    top = int(order[0])
    numbers = {"query": (inp.tokens[-1], len(inp.ids) - 1), "vocab": int(len(logits)),
               "logits": (float(logits.max()), float(logits.min())), "top": names[0],
               "runners": [(names[i], float(d["plain"][shown[i]])) for i in (1, 2)],
               "temperature": t, "top_k": k, "p_top": (float(d["plain"][top]), float(d["warm"][top])),
               "kept": int((d["chosen"] > 0).sum()), "choices": (entropy(d["plain"]), entropy(d["chosen"]))}
    return View(fig, numbers, f"The {SHOWN} most likely tokens of {len(logits)}; the Generate page "
                "draws from these probabilities token after token.",
                link={"temperature": t, "top_k": k, "n": 16})


def _temperature_label(t, lm) -> str:
    return "0 (greedy)" if t == 0 else f"{t:g}"


def _top_k_label(k, lm) -> str:
    return "off" if k == 0 else str(k)


# ------------------------------------------------------------------------------ cross-attention (issue 42)
def _translate_head(lm) -> str:
    """The card's best-aligned head (``zoo.findings``), else layer 0's first."""
    from tfviz.paths import zoo_dir

    best = ((cache.zoo_cards(zoo_dir()).get(lm.ref.label.split(" (")[0]) or {}).get("finding") or {}).get("best_head")
    return f"L{best['layer']}·H{best['head']}" if best and best.get("head") is not None else "L0·H0"


def _translate_sentences(lm) -> list[int]:
    return list(range(min(6, len(cache.task_of(lm).examples("test")))))


def _short(text: str, words: int = 3) -> str:
    """A select box's label that fits a presented 1024 px window: the first words of ``text``."""
    w = text.split()
    return " ".join(w[:words]) + (" …" if len(w) > words else "")


def _translate_label(i, lm) -> str:
    return f"{int(i) + 1}: {_short(cache.task_of(lm).examples('test')[int(i)].text)}"


def cross_numbers(d: dict, head: str) -> dict:
    """The cross-attention step's numbers from ``zoo.findings.translate_example``'s dict: per
    expected (target position, source position) pair, the word the decoder is about to write
    there, its row's strongest source word and the weight on the right one; two pairs whose order
    French swaps (``crossing``: their indices in ``pairs``)."""
    p, src, tgt = np.asarray(d["pattern"]), d["src_tokens"], d["tgt_tokens"]
    pairs = []
    for q, s in d["alignment"]:
        j = int(p[q].argmax())
        pairs.append({"pos": int(q), "writes": tgt[q + 1] if q + 1 < len(tgt) else tgt[q], "src": src[s],
                      "src_pos": int(s), "argmax": j, "argmax_tok": src[j], "weight": float(p[q, s])})
    crossing = next(([a, b] for a in range(len(pairs)) for b in range(len(pairs))
                     if pairs[a]["pos"] < pairs[b]["pos"] and pairs[a]["src_pos"] > pairs[b]["src_pos"]), None)
    return {"text": d["text"], "target": d["target"], "head": head, "src_len": len(src),
            "pairs": pairs, "crossing": crossing}


def cross_view(lm, v) -> View:
    from tfviz.viz import cross_attention_alignment

    layer, head = parse_head(v["head"])
    index = int(v["sentence"])
    d = cache.translate_example(lm, index, layer, head)
    fig = cache.figure_for(("lesson-cross", *lm.key, index, layer, head), cross_attention_alignment,
                           d["pattern"], d["src_tokens"], d["tgt_tokens"], d["alignment"],
                           title=f"Cross-attention, layer {layer} · head {head}")
    return View(fig, cross_numbers(d, f"layer {layer} · head {head}"),
                "Rows: the decoder at each French position (it writes the next word); columns: the "
                "encoder's English words. Open squares: the English word each French word translates.",
                link={"finding": "Cross-attention", "index": index, "layer": layer, "head": head})


# ------------------------------------------------------------------------------ 14-17. positions
UNMASKED = "no positions and no mask"


def order_view(lm, v) -> View:
    from tfviz import viz

    from . import why
    from .models import zoo_model

    a, b = str(v["a"]).strip(), str(v["b"]).strip()
    tables, keys = {}, []
    for name, label in (("pos-none", "no positions"), ("pos-learned", "learned positions")):
        m = zoo_model(name)
        if m is not None:
            tables[label] = why.order(m, a, b)[0]
            keys.append(m.key)
    if not tables:
        raise ValueError("the shipped pos-none / pos-learned models are missing")
    none = tables.get("no positions")
    unmasked = None
    if none is not None and none.attrs.get("causal"):  # attention alone: the same weights, no mask
        unmasked = tables[UNMASKED] = why.order_unmasked(zoo_model("pos-none"), a, b)
    fig = cache.figure_for((a, b, *keys, "unmasked"), viz.order_bars, tables)
    first = {label: float(t["matched"].iloc[0]) for label, t in tables.items()}
    last = {label: float(t["matched"].iloc[-1]) for label, t in tables.items()}
    numbers = {"a": a, "b": b, "first": first, "last": last,
               "stage": str(next(iter(tables.values()))["stage"].iloc[-1]),
               "causal": bool(none.attrs.get("causal")) if none is not None else None,
               "unmasked": None if unmasked is None else {
                   "label": UNMASKED, "relative": float(unmasked["relative"].max()),
                   "most": float(unmasked["matched"].max())}}
    return View(fig, numbers, "Each bar: the largest difference between the two sentences' vectors "
                "for the same word, after a layer (log scale).", link={"a": a, "b": b})


def learned_view(lm, v) -> View:
    import tfviz
    from tfviz import viz
    from tfviz.analysis import positional as ap

    table = ap.stack_tables(tfviz.positional_tables(lm.model), "")["learned"].numpy()[:256]
    fig = cache.figure_for(("lesson-learned", *lm.key), viz.position_similarity, table,
                           title=f"Cosine similarity between {lm.ref.label.split(' (')[0]}'s learned positions")
    cos = viz.cosine_similarity(table)
    n = len(table)
    far = cos[np.triu_indices(n, k=max(1, n // 2))]  # pairs at least half the table apart
    numbers = {"model": lm.ref.label.split(" (")[0], "rows": n, "max_len": int(lm.config.max_len),
               "neighbour": float(np.mean([cos[i, i + 1] for i in range(n - 1)])),
               "far_gap": max(1, n // 2), "far": float(np.mean(far)), "far_abs": float(np.mean(np.abs(far))),
               "far_negative": float(np.mean(far < 0)), "far_pairs": int(far.size)}
    return View(fig, numbers, link={"section": "Learned"})


def sinusoidal_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis import positional as ap

    d, n = int(v["d"]), int(v["n"])
    table = ap.scheme_tables("sinusoidal", d_model=d, n=n)["sinusoidal"].numpy()
    fig = cache.figure(viz.pe_matrix, table, title=f"Sinusoidal table: {n} positions × d_model {d}")
    rows = table / np.linalg.norm(table, axis=1, keepdims=True)
    gaps = np.linalg.norm(table[:, None] - table[None], axis=-1)[np.triu_indices(n, k=1)]
    numbers = {"d": d, "n": n, "fast": 2 * np.pi, "slow": float(2 * np.pi * 10000 ** ((d - 2) / d)),
               "neighbour": float(np.mean(np.sum(rows[:-1] * rows[1:], axis=1))),
               "closest": float(gaps.min())}
    return View(fig, numbers, "Rows: positions; columns: dimensions. Left columns change fast, right "
                "ones slowly.", link={"section": "Sinusoidal", "d": d, "n": n})


def extrapolation_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.paths import zoo_dir
    from tfviz.zoo import findings as zf

    cards = cache.zoo_cards(zoo_dir())
    df = zf.extrapolation_frame(cards, required=True)
    L = zf.train_length(cards)
    fig = cache.figure(viz.extrapolation_curves, df, L, title="Loss vs evaluation length (card)")
    order = zf.positional_ordering(df, L)
    numbers = {"train": L, "rows": [(r.scheme, float(r.loss_1x), float(r.loss_4x)) for r in order.itertuples()]}
    return View(fig, numbers, "Measured when the shipped models were built; the dashed line is the "
                "length they trained on.", link={"finding": "Positional extrapolation"})


# ------------------------------------------------------------------------------ 18. RoPE
def rope_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis import positional as ap
    from tfviz.analysis.rope import rope_score_grid

    inp, link = lesson_input(lm)
    layer, head = parse_head(v["head"])
    arrays = cache.record(lm, inp.key, ap.qk_names(layer, ""))
    m, n = len(inp.ids) - 1, 0
    q_vec, k_vec, model_score = ap.recorded_qk(arrays, layer, head, m, n, "")
    _, freqs = ap.rope_setup(lm.model)
    size = min(48, max(16, len(inp.ids)))
    grid = rope_score_grid(q_vec, k_vec, freqs, size, lm.config.rope_pairs).numpy()
    fig = cache.figure_for(("lesson-rope", *lm.key, inp.key, layer, head), viz.rope_relative_scores, grid,
                           title=f"q of '{inp.tokens[m]}' · k of '{inp.tokens[n]}' at every (m, n)")
    spread = max(float(np.ptp(np.diagonal(grid, offset=o))) for o in range(-size + 1, size))
    at = {d: float(grid[d, 0]) for d in (0, 1, 4, min(16, size - 1))}
    own = rope_score_grid(q_vec, k_vec, freqs, m + 1, lm.config.rope_pairs).numpy()[m, n]
    numbers = {"q": inp.tokens[m], "k": inp.tokens[n], "head": (layer, head), "spread": spread,
               "by_distance": at, "model": (m, n, float(model_score), float(own))}
    return View(fig, numbers, link=_attention_link(lm, link, "", layer, head, section="RoPE"))


# ------------------------------------------------------------------------------ 19-20. masks
def _mask_input(lm):
    inp, link = lesson_input(lm)
    return inp, link


def nopeek_view(lm, v) -> View:
    import torch

    from tfviz import viz
    from tfviz.analysis.masks_demo import edit_token, logit_change, replacement_choices

    inp, link = _mask_input(lm)
    x = list(inp.ids)
    if len(x) < 2:
        raise ValueError("the text needs at least two tokens")
    pos = min(max(1, int(v["pos"])), len(x) - 1)
    special = set(lm.tokenizer.special_ids)
    options = [i for i in replacement_choices(min(lm.tokenizer.vocab_size, lm.config.vocab_size), x)
               if i not in special] or [x[pos]]
    new = options[(options.index(x[pos]) + 1) % len(options)] if x[pos] in options else options[0]
    before = torch.from_numpy(cache.logits(lm, (x,)))
    after = torch.from_numpy(cache.logits(lm, (edit_token(x, pos, new),)))
    delta = logit_change(before, after)
    labels = list(inp.tokens)
    labels[pos] = f"{labels[pos]}→{lm.tokenizer.display(new)}"
    fig = cache.figure_for(("lesson-nopeek", *lm.key, inp.key, pos), viz.logit_change_bars, delta, labels, pos,
                           title=f"Max |Δ logit| per position after editing position {pos}")
    numbers = {"pos": pos, "old": inp.tokens[pos], "new": lm.tokenizer.display(new),
               "before": float(delta[:pos].max()), "after": float(delta[pos:].max()), "causal": bool(lm.config.causal)}
    return View(fig, numbers, "Two real forward passes, the second with one token replaced.",
                link={**link, "edit": pos})


def mask_view(lm, v) -> View:
    from tfviz import viz
    from tfviz.analysis.masks_demo import MaskChoice, blocked_mass, effective_mask

    inp, link = _mask_input(lm)
    n, causal = len(inp.ids), bool(lm.config.causal)
    w = min(max(1, int(v["window"])), n)
    choice = MaskChoice(v["kind"], w, 1, 3)
    mask = effective_mask(choice, n, causal, None).numpy() if v["kind"] != "padding" else None
    if mask is None:
        raise ValueError("padding is shown on the Masks page (it needs pad tokens added)")
    masked = cache.mask_patterns(lm, (tuple(inp.ids),), None, choice.applied_window, choice.applied_global, "")
    fig = cache.figure_for(("lesson-mask", n, causal, v["kind"], w), viz.mask_grid, mask, inp.tokens,
                           title=f"{v['kind']} mask on {n} tokens")
    numbers = {"kind": v["kind"], "n": n, "allowed": int(mask.sum()), "most": int(mask.sum(1).max()),
               "window": choice.applied_window, "asked_window": w,
               "blocked_weight": float(blocked_mass(masked, mask)),
               "causal": causal}
    return View(fig, numbers, "Blue: a query (row) may look at that key (column); grey: blocked.",
                link={**link, "kind": v["kind"], "window": w})


def mask_kinds(lm) -> list[str]:
    from tfviz.analysis.masks_demo import KINDS

    return [k for k in KINDS if k != "padding"]


# ------------------------------------------------------------------------------ the taxonomy (issue 42)
FAMILY_N = 7  # positions each mask of the taxonomy step shows (the shortest input's)
FAMILY = (("mlm", "encoder-only"), ("lm", "decoder-only"), ("translate", "encoder–decoder"))


def _measured_mask(stack: np.ndarray, n: int) -> np.ndarray:
    """[layer, head, q, k] weights -> which pairs any head of any layer gives a weight above 0: the
    mask the model really ran under (a blocked score is -inf, its weight exactly 0)."""
    return (stack[:, :, :n, :n] > 0).any(axis=(0, 1))


def family_masks() -> dict:
    """The three families' masks as the shipped models run them, measured from one recording each
    (mlm's and translate's first test sentence, lm's lesson input): "model · stack" -> (family, expected kind,
    allowed [q, k] over the first ``FAMILY_N`` positions)."""
    from .models import zoo_model

    out = {}
    for name, family in FAMILY:
        m = zoo_model(name)
        if m is None:
            continue
        L = m.config.n_layers
        if name == "translate":
            ex = cache.task_of(m).examples("test")[0]
            sites = (("encoder", "attn", "encoder"), ("decoder", "attn", "decoder"),
                     ("decoder", "cross_attn", "cross"))
            names = tuple(f"{st_}.blocks.{l}.{a}.hook_pattern" for st_, a, _ in sites for l in range(L))
            r = cache.record(m, (ex.src, ex.tokens), names)
            n = min(FAMILY_N, len(ex.src), len(ex.tokens))
            for st_, a, label in sites:
                stack = np.stack([r[f"{st_}.blocks.{l}.{a}.hook_pattern"][0] for l in range(L)])
                kind = "causal" if label == "decoder" else "full"
                out[f"{name} · {label}"] = (family, kind, _measured_mask(stack, n))
        else:
            ids = list(cache.task_of(m).examples("test")[0].meta["original"]) if name == "mlm" else \
                list(lesson_input(m)[0].ids)
            names = tuple(f"blocks.{l}.attn.hook_pattern" for l in range(L))
            r = cache.record(m, (ids,), names)
            stack = np.stack([r[x][0] for x in names])
            out[f"{name} · {'encoder' if family == 'encoder-only' else 'decoder'}"] = (
                family, "full" if family == "encoder-only" else "causal",
                           _measured_mask(stack, min(FAMILY_N, len(ids))))
    if not out:
        raise ValueError("the shipped mlm / lm / translate models are missing")
    return out


def _tile(label: str) -> str:
    """A tile's name on two short lines ("translate · cross" -> "trans.<br>cross"): one a tile's
    width holds at 1024 px, unrotated."""
    model, part = label.split(" · ")
    return f"{'trans.' if model == 'translate' else model}<br>{part}"


def family_figure(masks: dict):
    """``viz.masks_side_by_side`` with the tiles' names under the grid, unrotated (on top, rotated,
    they ran into the title)."""
    from tfviz.viz import masks_side_by_side

    fig = masks_side_by_side(masks, title="Who may look at whom, measured")
    fig.update_xaxes(side="bottom", tickangle=0, title=dict(text="mask of (trans. = translate)"))
    fig.update_layout(margin=dict(t=70))
    return fig


def family_view(lm, v) -> View:
    fam = family_masks()
    n = min(m.shape[0] for _, _, m in fam.values())
    shown = {label: m[:n, :n] for label, (_, _, m) in fam.items()}
    fig = cache.figure(family_figure, {_tile(k): m for k, m in shown.items()})
    rows = {}
    for label, (family, kind, m) in fam.items():
        m = m[:n, :n]
        upper, lower = np.triu(np.ones_like(m, dtype=bool), 1), np.tril(np.ones_like(m, dtype=bool))
        rows[label] = {"family": family, "expected": kind, "allowed": int(m.sum()), "pairs": int(m.size),
                       "ahead": int((m & upper).sum()), "behind": int((m & lower).sum()),
                       "ahead_pairs": int(upper.sum()), "behind_pairs": int(lower.sum())}
    return View(fig, {"n": n, "rows": rows},
                "Measured, not drawn: a cell is blue when some head of some layer gave that query–key "
                "pair a weight above zero on a real input, grey when every weight there was exactly 0.",
                link={"kind": "causal / full"})


# ------------------------------------------------------------------------------ BERT (issue 42)
MLM_SENTENCES = 6  # test sentences the masked-word step offers


def _mlm_sentences(lm) -> list[int]:
    return list(range(min(MLM_SENTENCES, len(cache.task_of(lm).examples("test")))))


def _mlm_label(i, lm) -> str:
    return f"{int(i) + 1}: {_short(cache.task_of(lm).examples('test')[int(i)].text)}"


def _mlm_longest(lm) -> int:
    test = cache.task_of(lm).examples("test")
    return max(len(test[i].meta["original"]) - 2 for i in _mlm_sentences(lm))


def mlm_numbers(lm, index: int, word: int) -> tuple[dict, dict]:
    """Test sentence ``index`` of a masked-language model's task, its ``word``-th word (1 = the
    first, clamped to the sentence) replaced by [MASK]: the model's guesses there (top 5, the
    hidden word's probability and rank) and where the [MASK] looks in every head (weight on the
    words before and after it); and the figure's data."""
    tok = lm.tokenizer
    ex = cache.task_of(lm).examples("test")[index]
    original = list(ex.meta["original"])  # [CLS] w1 .. wn [SEP]
    n = len(original) - 2
    m = min(max(1, int(word)), n)
    ids = list(original)
    ids[m] = tok.mask_id
    p = cache.logits(lm, (ids,))[0, m, :tok.vocab_size].astype(np.float64)
    p = np.exp(p - p.max())
    p /= p.sum()
    order = np.argsort(-p)
    stack = np.stack([a[0] for _, a in sorted(
        (int(k.split(".")[1]), a) for k, a in cache.record(lm, (ids,)).items() if k.endswith("attn.hook_pattern"))])
    row = stack[:, :, m, :]  # [layer, head, k_pos]
    before, after = list(range(1, m)), list(range(m + 1, n + 1))
    tokens = tok.tokens_of(ids)
    numbers = {"text": ex.text, "hidden": tok.display(original[m]), "pos": m, "words": n,
               "guesses": [(tok.display(int(i)), float(p[i])) for i in order[:5]],
               "p_hidden": float(p[original[m]]), "rank": int((p > p[original[m]]).sum()) + 1,
               "before": float(row[:, :, before].sum(-1).max()) if before else None,
               "after": float(row[:, :, after].sum(-1).max()) if after else None,
               "before_mean": float(row[:, :, before].sum(-1).mean()) if before else None,
               "after_mean": float(row[:, :, after].sum(-1).mean()) if after else None,
               "causal": bool(lm.config.causal)}
    candidates = {k: v for k, v in (("words before", before), ("words after", after)) if v}
    return numbers, {"weights": row, "tokens": tokens, "candidates": candidates, "m": m}


def mlm_view(lm, v) -> View:
    from tfviz import viz

    index = int(v["sentence"])
    n, d = mlm_numbers(lm, index, int(v["word"]))
    fig = cache.figure_for(("lesson-mlm", *lm.key, index, d["m"]), viz.pronoun_probe, d["weights"], d["tokens"],
                           d["candidates"], pronoun_index=d["m"],
                           title=f"Where does [MASK] (pos {d['m']}) look, in every head?")
    guesses = ", ".join(f"<b>{html_escape(w)}</b> {x:.2f}" if w == n["hidden"] else f"{html_escape(w)} {x:.2f}"
                        for w, x in n["guesses"])
    return View(fig, n, "Left: the [MASK]'s attention row in every layer and head; right: how much of it "
                "goes to the words before and after the hidden word.",
                html=f"<p style='margin:0.2em 0'>Hidden: <b>{html_escape(n['hidden'])}</b> · the model's "
                     f"guesses: {guesses}</p>",
                link={"input": "text", "tab": "All heads", "query": d["m"],
                      "text": " ".join("[MASK]" if i == d["m"] else w for i, w in enumerate(d["tokens"])
                                       if 0 < i < len(d["tokens"]) - 1)})


def html_escape(text: str) -> str:
    import html

    return html.escape(str(text))


# ------------------------------------------------------------------------------ 21-23. cost
def cost_view(lm, v) -> View:
    from tfviz.bench.attention import LABELS
    from tfviz.bench import live
    from tfviz.viz import cost_figure

    from . import bench

    dev = bench.device()
    ref = bench.reference(dev) or bench.reference("cpu")
    if ref is None:
        raise ValueError("no reference measurement is shipped (docs/bench/)")
    df, meta = ref
    pass_ = "fwd" if "fwd" in set(df["pass"]) else df["pass"].iloc[0]
    clock = live.time_column(meta.get("device", "cpu"), meta.get("threads"), df.columns)
    kind = v["what"]
    col = clock[0] if kind == "time" else "peak_bytes"
    fig = cache.figure(cost_figure, kind, df, pass_, LABELS, **({"time_col": clock[0], "y_title":
                       f"{clock[1]} per call (s)"} if kind == "time" else {}))
    numbers = {"what": kind, "machine": live.describe(meta), "rows": {}}
    d = df[(df["pass"] == pass_) & (df["skipped"].astype(str) == "")]
    for variant, g in d[d["variant"].isin(CONTRAST)].groupby("variant", sort=False):
        g = g.sort_values("n").dropna(subset=[col])
        if len(g) >= 2:
            numbers["rows"][LABELS.get(variant, variant)] = (int(g["n"].iloc[-2]), float(g[col].iloc[-2]),
                                                             int(g["n"].iloc[-1]), float(g[col].iloc[-1]))
    return View(fig, numbers, f"Reference measured on {live.describe(meta)} (the Cost page "
                "measures this machine).")


def _sink_windows(lm) -> list[int]:
    from . import sinks as ui_sinks

    return ui_sinks.windows(lm)


def _sink_window_default(lm) -> int:
    from . import sinks as ui_sinks

    return ui_sinks.default_window(lm)


def sinks_view(lm, v) -> View:
    from tfviz.analysis import sinks
    from tfviz.viz import streaming_curves

    from . import sinks as ui_sinks

    with_window = int(v["window"]) if v.get("window") else None
    r = ui_sinks.report(lm, with_window)   # the Masks page's own measurement, cached per server
    s, story = r["settings"], r["story"]
    fig = cache.figure_for(("lesson-sinks", *lm.key, s["window"]), streaming_curves, r["curves"],
                           train_length=s["train_length"], window=s["window"],
                           title=f"Loss per position, {s['tokens']} tokens of fresh text")
    numbers = {k: story[k] for k in ("label", "train_length", "window", "loss_far", "gap", "kmax",
                                     "sink_heads", "heads", "top_head", "top_share", "top_even",
                                     "window_blows_up", "sinks_close", "signature", "end")}
    numbers.update(sequences=s["sequences"], sink_ratio=sinks.SINK, blowup=sinks.BLOWUP,
                   close=sinks.CLOSE)
    return View(fig, numbers, f"{s['sequences']} fresh sequences of the built-in grammar (a seed no "
                "training used), each point the mean over the last few positions. The paper: "
                f"{sinks.PAPER}", link={"sinks": True, "sink_window": s["window"]})


CONTRAST = ("full-explicit", "window-banded")  # the notice's two variants: every score vs the band


KV_FAMILY = ("lm", "lm-gqa", "lm-mqa")  # MHA, GQA, MQA: the same language model, K/V heads shared
KV_WINDOWS = 64  # validation windows each model's loss is measured on, now


def kv_row(lm) -> dict:
    """One model of the family, measured now: its KV cache after reading the lesson input (one
    generation step with the cache: bytes per cached position) beside the formula from its config,
    and its loss on the first ``KV_WINDOWS`` validation windows of its task."""
    from tfviz.analysis.cost import kv_cache_bytes
    from tfviz.generation import generate_with_attention

    cfg = lm.config
    inp, _ = lesson_input(lm)
    task = cache.task_of(lm)
    with lm.lock:
        gen = generate_with_attention(lm.model, inp.ids, 1)
        loss = float(task.evaluate(lm.model, "validation", max_examples=KV_WINDOWS)["loss"])
    cached = gen.q_positions[0] + 1
    return {"model": lm.ref.label.split(" (")[0], "heads": int(cfg.n_heads), "kv_heads": int(cfg.n_kv_heads),
            "bytes": gen.cache_nbytes[0] / cached, "formula": kv_cache_bytes(cfg.n_layers, cfg.n_kv_heads, cfg.d_head, 1),
            "positions": int(cached), "loss": loss, "windows": min(KV_WINDOWS, len(task.examples("validation")))}


def kv_view(lm, v) -> View:
    from tfviz.viz import paired_bars

    from .models import zoo_model

    rows = []
    for name in KV_FAMILY:
        m = zoo_model(name)
        if m is not None:
            rows.append(_memo(("kv", *m.key), lambda m=m: kv_row(m)))
    if not rows:
        raise ValueError("the shipped lm / lm-gqa / lm-mqa models are missing")
    labels = [f"{r['model']} ({r['kv_heads']} K/V of {r['heads']})" for r in rows]
    fig = cache.figure(paired_bars, labels, [r["bytes"] for r in rows], [r["loss"] for r in rows],
                       left_name="KV cache bytes / token", right_name="validation loss",
                       title="MHA vs GQA vs MQA, measured now")
    return View(fig, {"rows": rows}, f"Cache: one generation step with the KV cache after reading the "
                f"lesson's input ({rows[0]['positions']} positions), float32. Loss: the first "
                f"{rows[0]['windows']} validation windows of the grammar corpus.", link={"finding": "All models"})


# ------------------------------------------------------------------------------ the lesson
HEAD = Control("head", "Head", "select", heads_of, default_head)
STEPS: tuple[Step, ...] = (
    Step("tokens", "tokens", "Text becomes tokens",
         "A model never reads letters or words directly: a tokenizer cuts the text into pieces and "
         "gives each piece a number. Cutting by character needs a tiny vocabulary but many pieces; "
         "cutting by word needs few pieces but meets words it has never seen; BPE learns pieces in "
         "between from a corpus.",
         tokens_view, say.tokens, "tokens",
         controls=(Control("text", "Text", "text", default=DEFAULT_TEXT),
                   Control("bpe", "BPE vocabulary size", "slider", default=400, lo=263, hi=2000))),
    Step("one-hot", "vectors", "One-hot vectors know no similarity",
         "The simplest vector for a token is a row of zeros with a single 1 at its own number. Any two "
         "such vectors are at right angles, so 'cat' is exactly as far from 'dog' as from 'blue'. A "
         "trained model learns its own vectors instead, and we hope related words end up close: the "
         "notice checks that on this model's numbers.",
         onehot_view, say.onehot, "tokens", model="lm", fits=_transformer,
         controls=(Control("words", "Words to compare", "text", default=default_words),)),
    Step("word2vec", "vectors", "Vectors learned from a guessing game",
         "word2vec learns a vector per word by playing a game that does not matter in itself: "
         "guess which words appear near which. To win it, words used in the same places must get "
         "similar vectors. We train it here, in seconds, on a small built-in corpus.",
         word2vec_view, say.word2vec, "why",
         controls=(Control("word", "Nearest neighbours of", "select", word_choices, "dog"),)),
    Step("bag", "order", "A bag of words forgets the order",
         "Averaging or counting a sentence's word vectors gives one vector for the sentence, but the "
         "order is gone. Two sentences with opposite meanings can get the very same vector.",
         bag_view, say.bag, "why",
         controls=(Control("a", "Sentence A", "text", default="the dog chases the cat"),
                   Control("b", "Sentence B", "text", default="the cat chases the dog"))),
    Step("context", "order", "One vector per word, whatever the sentence?",
         "word2vec gives a word one vector, so 'bank' means the same by a river and in a robbery. A "
         "transformer's first layer starts from such a vector too, then every layer mixes in the "
         "other words. Put the same word in two sentences and compare its vectors, layer by layer.",
         context_view, say.context, "attention", model="mlm", fits=_self_attention,
         controls=(Control("a", "Sentence A", "text", default="the cat sees the dog ."),
                   Control("b", "Sentence B", "text", default="the cat helps the children ."))),
    Step("rnn-memory", "rnn", "An RNN reads in order, and forgets",
         "A recurrent network reads one token at a time and carries everything it knows in one "
         "hidden vector. Here, models were asked to recall a symbol seen some tokens earlier, on "
         "fresh sequences. The further back the symbol, the harder it is to squeeze through that "
         "single vector.",
         recall_view, say.recall, "why"),
    Step("vanishing", "rnn", "The vanishing gradient",
         "Learning needs the error at the answer to flow back to the token that mattered. In an "
         "RNN it passes through every step in between and shrinks at each one. The curves show how "
         "much of that signal reaches each earlier token, relative to the token next to the "
         "question, in the same models before and after training.",
         gradient_view, say.gradient, "why"),
    Step("bottleneck", "rnn", "One vector for a whole sentence",
         "An encoder–decoder RNN must pack its whole input into its final hidden vector before it "
         "writes any output. On a task that reverses a sequence, longer inputs overflow that "
         "vector; letting the decoder look back at every input word (attention) removes the "
         "squeeze.",
         bottleneck_view, say.bottleneck, "why"),
    Step("paths", "attention", "Attention: every word reaches every word in one step per layer",
         "Attention drops the chain: to build the vector of a token, it looks at every token of "
         "the sentence directly and decides how much each one matters. The path between two "
         "tokens is one step per layer, whatever their distance, and all positions are computed at "
         "once.",
         paths_view, say.paths, "why"),
    Step("qkv", "attention", "Query, key and value",
         "Each token makes three vectors. Its query says what it is looking for, every token's key "
         "says what it offers, and every value is what gets passed on. The query is compared with "
         "every key, the scores become weights that sum to one, and the output is the weighted "
         "sum of the values.",
         qkv_view, say.qkv, "attention", model="coref", fits=_self_attention,
         controls=(HEAD, Control("query", "Query token", "select", _queries,
                                 lambda lm: lesson_input(lm)[0].query, fmt=_query_label, type=int))),
    Step("heatmap", "attention", "An attention map",
         "Doing this for every token gives a square of weights: one row per token that looks, one "
         "column per token looked at. This is what people mean by 'the attention' of a head, and "
         "each of its rows is one softmax.",
         heatmap_view, say.heatmap, "attention", model="coref", fits=_self_attention,
         controls=(HEAD,)),
    Step("heads", "heads", "Many heads look for different things",
         "A layer runs several attention heads side by side, each with its own queries, keys and "
         "values, and adds up what they find. Trained on one task, different heads learn to "
         "follow different relations.",
         heads_view, say.heads, "attention", model="coref", fits=_self_attention),
    Step("block", "block", "The block: a stream that each layer adds to",
         "Attention is one half of a transformer block. Each token's vector runs down a residual "
         "stream: layer norm rescales a copy, attention reads it and adds its output back, then a "
         "small MLP does the same for each token on its own. At the end the stream is read out as "
         "a score per word of the vocabulary.",
         block_view, say.block, "attention", model="lm", fits=_block,
         controls=(Control("pos", "Position", "select", _queries, _last, fmt=_query_label, type=int),)),
    Step("next-token", "block", "From scores to the next word",
         "The final scores (logits) become probabilities with a softmax. A model that writes picks "
         "one token and appends it: always the most likely (greedy), or a draw in which temperature "
         "sharpens or flattens the odds and top-k keeps only the k most likely.",
         next_token_view, say.next_token, "generate", model="lm", fits=_decoder,
         controls=(Control("temperature", "Temperature", "select", TEMPERATURES, 1.0, fmt=_temperature_label,
                           type=float),
                   Control("top_k", "Top-k", "select", TOP_KS, 0, fmt=_top_k_label, type=int))),
    Step("cross-attention", "decoder", "The decoder looks at the encoder",
         "In the original transformer an encoder reads the whole source sentence, and the decoder "
         "writes the translation one token at a time. Between its own masked self-attention and "
         "its MLP, each decoder layer has cross-attention: queries from the decoder, keys and "
         "values from the encoder's output.",
         cross_view, say.cross, "findings", model="translate", fits=_encdec,
         controls=(Control("head", "Head", "select", heads_of, _translate_head),
                   Control("sentence", "Sentence", "select", _translate_sentences, 0, fmt=_translate_label,
                           type=int))),
    Step("it-heads", "it", "The heads that resolve \"it\"",
         "A sentence names two things, then says 'it' or 'its': which of the two is meant? This "
         "model learned to answer such questions. Follow the pronoun's row in every head: some "
         "heads send it to one noun, others to the other.",
         it_heads_view, say.it_heads, "attention", model="coref", fits=_coref,
         controls=(Control("sentence", "Sentence", "radio", (1, 2), 1, fmt=lambda i, lm: f"mission sentence {i}",
                           type=int),
                   Control("pronoun", "Read the pronoun", "radio", ("query", "pronoun"), "query",
                           fmt=lambda p, lm: {"query": "at the end", "pronoun": "in the sentence"}[p]))),
    Step("it-effects", "it", "Does the head that looks decide?",
         "Where a head looks is not yet why the model answers. Switch each head off in turn and "
         "measure the answer again: a head whose removal changes nothing was not needed, however "
         "sharply it looked.",
         it_effects_view, say.it_effects, "attention", model="coref", fits=_self_attention),
    Step("it-choice", "it", "When the look is the choice",
         "Now two nouns of the same kind: 'the law and the rules ... its application'. Only the "
         "pronoun's number, its or their, says which noun is meant, so the model must look back "
         "at the right noun to answer. Here a head's look can be the decision itself.",
         it_choice_view, say.it_choice, "attention", model="agreement", fits=_agreement,
         controls=(Control("sentence", "Sentence", "radio", (1, 2), 1, type=int,
                           fmt=lambda i, lm: {1: "… its application …", 2: "… their application …"}[i]),)),
    Step("order-lost", "positions", "Attention alone has no sense of order",
         "Attention compares tokens by content only, so without extra information it cannot tell "
         "'dog chases cat' from 'cat chases dog'. Two shipped decoders read both sentences, one "
         "given no positions and one with a learned vector per position, and the first runs again "
         "without its causal mask: attention alone.",
         order_view, say.order, "why",
         controls=(Control("a", "Sentence A", "text", default="the dog sees a cat"),
                   Control("b", "Sentence B", "text", default="the cat sees a dog"))),
    Step("learned", "positions", "Learned positions: one vector per slot",
         "The first fix adds a position vector to each token's vector. The simplest kind is "
         "learned like any weight: one row per position, up to the longest input seen in "
         "training — and none beyond it.",
         learned_view, say.learned, "positional", model="pos-learned", fits=_pos("learned")),
    Step("sinusoidal", "positions", "Sinusoidal positions: waves of many speeds",
         "The original transformer wrote positions with a formula instead: sines and cosines of "
         "many wavelengths, one pair of columns per wavelength. Every position gets a different "
         "row, and the formula works for any length.",
         sinusoidal_view, say.sinusoidal, "positional",
         controls=(Control("d", "d_model", "slider", default=64, lo=8, hi=512, step=8),
                   Control("n", "positions", "slider", default=64, lo=8, hi=256))),
    Step("extrapolation", "positions", "Longer than anything seen in training",
         "Models with each kind of position were trained on the same short inputs, then read "
         "longer ones. A learned table simply has no row for the new positions; the others run, "
         "with different success.",
         extrapolation_view, say.extrapolation, "findings"),
    Step("rope", "rope", "RoPE: position as a rotation",
         "Rotary embeddings put position where tokens are compared: the query and the key are "
         "rotated by angles that grow with their positions. Their dot product then depends only "
         "on how far apart they are, not on where they are.",
         rope_view, say.rope, "positional", model="pos-rope", fits=_pos("rope"), controls=(HEAD,)),
    Step("no-peeking", "masks", "A causal mask: no peeking ahead",
         "A model that writes text must not see the words it has yet to write. Its mask blocks "
         "every later key, so changing a later token cannot change anything computed before it.",
         nopeek_view, say.nopeek, "masks", model="lm", fits=_decoder,
         controls=(Control("pos", "Edit the token at position", "slider", default=4, lo=1,
                           hi=lambda lm: len(lesson_input(lm)[0].ids) - 1),)),
    Step("masks", "masks", "Masks decide who sees whom",
         "A mask is a grid of yes and no: may this query look at this key? The same weights run "
         "under a causal mask, a sliding window or a window with a few global tokens.",
         mask_view, say.mask, "masks", model="lm", fits=_self_attention,
         controls=(Control("kind", "Mask", "select", mask_kinds, "sliding window"),
                   Control("window", "Window w", "slider", default=3, lo=1,
                           hi=lambda lm: len(lesson_input(lm)[0].ids)))),
    Step("families", "taxonomy", "Encoders, decoders, and both",
         "After 2017 the transformer's two halves went their own ways. Encoder-only models (BERT) "
         "let every token see every token, to understand a text; decoder-only models (GPT) see only "
         "the past, to write; encoder–decoders (T5, the original) keep both, joined by "
         "cross-attention. Here is who may look at whom in three shipped models, one of each.",
         family_view, say.families, "masks"),
    Step("mlm", "bert", "BERT: fill in the hidden word",
         "BERT is an encoder trained to fill in blanks: about 15% of the words are hidden behind "
         "[MASK] and it must guess them from the words on both sides. It was also trained to guess "
         "whether sentence B really follows sentence A (next-sentence prediction); later models "
         "such as RoBERTa dropped that second task, finding it did not help. This small encoder was "
         "trained the BERT way on the grammar corpus.",
         mlm_view, say.mlm, "attention", model="mlm", fits=_mlm,
         controls=(Control("sentence", "Sentence", "select", _mlm_sentences, 0, fmt=_mlm_label, type=int),
                   Control("word", "Word to hide", "slider", default=3, lo=1, hi=_mlm_longest))),
    Step("cost", "cost", "Full attention costs n²; a window costs n·w",
         "Every query scores every key, so doubling the length quadruples the work and the memory "
         "of full attention. A sliding window of w keys grows only linearly. These are real "
         "timings of the model's own attention kernels.",
         cost_view, say.cost, "cost",
         controls=(Control("what", "Show", "radio", ("time", "memory"), "time"),)),
    Step("sinks", "cost", "What a window does to the predictions",
         "A window is cheap, but the model then sees only the last w tokens. Large language models "
         "park much of their attention on the very first tokens ('attention sinks'): evict them and "
         "the loss blows up, keep four and it recovers (StreamingLLM, Xiao et al. 2023). Here a "
         "small model reads text eight times longer than anything it was trained on.",
         sinks_view, say.sinks, "masks", model="lm-bos", fits=_grammar_lm,
         controls=(Control("window", "Window w (keys i − w … i)", "select", _sink_windows,
                           _sink_window_default, type=int),)),
    Step("kv-cache", "cost", "Sharing keys and values: MHA, GQA, MQA",
         "While writing, a model keeps the keys and values of every earlier token in a cache. "
         "Grouped-query and multi-query attention let several query heads share one key/value "
         "head, so the cache shrinks; the question is what that costs in quality.",
         kv_view, say.kv, "findings"),
)
BY_ID = {s.id: s for s in STEPS}
