"""The Attention explorer's "Effects" tab: does the head matter? Switching heads off (every head's
effect beside its pattern), patching from a second input, the logit lens, direct logit attribution
and the chosen head's QK / OV circuits. Everything is computed by ``tfviz.analysis.effects`` /
``interventions`` / ``attribution``; this module holds the widgets and a server-wide store.

Justified as one module (not ``ui/cache.py`` wrappers): a head grid of a 124M model takes seconds,
so it runs behind a real progress bar, once per (model, input) for the whole server, and
``st.cache_data`` cannot show a live bar; the store below can (as ``ui/why.py``'s word2vec).
"""
from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
import streamlit as st

from tfviz import viz
from tfviz.analysis import attribution as at
from tfviz.analysis import effects as ef
from tfviz.analysis import interventions as iv

from . import cache
from .figures import show
from .models import locked
from .widgets import chart_cells, metric_row

VIEWS = ["Switch heads off", "Patch from another input", "Logit lens", "Attribution & circuits"]
KEEP = 48  # results kept for the server (a head table is a few kB, a lens a few MB at most)
TASK_DATA = {"coref": "the task's first 300 test sentences", "induction": "32 fresh [BOS] r r sequences (|r| = 40)"}


@st.cache_resource
def _store() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def computed(lm, key: tuple, compute, what: str, others=()):
    """``compute(progress)`` once per (model, key) for the server, under the model's lock (and
    those of ``others``, models it also reads), with a progress bar the first time; later calls
    (any session) read the stored result."""
    store, lock = _store()
    full = (*lm.key, *(o.key for o in others), *key)
    with lock:
        if full in store:
            store.move_to_end(full)
            return store[full]
    bar = st.progress(0.0, text=f"{what}…")
    try:
        with locked([lm, *others]):
            out = compute(lambda f, msg: bar.progress(min(1.0, f), text=f"{what}: {msg}"))
    finally:
        bar.empty()
    with lock:
        store[full] = out
        while len(store) > KEEP:
            store.popitem(last=False)
    return out


def _probe(lm, inp, data: str):
    task = cache.task_of(lm)
    if data != "input" and lm.task_name == "coref":
        return ef.coref_probe(task.examples("test")[:300])
    if data != "input" and lm.task_name == "induction":
        return ef.induction_repeat_probe(ef.repeat_sequences(task.tokenizer.vocab_size, 40, 32))
    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    return ef.input_probe(lm.model, lm.task_name, inp.ids, inp.meta, inp.src_ids, mask)


def heads_off(lm, inp, site, layer: int, head: int) -> None:
    data = "input"
    if lm.task_name in TASK_DATA and site.stack == "":
        data = st.radio("Measured on", ["input", "task"], horizontal=True, key="eff_data",
                        format_func=lambda d: "this input" if d == "input" else TASK_DATA[lm.task_name])
    key = ("heads", data, site.label, inp.key if data == "input" else None)
    df = computed(lm, key, lambda p: ef.head_effects(lm.model, _probe(lm, inp, data), stack=site.stack,
                                                     attention=site.attention, progress=p),
                  f"Switching each of {lm.config.n_layers * lm.config.n_heads} heads off")
    metrics, pattern = list(df.attrs["baseline"]), df.attrs.get("pattern", [])
    c1, c2 = st.columns(2)
    m = c1.selectbox("Metric", metrics, key="eff_metric") if len(metrics) > 1 else metrics[0]
    shown = c2.selectbox("Pattern score", pattern, key="eff_pattern") if len(pattern) > 1 else \
        (pattern[0] if pattern else None)
    higher = ef.higher_is_better(df, m)
    row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
    metric_row((f"{m}, unchanged", f"{df.attrs['baseline'][m]:.4g}"),
               (f"L{layer}H{head} off", f"{row[m]:.4g}", dict(delta=f"{row[f'Δ {m}']:+.3g}", delta_color=(
                   "normal" if higher else "inverse"))),
               *([(f"pattern: {shown}", f"{row[shown]:.2f}")] if shown else []))
    st.markdown(ef.head_sentence(df, layer, head))
    figs = [(cache.figure(viz.effect_heatmap, ef.headline_grid(df, f"Δ {m}"), metric=m,
                          baseline=df.attrs["baseline"][m], higher=higher, selected=(layer, head),
                          title=f"{site.label}: each head off → Δ {m}"), "eff_heatmap")]
    if shown:
        figs.append((cache.figure(viz.pattern_vs_effect, list(df["name"]), df[shown].to_numpy(),
                                  df[f"Δ {m}"].to_numpy(), pattern_name=shown, metric=m,
                                  title="Pattern vs effect: where each head looks, what removing it does"),
                     "eff_scatter"))
    for col, (fig, key) in zip(chart_cells(len(figs)), figs):
        with col:
            show(fig, key, data=df)
    st.dataframe(df.drop(columns=["layer", "head"]).round(4), hide_index=True, key="eff_table")
    together = st.text_input("Switch several heads off together", key="eff_set",
                             placeholder="e.g. L1H1+L1H3, or L1 for a whole layer",
                             help="Heads as L{layer}H{head} joined by +; a layer alone (L1) is all its heads.")
    if together.strip():
        try:
            sites = iv.parse_heads(lm.model, together, site.stack, site.attention)
        except ValueError as e:
            return st.info(str(e))
        sets = computed(lm, ("set", data, site.label, inp.key if data == "input" else None, together),
                        lambda p: ef.set_effects(lm.model, _probe(lm, inp, data), {together: sites}),
                        "Switching them off")
        st.dataframe(sets.round(4), hide_index=True, key="eff_set_table")
    st.caption("Switched off = the head's output (its slice of `attn.hook_z`, before W_O mixes the "
               "heads) set to zero for the whole input. A pattern says where a head looks; only "
               "switching it off says whether the answer depends on it.")


