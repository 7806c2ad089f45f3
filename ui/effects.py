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
from .widgets import column_pairs, metric_row

VIEWS = ["Switch heads off", "Patch from another input", "Logit lens", "Attribution & circuits"]
KEEP = 48  # results kept for the server (a head table is a few kB, a lens a few MB at most)
TASK_DATA = {"coref": "the task's first 300 test sentences", "induction": "32 fresh [BOS] r r sequences (|r| = 40)",
             "agreement": "the task's first 300 test sentences"}
PRONOUN_TASKS = ef.PRONOUN_TASKS


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
    if data != "input" and lm.task_name in PRONOUN_TASKS:
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
    st.markdown(ef.head_sentence(df, layer, head, m))
    st.markdown(answer_line(lm, inp, site, layer, head, m))
    figs = [(cache.figure(viz.effect_heatmap, ef.headline_grid(df, f"Δ {m}"), metric=m,
                          baseline=df.attrs["baseline"][m], higher=higher, selected=(layer, head),
                          title=f"{site.label}: each head off → Δ {m}"), "eff_heatmap")]
    if shown:
        figs.append((cache.figure(viz.pattern_vs_effect, list(df["name"]), df[shown].to_numpy(),
                                  df[f"Δ {m}"].to_numpy(), pattern_name=shown, metric=m,
                                  title="Pattern vs effect: where each head looks, what removing it does"),
                     "eff_scatter"))
    for col, (fig, key) in zip(column_pairs(len(figs)), figs):
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
        st.markdown(set_answer_line(lm, inp, together, sites, sets, data))
    st.caption("Switched off = the head's output (its slice of `attn.hook_z`, before W_O mixes the "
               "heads) set to zero for the whole input. A pattern says where a head looks; only "
               "switching it off says whether the answer depends on it.")


def answer_line(lm, inp, site, layer: int, head: int, metric: str) -> str:
    """What the model answers on this input with the head off (top token and probability) and,
    for a task with held-out data, what the held-out average of ``metric`` does, in one line."""
    import torch

    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    pos = ef.answer_position(inp.ids, inp.meta, lm.config.arch, mask)
    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    off = [iv.head(layer, head, site.stack, site.attention)]
    ans = computed(lm, ("answer", inp.key, site.label, layer, head, pos),
                   lambda p: ef.top_answers(lm.model, x, pos, [[], off]), "Reading the answer")
    (before, after) = [(lm.tokenizer.tokens_of([a])[0], pa) for a, pa in ans]
    average = None
    if lm.task_name in TASK_DATA and site.stack == "":
        df = computed(lm, ("heads", "task", site.label, None),
                      lambda p: ef.head_effects(lm.model, _probe(lm, inp, "task"), stack=site.stack,
                                                attention=site.attention, progress=p),
                      f"Switching each of {lm.config.n_layers * lm.config.n_heads} heads off")
        m = metric if metric in df.attrs["baseline"] else df.attrs["headline"]
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        average = {"metric": m, "data": TASK_DATA[lm.task_name], "base": df.attrs["baseline"][m],
                   "off": row[m], "higher": ef.higher_is_better(df, m)}
    line = ef.off_line(f"L{layer}H{head}", before, after, average)
    return f"At position {pos} (*{inp.tokens[pos]}*), w" + line[1:]


def set_answer_line(lm, inp, name: str, sites, sets, data: str) -> str:
    """What the model answers on this input with the set ``name`` (``sites``) off, beside the
    set table's headline over the task's data when that is what the table measured."""
    import torch

    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    pos = ef.answer_position(inp.ids, inp.meta, lm.config.arch, mask)
    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    ans = computed(lm, ("answer_set", inp.key, name, pos),
                   lambda p: ef.top_answers(lm.model, x, pos, [[], list(sites)]), "Reading the answer")
    (before, after) = [(lm.tokenizer.tokens_of([a])[0], pa) for a, pa in ans]
    average = None
    if data != "input":
        m = sets.columns[1]  # the probe's headline, first after "heads off"
        average = {"metric": m, "data": TASK_DATA[lm.task_name], "base": float(sets[m].iloc[0]),
                   "off": float(sets[m].iloc[1]), "higher": "loss" not in m}
    line = ef.off_line(name, before, after, average)
    return f"At position {pos} (*{inp.tokens[pos]}*), w" + line[1:]


