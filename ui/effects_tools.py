"""The Effects tab's tools for what a TransformerLens user reaches for next (issue 36), for the
explorer's chosen head: gradients (attribution patching beside real patching) and path patching
into the head's queries, keys and values; the head's weights (QK / OV singular values,
composition with the other heads, what it writes at each position).

Glue only: every number comes from ``tfviz.analysis`` (``attribution``, ``paths``, ``weights``,
``decompose``), computed once per (model, input) through ``ui.effects.computed`` (handed in as
``tab``: ``ui.effects`` imports this module, not the reverse); figures from ``tfviz.viz.circuits``.
Kept beside ``ui/effects.py`` so the tab's existing views stay as they are.
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from tfviz import viz
from tfviz.analysis import attribution as at
from tfviz.analysis import decompose as dc
from tfviz.analysis import effects as ef
from tfviz.analysis import interventions as iv
from tfviz.analysis import paths as pp
from tfviz.analysis import weights as wt

from . import cache
from .figures import show
from .widgets import chart_cells


def _changed_input(lm, inp, tab):
    """The position to change and its replacement (widgets; default as the patch view's) ->
    (pos, new word, new id, corrupted ids, answer position), or None with a message shown."""
    default_pos, default_word = tab.replacement(lm, inp)
    c1, c2 = st.columns(2)
    pos = c1.selectbox("Word to change", range(len(inp.ids)), index=min(default_pos, len(inp.ids) - 1),
                       key="eff_grad_pos", format_func=lambda i: f"{i}: {inp.tokens[i]}")
    word = c2.text_input("Replace it by", value=default_word, key="eff_grad_word",
                         help="One token of this model's vocabulary: the clean input is the one above, "
                              "the changed one has this word instead.")
    new, why = tab.token_or_reason(lm.tokenizer, word.strip())
    if new is None:  # empty, several tokens, or [UNK] (the same for every unknown word): said
        st.info(why)
        return None
    corrupt = list(inp.ids)
    corrupt[pos] = new
    mask = getattr(lm.tokenizer, "mask_id", None)
    at_pos = inp.ids.index(mask) if lm.config.arch == "encoder" and mask in inp.ids else -1
    return pos, word, new, corrupt, at_pos


def gradients_and_paths(lm, inp, site, layer: int, head: int, tab) -> None:
    """Attribution patching against real patching (every head, every layer x position), and path
    patching from every earlier head into the chosen head's q, k and v. ``tab``: the Effects tab's
    shared helpers (``computed``, ``replacement``, ``token_or_reason``)."""
    import torch

    computed = tab.computed
    if lm.config.arch == "encoder-decoder":
        return st.info("Gradients and paths here take one-stack models (decoder or encoder).")
    got = _changed_input(lm, inp, tab)
    if got is None:
        return
    pos, word, new, corrupt, at_pos = got
    d = computed(lm, ("patch", inp.key, pos, new, at_pos),
                 lambda p, m: ef.patching(m, inp.ids, corrupt, pos=at_pos, progress=p), "Patching")
    if d is None:
        return
    good, bad = lm.tokenizer.tokens_of([d["good"], d["bad"]])
    metric_name = f"logit '{good}' − '{bad}'"
    clean, changed = torch.tensor([list(inp.ids)]), torch.tensor([corrupt])
    metric = iv.logit_diff(d["good"], d["bad"], at_pos)

    def estimate(progress, model):
        progress(0.3, "one forward and one backward pass per grid")
        return {g: at.attribution_patching(model, changed, g, metric, reference=clean)
                for g in ("head", "resid_pre")}
    est = computed(lm, ("attr_patch", inp.key, pos, new, at_pos), estimate, "Estimating from gradients")
    if est is None:
        return
    real = {"head": d["heads"], "resid_pre": d["resid"]}
    st.markdown(f"**Attribution patching** (Nanda 2023): the change each patch would make to {metric_name}, "
                f"estimated from one backward pass on the changed input "
                f"(*{inp.tokens[pos]}* → *{word}*) — activation difference × gradient — beside the "
                "real patching of the patch view (one forward per site).")
    figs, lines = [], []
    for g, label, short in (("head", "each head's output", "Heads"),
                            ("resid_pre", "residual stream, layer x position", "Residual stream")):
        e = est[g]
        r = iv.Effect(real[g], d["corrupt"], g, "patch", e.labels)
        c = at.compare_estimate(e, r, worst=3)
        worst = "; ".join(f"{lab} estimated {x:+.3f}, real {y:+.3f}" for lab, x, y in c["worst"])
        lines.append(f"- {label}: correlation r = {c['correlation']:.2f} over {c['n']} sites; largest "
                     f"miss {c['max_abs_error']:.3f} (worst: {worst}).")
        figs.append((cache.figure(viz.estimate_vs_real, [str(x) for x in np.array(e.labels, dtype=object).ravel()],
                                  e.change.ravel(), r.change.ravel(), metric=metric_name, correlation=c["correlation"],
                                  title=f"{short}: estimate vs real"), f"eff_grad_{g}"))
    st.markdown("\n".join(lines))
    for col, (fig, key) in zip(chart_cells(len(figs)), figs):
        with col:
            show(fig, key)
    st.caption("The estimate is a first-order Taylor expansion: exact where the metric is linear in the "
               "activation, a guess where softmax, norms or a large change bend it — it tends to "
               "underestimate the largest, saturated effects. Use it to find candidates, then patch them.")

    st.markdown(f"**Path patching into L{layer}H{head}** (Wang et al. 2022): each earlier head's output "
                "taken from the clean input and let through *only* to this head's queries, keys or values "
                "(every other head held at its changed-input value); the colour is the share of the clean "
                "answer that path brings back.")
    if not site.is_self or site.stack not in ("",):
        return st.info("Path patching is drawn for a one-stack model's self-attention heads.")
    if layer == 0:
        return st.info("L0 heads read only the embeddings: no earlier head sends them anything. Pick a head "
                       "in a later layer.")

    def paths(progress, model):
        out = {}
        for i, what in enumerate(pp.INPUTS):
            kv_head = head if what == "q" else head // (lm.config.n_heads // lm.config.n_kv_heads)
            out[what] = pp.path_sweep(model, changed, [pp.Receiver(layer, kv_head, what)], metric,
                                      reference=clean, progress=lambda f, m, i=i: progress((i + f) / 3, m))
        return out
    e = computed(lm, ("paths", inp.key, pos, new, at_pos, layer, head), paths, "Path patching")
    if e is None:
        return
    span = d["clean"] - d["corrupt"]
    figs = []
    for what, name in zip(pp.INPUTS, ("queries", "keys", "values")):
        share = (e[what].values - d["corrupt"]) / span if abs(span) > 1e-9 else e[what].values - d["corrupt"]
        figs.append((cache.figure(viz.head_value_heatmap, share, what="share restored",
                                  hover="{name} → " + f"L{layer}H{head} {what}: " + "{value:+.3f} of the clean answer",
                                  title=f"Into L{layer}H{head}'s {name}", limit=1.0), f"eff_path_{what}"))
    for col, (fig, key) in zip(chart_cells(len(figs)), figs):
        with col:
            show(fig, key)
    best = {w: np.nanargmax(np.abs(e[w].values - d["corrupt"])) for w in pp.INPUTS}
    H = lm.config.n_heads
    st.caption("Strongest sender into each: " + ", ".join(
        f"{w}: L{b // H}H{b % H} ({(e[w].values.ravel()[b] - d['corrupt']):+.3f})" for w, b in best.items())
        + f". On this one input pair; {metric_name} is {d['clean']:.3f} clean, {d['corrupt']:.3f} changed.")


def weights_and_composition(lm, inp, site, layer: int, head: int, tab) -> None:
    """The chosen head's QK / OV singular values, its composition with earlier and later heads
    (Q-, K-, V-composition, Elhage et al. 2021), and what it writes at each position."""
    import torch

    computed = tab.computed
    if not site.is_self:
        return st.info("Weights and composition are drawn for self-attention heads.")
    stack = site.stack or None
    cfg = lm.config

    def run(progress, model):
        progress(0.2, "singular values")
        qk = wt.qk_matrix(model, layer, head, stack).singular_values().numpy()
        ov = wt.ov_matrix(model, layer, head, stack).singular_values().numpy()
        progress(0.5, "composition scores")
        comp = {m: wt.composition_scores(model, m, stack) for m in wt.MODES}
        base = {m: wt.random_baseline(model, m) for m in wt.MODES}
        return qk, ov, comp, base
    if (got := computed(lm, ("weights", site.label, layer, head), run, "Reading the weights")) is None:
        return
    qk, ov, comp, base = got
    name = f"L{layer}H{head}"
    show(cache.figure(viz.singular_values, qk, ov, head=name), "eff_svd")
    top = lambda v: f"{v[0] ** 2 / max((v ** 2).sum(), 1e-30):.0%}"  # noqa: E731
    st.caption(f"QK = W_Q W_K^T and OV = W_V W_O, each of rank at most d_head = {cfg.d_head} (biases, positions "
               f"and norms left out, as TransformerLens's QK / OV). The largest singular value carries "
               f"{top(qk)} of QK's squared norm and {top(ov)} of OV's: a head that uses few directions "
               "reads or writes few things.")
    role = st.radio("Composition", ["earlier heads into this one", "this one into later heads"], horizontal=True,
                    key="eff_comp_role")
    earlier = role.startswith("earlier")
    if earlier and layer == 0:
        st.info("L0 heads read only the embeddings: no earlier head composes into them. Pick a head in a "
                "later layer, or look at this one into later heads.")
    elif not earlier and layer == cfg.n_layers - 1:
        st.info("The last layer's heads write only to the output: no later head reads them. Pick a head in "
                "an earlier layer, or look at earlier heads into this one.")
    else:
        figs = []
        for m, what in zip(wt.MODES, ("queries", "keys", "values")):
            z = comp[m][:, :, layer, head].copy() if earlier else comp[m][layer, head].copy()
            if earlier:
                z[layer:] = np.nan
                hover = "{name} → " + f"{name}'s {what} ({m}-composition): " + "{value:.3f}"
                title = f"Into {name}'s {what} ({m})"
            else:
                z[:layer + 1] = np.nan
                hover = f"{name} → " + "{name}'s " + f"{what} ({m}-composition): " + "{value:.3f}"
                title = f"{name} into later {what} ({m})"
            figs.append((cache.figure(viz.head_value_heatmap, z, what=f"{m}-composition", hover=hover,
                                      title=title, zero_centred=False), f"eff_comp_{m}"))
        for col, (fig, key) in zip(chart_cells(len(figs)), figs):
            with col:
                show(fig, key)
    st.caption("Composition score (Elhage et al. 2021): ||OV_1 · M_2||_F / (||OV_1||_F ||M_2||_F) with M_2 the later "
               "head's QK (Q), QK^T (K) or OV (V): how much of what one head writes lands where the other "
               "reads. Random matrices of these shapes already score about "
               + ", ".join(f"{m} {b:.2f}" for m, b in base.items()) + "; only clearly larger scores say anything. "
               "Weights only: whether the composition is used on an input is what path patching measures.")
    if site.stack == "encoder" or at.attribution_refusal(lm.model):
        return
    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    w = computed(lm, ("writes", inp.key, layer, head), lambda p, m: dc.head_writes(m, x, layer, head),
                 "Reading its output")
    if w is None:
        return
    answers = lm.tokenizer.tokens_of(w["answer"])
    runners = lm.tokenizer.tokens_of(w["runner_up"])
    show(cache.figure(viz.head_writes, inp.tokens, w["dla"], w["norm"],
                      [f"'{a}' over '{r}'" for a, r in zip(answers, runners)], head=name), "eff_writes")
    st.caption(f"{name}'s own output at each position (its hook_result, z_h W_O^h), read along the unembedding "
               "direction of the model's answer there minus its runner-up, with the final norm's scale frozen "
               "as direct logit attribution does. Its direct effect only: what later layers do with it is not in it.")


__all__ = ["gradients_and_paths", "weights_and_composition"]