def _replacement(lm, inp) -> tuple[int, str]:
    task = cache.task_of(lm)
    if lm.task_name == "coref" and inp.meta.get("attribute_index") is not None:
        from tfviz.tasks.base import Example
        out = task.counterfactual(Example(list(inp.ids), [], meta=dict(inp.meta)))
        if out:
            return int(inp.meta["attribute_index"]), out[1]
    return len(inp.ids) // 2, ""


def patch(lm, inp) -> None:
    if lm.config.arch == "encoder-decoder":
        return st.info("Patching here takes one-stack models (decoder or encoder).")
    default_pos, default_word = _replacement(lm, inp)
    c1, c2 = st.columns(2)
    pos = c1.selectbox("Word to change", range(len(inp.ids)), index=min(default_pos, len(inp.ids) - 1),
                       key="eff_patch_pos", format_func=lambda i: f"{i}: {inp.tokens[i]}")
    word = c2.text_input("Replace it by", value=default_word, key="eff_patch_word",
                         help="One token of this model's vocabulary. For a pronoun sentence the default "
                              "is a deciding word that fits the other noun: the referent flips.")
    ids = _token_of(lm.tokenizer, word.strip())
    if ids is None:
        return st.info("Type a word that is one token of this model's vocabulary.")
    corrupt = list(inp.ids)
    corrupt[pos] = ids
    mask = getattr(lm.tokenizer, "mask_id", None)
    at_pos = inp.ids.index(mask) if lm.config.arch == "encoder" and mask in inp.ids else -1  # an encoder's [MASK]
    d = computed(lm, ("patch", inp.key, pos, ids, at_pos),
                 lambda p: ef.patching(lm.model, inp.ids, corrupt, pos=at_pos, progress=p), "Patching")
    good, bad = lm.tokenizer.tokens_of([d["good"], d["bad"]])
    metric = f"logit '{good}' − '{bad}'"
    st.markdown(f"The clean input says **{good}**, the changed one (*{inp.tokens[pos]}* → *{word}*) "
                f"**{bad}**: {metric} is {d['clean']:.3f} on the clean input, {d['corrupt']:.3f} on "
                "the changed one. Each cell runs the changed input with one activation taken from the "
                "clean run: how much of the clean answer it brings back.")
    figs = [(cache.figure(viz.position_effect_heatmap, d["resid"], inp.tokens, metric=metric,
                          baseline=d["corrupt"], reference=d["clean"],
                          title="Residual stream entering each layer, per position"), "eff_patch_pos_fig"),
            (cache.figure(viz.effect_heatmap, d["heads"] - d["corrupt"], metric=metric,
                          baseline=d["corrupt"], title="Each head's output from the clean run"),
             "eff_patch_heads")]
    for col, (fig, key) in zip(chart_cells(2), figs):
        with col:
            show(fig, key)


def _token_of(tok, word: str) -> int | None:
    if not word or tok is None:
        return None
    for w in (word, " " + word):
        ids = tok.encode_ids(w)
        if len(ids) == 1:
            return ids[0]
    return None


def lens(lm, inp) -> None:
    import torch

    def run(progress):
        progress(0.2, "one forward")
        L = at.logit_lens(lm.model, tuple(torch.tensor([list(x)]) for x in inp.key))[:, 0]
        top = at.lens_top(L, 1)
        final = L[-1].argmax(-1)  # [pos]: the model's own answers
        track = L.float().softmax(-1).gather(-1, final[None, :, None].expand(L.shape[0], -1, 1))[..., 0]
        return top["ids"][..., 0], top["probs"][..., 0], track.numpy()
    ids, probs, track = computed(lm, ("lens", inp.key), run, "Logit lens")
    names = [lm.tokenizer.tokens_of(list(map(int, row))) for row in ids]
    colour = st.radio("Colour", ["top token's probability", "probability of the model's final answer"],
                      horizontal=True, key="eff_lens_colour")
    fig = cache.figure(viz.logit_lens_heatmap, probs, names, inp.tokens,
                       track=None if colour.startswith("top") else track, track_name="final answer")
    show(fig, "eff_lens")
    st.caption("Each row reads the residual stream through the model's own final norm and "
               "unembedding, as if the later layers were skipped (nostalgebraist 2020). The last "
               "row is the model's output.")