def _replacement(lm, inp) -> tuple[int, str]:
    """The word to change by default: for a pronoun sentence, the one its task's counterfactual
    changes last (coref: the deciding word; agreement: the final pronoun, of the other number)."""
    task = cache.task_of(lm)
    if lm.task_name in PRONOUN_TASKS and inp.meta.get("referent") is not None and hasattr(task, "counterfactual"):
        from tfviz.tasks.base import Example
        out = task.counterfactual(Example(list(inp.ids), [], meta=dict(inp.meta)))
        if out:
            diff = [i for i, (a, b) in enumerate(zip(inp.ids, out[0])) if a != b]
            if diff:
                return diff[-1], lm.tokenizer.tokens_of([out[0][diff[-1]]])[0]
    return len(inp.ids) // 2, ""


def _candidates(lm, inp) -> tuple[int, int] | None:
    """(the referent's answer id, the other candidate's) of a pronoun sentence, else None."""
    m = inp.meta
    if lm.task_name not in PRONOUN_TASKS or m.get("referent") is None or not m.get("candidate_indices"):
        return None
    ids = m.get("answer_ids") or [inp.ids[c] for c in m["candidate_indices"]]
    return int(ids[m["referent"]]), int(ids[1 - m["referent"]])


def patch(lm, inp) -> None:
    if lm.config.arch == "encoder-decoder":
        return st.info("Patching here takes one-stack models (decoder or encoder).")
    default_pos, default_word = _replacement(lm, inp)
    c1, c2 = st.columns(2)
    pos = c1.selectbox("Word to change", range(len(inp.ids)), index=min(default_pos, len(inp.ids) - 1),
                       key="eff_patch_pos", format_func=lambda i: f"{i}: {inp.tokens[i]}")
    word = c2.text_input("Replace it by", value=default_word, key="eff_patch_word",
                         help="One token of this model's vocabulary. For a pronoun sentence the default "
                              "makes the other noun meant: coref, a deciding word that fits the other "
                              "noun; agreement, the pronoun of the other number.")
    ids, why = token_or_reason(lm.tokenizer, word.strip())
    if ids is None:
        return st.info(why)
    pair = _candidates(lm, inp)
    choices = (["other"] if pair else []) + ["changed", "word"]
    labels = {"other": f"the other candidate noun ('{lm.tokenizer.tokens_of([pair[1]])[0]}')" if pair else "",
              "changed": "the changed input's answer (its runner-up when both agree)",
              "word": "a word I type"}
    if st.session_state.get("eff_patch_contrast") not in choices:  # another input: its own default
        st.session_state["eff_patch_contrast"] = choices[0]
    contrast = st.selectbox("Compare the clean answer with", choices, key="eff_patch_contrast",
                            format_func=labels.get,
                            help="The metric is logit(answer) − logit(contrast). For a pronoun sentence the "
                                 "default is the other candidate noun: is this noun or the other one said?")
    good = bad = None
    if contrast == "other":
        good, bad = pair
    elif contrast == "word":
        typed = st.text_input("Contrast word", key="eff_patch_contrast_word")
        bad, why = token_or_reason(lm.tokenizer, typed.strip())
        if bad is None:
            return st.info(why)
    corrupt = list(inp.ids)
    corrupt[pos] = ids
    mask = getattr(lm.tokenizer, "mask_id", None)
    at_pos = inp.ids.index(mask) if lm.config.arch == "encoder" and mask in inp.ids else -1  # an encoder's [MASK]
    try:
        d = computed(lm, ("patch", inp.key, pos, ids, at_pos, good, bad),
                     lambda p: ef.patching(lm.model, inp.ids, corrupt, pos=at_pos, progress=p, good=good,
                                           bad=bad), "Patching")
    except ValueError as e:
        return st.info(str(e))
    good, bad = lm.tokenizer.tokens_of([d["good"], d["bad"]])
    metric = f"logit '{good}' − '{bad}'"
    st.markdown(f"Answer **{good}** against **{bad}** (*{inp.tokens[pos]}* → *{word}*): {metric} is "
                f"{d['clean']:.3f} on the clean input, {d['corrupt']:.3f} on the changed one. Each cell "
                "runs the changed input with one activation taken from the clean run: how much of the "
                "clean answer it brings back.")
    figs = [(cache.figure(viz.position_effect_heatmap, d["resid"], inp.tokens, metric=metric,
                          baseline=d["corrupt"], reference=d["clean"],
                          title="Residual stream entering each layer, per position"), "eff_patch_pos_fig"),
            (cache.figure(viz.effect_heatmap, d["heads"] - d["corrupt"], metric=metric,
                          baseline=d["corrupt"], title="Each head's output from the clean run"),
             "eff_patch_heads")]
    for col, (fig, key) in zip(column_pairs(2), figs):
        with col:
            show(fig, key)


def token_or_reason(tok, word: str) -> tuple[int | None, str]:
    """(the id of ``word`` as one token of the model's vocabulary, "") or (None, why not): empty,
    more than one token, or a word the vocabulary lacks (read as [UNK], the same for every
    unknown word, so patching it would say nothing about the word)."""
    if tok is None:
        return None, "This model has no tokenizer to read a word with."
    if not word:
        return None, "Type a word that is one token of this model's vocabulary."
    unknown = False
    for w in (word, " " + word):
        ids = tok.encode_ids(w)
        if len(ids) == 1:
            if tok.unk_id is not None and ids[0] == tok.unk_id:
                unknown = True
                continue
            return ids[0], ""
    if unknown:
        return None, (f"'{word[:40]}' is not in this model's vocabulary: it would be read as [UNK], "
                      "the same token for every unknown word. Type a word the model knows.")
    return None, f"'{word[:40]}' is more than one token here; type a word that is one token."


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
    for col, (fig, key) in zip(column_pairs(2), figs):
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
    c1, c2 = column_pairs(2)
    with c1:
        show(cache.figure(viz.pattern_vs_effect, list(h["name"]), h[pick].to_numpy(),
                          h["Δ pairwise accuracy"].to_numpy(), pattern_name=pick, metric="pairwise accuracy",
                          cut=zc.PATTERN_CUT, title="Pattern vs effect (live)"), "find_coref_effect", data=h)
    with c2:
        st.dataframe(d["sets"].round(3), hide_index=True, key="find_coref_sets")
        st.dataframe(zc.disagreements(h).round(3), hide_index=True, key="find_coref_disagree")


def _coref_d(lm):
    from tfviz.zoo import causal as zc
    return computed(lm, ("findings_coref",), lambda p: zc.coref_effects(lm.model, cache.task_of(lm)),
                    "Switching heads off on 492 sentences")


def _agreement_d(lm):
    from tfviz.zoo import causal as zc
    return computed(lm, ("findings_agreement",), lambda p: zc.agreement_effects(lm.model, cache.task_of(lm)),
                    "Switching heads off and patching them on 492 sentences")


def findings_coref_sentence(lm, sentence: int) -> None:
    """The coref story on the chosen mission sentence: what the model answers with each head the
    held-out story names switched off, beside the held-out average, one line each."""
    from tfviz.zoo import causal as zc

    d = _coref_d(lm)
    task = cache.task_of(lm)
    names = list(dict.fromkeys(d["pattern_heads"][:1] + d["effect_heads"]))
    s = computed(lm, ("findings_coref_sentence", sentence),
                 lambda p: zc.mission_effects(lm.model, task, names, [task.mission_sentences()[sentence - 1]])[0],
                 "Switching heads off on the sentence")
    a = s["answers"].set_index("heads off")
    h = d["heads"].set_index("name")
    base = h.attrs["baseline"][zc.PAIR]
    lines = [f"**On this sentence** (answer at the final pronoun), with the heads the held-out story "
             "names switched off one at a time:"]
    for name in names:
        lines.append("- " + ef.off_line(name, (a.loc["none", "answer"], a.loc["none", "P(answer)"]),
                                        (a.loc[name, "answer"], a.loc[name, "P(answer)"]),
                                        {"metric": zc.PAIR, "data": f"{d['n']['held-out']} held-out sentences",
                                         "base": base, "off": base + h.loc[name, f"Δ {zc.PAIR}"]}))
    st.markdown("\n".join(lines))