def attribution(lm, inp, site, layer: int, head: int) -> None:
    import torch

    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    if why := at.attribution_refusal(lm.model):
        st.info(f"Direct logit attribution: {why}.")
    else:
        def run(progress):
            logits = lm.model(*x)[0, -1]
            good, bad = logits.topk(2).indices.tolist()
            d = at.direct_logit_attribution(lm.model, x, good, bad)
            return good, bad, list(d.parts), np.array([v[0] for v in d.parts.values()]), float(d.total[0])
        good, bad, parts, values, total = computed(lm, ("dla", inp.key), run, "Attributing")
        g, b = lm.tokenizer.tokens_of([good, bad])
        show(cache.figure(viz.attribution_bars, parts, values, total=total, good=g, bad=b,
                          title=f"Why '{g}' over '{b}' at the last position"), "eff_dla")
        st.caption(f"The parts add up to {values.sum():+.4f}; the model's own logit difference is "
                   f"{total:+.4f}. The final norm's scale is frozen at its value on this input (with "
                   "it frozen the norm is linear); its bias and the unembedding's are one part.")
    if not site.is_self:
        return st.info("QK / OV circuits are drawn for self-attention heads.")
    c = computed(lm, ("circuits", inp.key, site.label, layer, head),
                 lambda p: at.circuits(lm.model, layer, head, at.top_tokens(lm.model, x, k=24), site.stack),
                 "Circuits")
    names = lm.tokenizer.tokens_of(c["ids"])
    figs = [(cache.figure(viz.circuit_heatmap, c["qk"], names, names, kind="QK",
                          title=f"L{layer}H{head} QK: which token looks at which"), "eff_qk"),
            (cache.figure(viz.circuit_heatmap, c["ov"], names, names, kind="OV",
                          title=f"L{layer}H{head} OV: what attending to a token writes"), "eff_ov")]
    for col, (fig, key) in zip(chart_cells(2), figs):
        with col:
            show(fig, key)
    st.caption("Circuits over the input's own tokens (and the model's top predictions, up to 24), on the direct path (each token's embedding "
               "alone entering the head; positions and earlier layers left out — Elhage et al. 2021).")


def findings_coref(lm) -> None:
    """The Findings page's pronoun story, measured: head sets switched off on held-out and new
    sentences (both metrics), pattern vs effect for every head (``tfviz.zoo.causal``)."""
    from tfviz.zoo import causal as zc

    d = computed(lm, ("findings_coref",), lambda p: zc.coref_effects(lm.model, cache.task_of(lm)),
                 "Switching heads off on 492 sentences")
    st.markdown(zc.coref_story(d))
    h = d["heads"]
    pick = "picks the referent over the other noun"
    c1, c2 = chart_cells(2)
    with c1:
        show(cache.figure(viz.pattern_vs_effect, list(h["name"]), h[pick].to_numpy(),
                          h["Δ pairwise accuracy"].to_numpy(), pattern_name=pick, metric="pairwise accuracy",
                          cut=zc.PATTERN_CUT, title="Pattern vs effect (live)"), "find_coref_effect", data=h)
    with c2:
        st.dataframe(d["sets"].round(3), hide_index=True, key="find_coref_sets")
        st.dataframe(zc.disagreements(h).round(3), hide_index=True, key="find_coref_disagree")


def findings_induction(m2, m1) -> None:
    """The Findings page's induction heads switched off: the previous-token head, each, every
    pair and all of the last layer's heads; the 1-layer model's (``tfviz.zoo.causal``)."""
    from tfviz.zoo import causal as zc

    n = int(m2.ckpt.task["n_symbols"])
    i = computed(m2, ("findings_induction",), lambda p: zc.induction_effects(m2.model, m1.model, n),
                 "Switching heads off", others=[m1])
    st.markdown(zc.induction_story(i))
    st.dataframe(i["sets"].round(3), hide_index=True, key="find_ind_sets")


def render(lm, inp, site, layer: int, head: int) -> None:
    """The Effects tab for the explorer's model, input and chosen head."""
    view = st.radio("View", VIEWS, horizontal=True, key="eff_view")
    if view == VIEWS[0]:
        heads_off(lm, inp, site, layer, head)
    elif view == VIEWS[1]:
        patch(lm, inp)
    elif view == VIEWS[2]:
        lens(lm, inp)
    else:
        attribution(lm, inp, site, layer, head)