def _pattern_effect_figure(sentence: dict, head: str, key: str, title: str) -> None:
    """``causal.mission_effects``' sentence: ``head``'s pattern from the final pronoun beside the
    candidates' probabilities with each head off."""
    layer, h = int(head[1:head.index("H")]), int(head[head.index("H") + 1:])
    a = sentence["answers"]
    probs = a[[f"P({w})" for w in sentence["candidates"]]].to_numpy()
    show(cache.figure(viz.pattern_and_effect, sentence["pattern"][layer, h], sentence["tokens"],
                      sentence["candidates"], sentence["positions"], list(a["heads off"]), probs,
                      head=head, query=sentence["query"], title=title), key, data=a)


def findings_agreement(am, sentence: int) -> None:
    """The Findings page's agreement story (``causal.agreement_effects``: heads switched off and
    patched on held-out and fresh sentences) and the chosen mission sentence in the new form with
    pattern and effect side by side (every head off in turn)."""
    from tfviz.zoo import causal as zc

    d = _agreement_d(am)
    task = cache.task_of(am)
    head = (d["pattern_heads"] or d["effect_heads"])[0]
    s = computed(am, ("findings_agreement_sentence", sentence),
                 lambda p: zc.mission_effects(am.model, task, None, [task.mission_sentences()[sentence - 1]])[0],
                 "Switching each head off on the sentence")
    _pattern_effect_figure(s, head, "find_agree_sentence", f"“{s['text']}” (live)")
    a = s["answers"].set_index("heads off")
    h = d["heads"].set_index("name")
    base = h.attrs["baseline"][zc.PAIR]
    st.markdown(ef.off_line(head, (a.loc["none", "answer"], a.loc["none", "P(answer)"]),
                            (a.loc[head, "answer"], a.loc[head, "P(answer)"]),
                            {"metric": zc.PAIR, "data": f"{d['n']['held-out']} held-out sentences",
                             "base": base, "off": base + h.loc[head, f"Δ {zc.PAIR}"]}))
    st.markdown(zc.agreement_story(d))
    c1, c2 = column_pairs(2)
    with c1:
        st.dataframe(d["sets"].round(3), hide_index=True, key="find_agree_sets")
    with c2:
        st.dataframe(d["patch"].round(3), hide_index=True, key="find_agree_patch")


def findings_contrast(cm, am) -> None:
    """Both pronoun stories side by side (``causal.pronoun_contrast``): the coref model, whose
    pattern head points at the noun while the choice is made elsewhere, and the agreement model,
    whose pattern head is the choice — each on its mission sentence with the head switched off."""
    from tfviz.zoo import causal as zc

    cd, ad = _coref_d(cm), _agreement_d(am)
    c = computed(am, ("findings_contrast",),
                 lambda p: zc.pronoun_contrast(cm.model, cache.task_of(cm), am.model, cache.task_of(am), cd, ad),
                 "Both models, one head off each", others=[cm])
    st.markdown(f"**{c['summary']}**")
    cols = column_pairs(2)
    for col, key, title in zip(cols, ("coref", "agreement"),
                               ("coref: the pattern points at the noun", "agreement: the pattern is the choice")):
        side = c[key]
        with col:
            st.markdown(f"**{title}** (live)")
            _pattern_effect_figure(side["sentence"], side["head"], f"find_contrast_{key}",
                                   f"{key}: “{side['sentence']['text'][:60]}”")
            st.markdown(side["line"])


def findings_floor(m2, m1) -> None:
    """Repeats inside the repeated part: both induction models' loss on fresh [BOS] r r with r
    drawn with replacement, beside the floor of a perfect bigram copier (``zoo.findings.floor_frame``)."""
    from tfviz.zoo import findings as zf
    from tfviz.zoo.measure import train_length_of

    vocab = cache.task_of(m2).tokenizer.vocab_size
    df = computed(m2, ("findings_floor",), lambda p: zf.floor_frame({"2 layers": m2.model, "1 layer": m1.model},
                                                                    vocab, m2.config.max_len),
                  "Repeats inside r: both models on fresh sequences", others=[m1])
    show(cache.figure(viz.repeat_floor_curves, df, title="Repeats inside r: loss on the repeat vs the floor (live)"),
         "find_ind_floor", data=df)
    st.markdown(zf.floor_sentence(df, "2 layers", train_length_of(m2.ckpt)))


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
