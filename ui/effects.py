"""The Attention explorer's "Effects" tab: does the head matter? Switching heads off (every head's
effect beside its pattern), patching from a second input, the logit lens, direct logit attribution
and the chosen head's QK / OV circuits. Everything is computed by ``tfviz.analysis.effects`` /
``interventions`` / ``attribution``; this module holds the widgets and a server-wide store.

Justified as one module (not ``ui/cache.py`` wrappers): a head grid of a 124M model takes seconds,
so it runs behind a real progress bar, once per (model, input) for the whole server, and
``st.cache_data`` cannot show a live bar; the store below can (as ``ui/why.py``'s word2vec).

A grid never holds up the other sessions on its model (issue 29): it runs on a private copy of
the module tree (``interventions.private``: the shared weights, its own hooks), taken under the
model's lock in milliseconds; one computation per key for the server (later callers wait on the
first, with its progress: ``tfviz.classroom.results``), one at a time per session; on the CPU a
grid's size is known before it starts (``interventions.grid_cost``: its forwards' FLOPs, and one
forward timed on this input: "about N s"), one above ``TFVIZ_GRID_MAX_GFLOP`` is refused with the
limit, and one over ``TFVIZ_GRID_AUTO_GFLOP`` waits for a button showing its estimate ("about
N s") instead of starting when the tab opens.
"""
from __future__ import annotations

import numpy as np
import streamlit as st

from tfviz import viz
from tfviz.analysis import attribution as at
from tfviz.analysis import effects as ef
from tfviz.analysis import interventions as iv
from tfviz.analysis import spread as sp

from . import cache, effects_tools
from .figures import show
from .models import locked
from .widgets import chart_cells, metric_row

VIEWS = ["Switch heads off", "Patch from another input", "Logit lens", "Attribution & circuits",
         "Gradients & paths", "Weights & composition"]
KEEP = 48  # results kept for the server (a head table is a few kB, a lens a few MB at most)
TASK_DATA = {"coref": "the task's first 300 test sentences", "induction": "32 fresh [BOS] r r sequences (|r| = 40)",
             "agreement": "the task's first 300 test sentences"}
PRONOUN_TASKS = ef.PRONOUN_TASKS


@st.cache_resource
def _store():
    """The server's one store of computed results (``tfviz.classroom.results.SharedResults``)."""
    from tfviz.classroom.results import SharedResults

    return SharedResults(keep=KEEP)


@st.cache_resource
def _timings():
    """One plain forward's time per (model, input shape), measured once for the server."""
    from tfviz.classroom.results import SharedResults

    return SharedResults(keep=256)


def _forward_seconds(lm, inputs, rows: int) -> float:
    """One plain forward of ``inputs`` repeated to ``rows`` rows (a grid's typical forward) on a
    private copy of the model, timed once for the server per model and shape: what a grid's
    estimate scales."""
    import time

    import torch

    batch = inputs[-1].shape[0]
    x = tuple(t.repeat(max(1, rows // batch), *([1] * (t.dim() - 1))) for t in inputs)

    def run(report):
        with locked([lm]):
            model = iv.private(lm.model)
        with torch.no_grad():
            t = time.perf_counter()
            model.eval()(*x)
            return time.perf_counter() - t
    return _timings().get((*lm.key, tuple(t.shape for t in x)), run)


def _flop(x: float) -> str:
    scale, unit = next(((s, u) for s, u in ((1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP")) if x >= s), (1, "FLOP"))
    return f"{x / scale:,.1f} {unit}"


def _may_start(lm, full: tuple, cost: iv.GridCost, what: str, inputs) -> tuple[bool, str]:
    """(whether the grid may start now, its estimate in words), on a CPU: refused above the limit;
    over ``TFVIZ_GRID_AUTO_GFLOP`` a button with its estimated time (by size, not by a timing, so
    whether a grid starts by itself does not depend on how busy the machine is)."""
    import hashlib

    from tfviz import limits

    size = f"{cost.variants:,} runs of the model on {cost.tokens:,} tokens ({_flop(cost.flops)})"
    limit, cpu = limits.grid_max_flops(), next(lm.model.parameters()).device.type == "cpu"
    if not cpu:  # the size bound is the CPU's (issue 29); no GPU was measured for one
        return True, ""
    if limit and cost.flops > limit:
        fits = max(1, int(cost.tokens * limit / cost.flops))
        st.info(f"{what}: {size}. This server computes at most {_flop(limit)} per grid on its CPU "
                f"(TFVIZ_GRID_MAX_GFLOP): shorten the input to about {fits:,} tokens, or pick a "
                "smaller model.")
        return False, size
    if cost.flops <= limits.grid_auto_flops():
        return True, ""
    seconds = cost.seconds(_forward_seconds(lm, inputs, cost.rows))
    about = f"about {seconds:,.0f} s" if seconds >= 1.5 else "about a second"
    st.caption(f"{what}: {size}, {about} on this server now (one forward timed on this input, "
               "scaled by the grid's work).")
    key = "eff_go_" + hashlib.sha1(repr(full).encode()).hexdigest()[:12]
    return st.button(f"Compute ({about})", key=key, icon=":material/play_arrow:"), about


def starts_by_itself(lm, cost: iv.GridCost) -> bool:
    """Whether a grid of this cost starts without a button (``_may_start``'s rule, nothing drawn)."""
    from tfviz import limits

    if next(lm.model.parameters()).device.type != "cpu":
        return True
    limit = limits.grid_max_flops()
    return not (limit and cost.flops > limit) and cost.flops <= limits.grid_auto_flops()


def stored(lm, key: tuple, others=()):
    """``computed``'s result for (model, key) when some session has computed it, else None (never
    starts a computation)."""
    from tfviz.classroom.results import MISSING

    hit = _store().peek((*lm.key, *(o.key for o in others), *key))
    return None if hit is MISSING else hit


def computed(lm, key: tuple, compute, what: str, others=(), cost: tuple | None = None, owner=None):
    """``compute(progress, model, *other_models)`` once per (model, key) for the server, on
    private copies of the models (``interventions.private``: taken under the models' locks,
    then run without them, so the other sessions' views of these models are not held up), with
    a progress bar; later calls (any session) read the stored result, and calls made while it is
    computed wait for it (with its progress) instead of computing it again. One computation at a
    time per session (``owner``, default this session's id). ``cost``: (``interventions.GridCost``,
    the inputs to time one forward on): refused above the CPU limit, a button above the
    automatic start's estimate. Returns None when nothing was computed (a refusal or a button,
    shown)."""
    from tfviz.classroom.results import MISSING, Busy

    from .session import session_id

    store = _store()
    full = (*lm.key, *(o.key for o in others), *key)
    if (hit := store.peek(full)) is not MISSING:
        return hit
    about = ""
    if cost is not None and not store.callers(full):  # one being computed is waited for
        go, about = _may_start(lm, full, cost[0], what, cost[1])
        if not go:
            return None
    label = f"{what} ({about})" if about else what
    bar = st.progress(0.0, text=f"{label}…")

    def run(report):
        with locked([lm, *others]):  # only while the copies are taken
            models = [iv.private(m.model) for m in (lm, *others)]

        def progress(f, msg):
            report(f, msg)
            bar.progress(min(1.0, f), text=f"{label}: {msg}")
        return compute(progress, *models)

    try:
        return store.get(full, run, owner=session_id() if owner is None else owner,
                         wait=lambda f, msg: bar.progress(min(1.0, f), text=f"{label}, started by "
                                                          f"another session: {msg}"))
    except Busy:
        st.info(f"{what}: another tab of yours is computing a grid; one at a time per session. "
                "Come back to this one when that one is done.")
        return None
    finally:
        bar.empty()


def _probe(lm, inp, data: str, model):
    """The probe a grid measures (``model``: the private copy it runs on; the task's data need none)."""
    task = cache.task_of(lm)
    if data != "input" and lm.task_name in PRONOUN_TASKS:
        return ef.coref_probe(task.examples("test")[:300])
    if data != "input" and lm.task_name == "induction":
        return ef.induction_repeat_probe(ef.repeat_sequences(task.tokenizer.vocab_size, 40, 32))
    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    return ef.input_probe(model, lm.task_name, inp.ids, inp.meta, inp.src_ids, mask)


def _grid_cost(lm, inputs, first_layers) -> tuple:
    """``computed``'s cost for variants starting at ``first_layers`` on ``inputs``."""
    batch, length = inputs[-1].shape[0], sum(t.shape[1] for t in inputs)
    return iv.grid_cost(lm.model, batch, length, first_layers), inputs


def _inputs(lm, inp, data: str) -> tuple:
    """What a grid runs on: the task's data, or this input (as tensors), known without the model."""
    import torch

    if data != "input" and lm.task_name in TASK_DATA:
        return _probe(lm, inp, data, None).inputs
    return tuple(torch.tensor([list(x)]) for x in inp.key)


def heads_off(lm, inp, site, layer: int, head: int) -> None:
    data = "input"
    if lm.task_name in TASK_DATA and site.stack == "":
        data = st.radio("Measured on", ["input", "task"], horizontal=True, key="eff_data",
                        format_func=lambda d: "this input" if d == "input" else TASK_DATA[lm.task_name])
    key = ("heads", data, site.label, inp.key if data == "input" else None)
    df = computed(lm, key, lambda p, m: ef.head_effects(m, _probe(lm, inp, data, m), stack=site.stack,
                                                        attention=site.attention, progress=p,
                                                        spread=data != "input"),
                  f"Switching each of {lm.config.n_layers * lm.config.n_heads} heads off",
                  cost=_grid_cost(lm, _inputs(lm, inp, data), iv.head_grid_layers(lm.model)))
    if df is None:
        return
    metrics, pattern = list(df.attrs["baseline"]), df.attrs.get("pattern", [])
    c1, c2 = st.columns(2)
    m = c1.selectbox("Metric", metrics, key="eff_metric") if len(metrics) > 1 else metrics[0]
    shown = c2.selectbox("Pattern score", pattern, key="eff_pattern") if len(pattern) > 1 else \
        (pattern[0] if pattern else None)
    higher = ef.higher_is_better(df, m)
    row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
    metric_row((f"{m}, unchanged", _with_spread(df, m, df.attrs['baseline'][m])),
               (f"L{layer}H{head} off", f"{row[m]:.4g}", dict(delta=f"{row[f'Δ {m}']:+.3g}", delta_color=(
                   "normal" if higher else "inverse"))),
               *([(f"pattern: {shown}", f"{row[shown]:.2f}")] if shown else []))
    st.markdown(ef.head_sentence(df, layer, head, m))
    if (line := answer_line(lm, inp, site, layer, head, m)) is not None:
        st.markdown(line)
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
    together = st.text_input("Switch several heads off together", key="eff_set", max_chars=2000,
                             placeholder="e.g. L1H1+L1H3, or L1 for a whole layer",
                             help="Heads as L{layer}H{head} joined by +; a layer alone (L1) is all its heads.")
    if together.strip():
        try:
            sites = iv.parse_heads(lm.model, together, site.stack, site.attention)
        except ValueError as e:
            return st.info(str(e))
        sets = computed(lm, ("set", data, site.label, inp.key if data == "input" else None, together),
                        lambda p, m: ef.set_effects(m, _probe(lm, inp, data, m), {together: sites},
                                                    spread=data != "input"),
                        "Switching them off")
        if sets is not None:
            shown = [c for c in sets.columns if not c.startswith("Δ ") or c.startswith(f"Δ {m} ")]
            st.dataframe(sets[shown].round(4), hide_index=True, key="eff_set_table")
            if sets.attrs.get("n", 1) > 1:
                st.caption(f"Δ {m} lo / hi: the 95% bootstrap interval of the change over the "
                           f"{sets.attrs['n']} examples; clear = it leaves out no change.")
            if (line := set_answer_line(lm, inp, together, sites, sets, data)) is not None:
                st.markdown(line)
    _spreads(df, m, layer, head, higher)
    st.caption("Switched off = the head's output (its slice of `attn.hook_z`, before W_O mixes the "
               "heads) set to zero for the whole input. A pattern says where a head looks; only "
               "switching it off says whether the answer depends on it.")


def _with_spread(df, m: str, value: float) -> str:
    """The unchanged value, "± half its 95% interval" when measured over several examples."""
    s = df.attrs.get("spread", {}).get(m)
    if not s or df.attrs.get("n", 1) < 2:
        return f"{value:.4g}"
    return sp.plus_minus(s)


def _spreads(df, m: str, layer: int, head: int, higher: bool) -> None:
    """Each head's change with its 95% interval over the examples (measured on the task's)."""
    if df.attrs.get("n", 1) < 2 or f"Δ {m} lo" not in df.columns:
        return
    with st.expander(f"Spread over the {df.attrs['n']} examples: which heads clearly matter", expanded=True):
        st.markdown(sp.head_spread_sentence(df, layer, head, m))
        show(cache.figure(viz.effect_intervals, list(df["name"]), df[f"Δ {m}"].to_numpy(),
                          df[f"Δ {m} lo"].to_numpy(), df[f"Δ {m} hi"].to_numpy(), metric=m, n=df.attrs["n"],
                          clear=df[f"Δ {m} clear"].to_numpy(), how="95% bootstrap interval",
                          title=f"Each head off: Δ {m} with its 95% interval"), "eff_intervals",
             data=df[["name", f"Δ {m}", f"Δ {m} se", f"Δ {m} lo", f"Δ {m} hi", f"Δ {m} clear"]])
        st.caption(f"Intervals: the percentile bootstrap over the {df.attrs['n']} examples ({sp.N_BOOT} "
                   "resamples, seeded), of the per-example change (each example with the head off minus "
                   "the same example unchanged). A head is called clear only when its interval leaves out "
                   "no change. ± in the numbers above is half the interval's width. The spread is over "
                   "the examples drawn, not over training runs.")


def answer_line(lm, inp, site, layer: int, head: int, metric: str) -> str | None:
    """What the model answers on this input with the head off (top token and probability) and,
    for a task with held-out data, what the held-out average of ``metric`` does, in one line."""
    import torch

    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    pos = ef.answer_position(inp.ids, inp.meta, lm.config.arch, mask)
    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    off = [iv.head(layer, head, site.stack, site.attention)]
    ans = computed(lm, ("answer", inp.key, site.label, layer, head, pos),
                   lambda p, m: ef.top_answers(m, x, pos, [[], off]), "Reading the answer")
    if ans is None:
        return None
    (before, after) = [(lm.tokenizer.tokens_of([a])[0], pa) for a, pa in ans]
    average, df = None, None
    if lm.task_name in TASK_DATA and site.stack == "":  # the grid heads_off shows for the task:
        key = ("heads", "task", site.label, None)  # stored, or computed when small enough to start by
        df = stored(lm, key)                       # itself (never a second button under the first)
        cost = None if df is not None else _grid_cost(lm, _inputs(lm, inp, "task"), iv.head_grid_layers(lm.model))
        if cost is not None and starts_by_itself(lm, cost[0]):  # the probe is built only when not stored
            df = computed(lm, key,
                          lambda p, mod: ef.head_effects(mod, _probe(lm, inp, "task", mod), stack=site.stack,
                                                         attention=site.attention, progress=p, spread=True),
                          f"Switching each of {lm.config.n_layers * lm.config.n_heads} heads off on the task",
                          cost=cost)
    if df is not None:
        m = metric if metric in df.attrs["baseline"] else df.attrs["headline"]
        row = df[(df["layer"] == layer) & (df["head"] == head)].iloc[0]
        average = {"metric": m, "data": TASK_DATA[lm.task_name], "base": df.attrs["baseline"][m],
                   "off": row[m], "higher": ef.higher_is_better(df, m)}
    line = ef.off_line(f"L{layer}H{head}", before, after, average)
    return f"At position {pos} (*{inp.tokens[pos]}*), w" + line[1:]


def set_answer_line(lm, inp, name: str, sites, sets, data: str) -> str | None:
    """What the model answers on this input with the set ``name`` (``sites``) off, beside the
    set table's headline over the task's data when that is what the table measured."""
    import torch

    mask = getattr(lm.tokenizer, "mask_id", None) if lm.tokenizer is not None else None
    pos = ef.answer_position(inp.ids, inp.meta, lm.config.arch, mask)
    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    ans = computed(lm, ("answer_set", inp.key, name, pos),
                   lambda p, m: ef.top_answers(m, x, pos, [[], list(sites)]), "Reading the answer")
    if ans is None:
        return None
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
    import torch

    if lm.config.arch == "encoder-decoder":
        return st.info("Patching here takes one-stack models (decoder or encoder).")
    default_pos, default_word = _replacement(lm, inp)
    c1, c2 = st.columns(2)
    pos = c1.selectbox("Word to change", range(len(inp.ids)), index=min(default_pos, len(inp.ids) - 1),
                       key="eff_patch_pos", format_func=lambda i: f"{i}: {inp.tokens[i]}")
    word = c2.text_input("Replace it by", value=default_word, key="eff_patch_word", max_chars=100,
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
    n, L = len(inp.ids), lm.config.n_layers  # every layer x position, then every head, + 6 plain runs
    first = [None] * 6 + [l for l in range(L) for _ in range(n)] + iv.head_grid_layers(lm.model)[1:]
    try:
        d = computed(lm, ("patch", inp.key, pos, ids, at_pos, good, bad),
                     lambda p, m: ef.patching(m, inp.ids, corrupt, pos=at_pos, progress=p, good=good, bad=bad),
                     "Patching", cost=_grid_cost(lm, (torch.tensor([list(inp.ids)]),), first))
    except ValueError as e:
        return st.info(str(e))
    if d is None:
        return
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
    for col, (fig, key) in zip(chart_cells(2), figs):
        with col:
            show(fig, key)


def token_or_reason(tok, word: str) -> tuple[int | None, str]:
    """(the id of ``word`` as one token of the model's vocabulary, "") or (None, why not): empty,
    more than one token, or a word the vocabulary lacks (read as [UNK], the same for every
    unknown word, so patching it would say nothing about the word)."""
    if tok is None:
        return None, "This model has no tokenizer to read a word with."
    if not word or len(word) > 100:  # one token: a word, not a text
        return None, "Type a word that is one token of this model's vocabulary."
    unknown = False
    for w in (word, " " + word):
        try:
            ids = tok.encode_ids(w)
        except ValueError:  # tfviz.tokenize.TokenizerError: this tokenizer cannot read it
            return None, f"This model's tokenizer cannot read '{word[:40]}'."
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

    def run(progress, model):
        progress(0.2, "one forward")
        L = at.logit_lens(model, tuple(torch.tensor([list(x)]) for x in inp.key))[:, 0]
        top = at.lens_top(L, 1)
        final = L[-1].argmax(-1)  # [pos]: the model's own answers
        track = L.float().softmax(-1).gather(-1, final[None, :, None].expand(L.shape[0], -1, 1))[..., 0]
        return top["ids"][..., 0], top["probs"][..., 0], track.numpy()
    if (got := computed(lm, ("lens", inp.key), run, "Logit lens")) is None:
        return
    ids, probs, track = got
    names = [lm.tokenizer.tokens_of(list(map(int, row))) for row in ids]
    colour = st.radio("Colour", ["top token's probability", "probability of the model's final answer"],
                      horizontal=True, key="eff_lens_colour")
    fig = cache.figure(viz.logit_lens_heatmap, probs, names, inp.tokens,
                       track=None if colour.startswith("top") else track, track_name="final answer")
    show(fig, "eff_lens")
    st.caption("Each row reads the residual stream through the model's own final norm and "
               "unembedding, as if the later layers were skipped (nostalgebraist 2020). The last "
               "row is the model's output. The lens freezes nothing: each row is normalised by its "
               "own scale. (Attribution, in the next view, freezes the final norm's scale at the last "
               "layer's value instead, so that its parts add up.)")


def attribution(lm, inp, site, layer: int, head: int) -> None:
    import torch

    x = tuple(torch.tensor([list(v)]) for v in inp.key)
    if why := at.attribution_refusal(lm.model):
        st.info(f"Direct logit attribution: {why}.")
    else:
        def run(progress, model):
            with torch.no_grad():
                logits = model.eval()(*x)[0, -1]
            good, bad = logits.topk(2).indices.tolist()
            d = at.direct_logit_attribution(model, x, good, bad)
            return good, bad, list(d.parts), np.array([v[0] for v in d.parts.values()]), float(d.total[0])
        if (got := computed(lm, ("dla", inp.key), run, "Attributing")) is None:
            return
        good, bad, parts, values, total = got
        g, b = lm.tokenizer.tokens_of([good, bad])
        show(cache.figure(viz.attribution_bars, parts, values, total=total, good=g, bad=b,
                          title=f"Why '{g}' over '{b}' at the last position"), "eff_dla")
        st.caption(f"The parts add up to {values.sum():+.4f}; the model's own logit difference is "
                   f"{total:+.4f}. The final norm's scale is frozen at its value on this input (with "
                   "it frozen the norm is linear); its bias and the unembedding's are one part. (The "
                   "logit lens freezes nothing: each layer there gets its own scale.)")
    if not site.is_self:
        return st.info("QK / OV circuits are drawn for self-attention heads.")
    c = computed(lm, ("circuits", inp.key, site.label, layer, head),
                 lambda p, m: at.circuits(m, layer, head, at.top_tokens(m, x, k=24), site.stack),
                 "Circuits")
    if c is None:
        return
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

    d = _coref_d(lm)
    if d is None:
        return
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


def _coref_d(lm):
    from tfviz.zoo import causal as zc
    return computed(lm, ("findings_coref",), lambda p, m: zc.coref_effects(m, cache.task_of(lm)),
                    "Switching heads off on 492 sentences")


def _agreement_d(lm):
    from tfviz.zoo import causal as zc
    return computed(lm, ("findings_agreement",), lambda p, m: zc.agreement_effects(m, cache.task_of(lm)),
                    "Switching heads off and patching them on 492 sentences")


def findings_coref_sentence(lm, sentence: int) -> None:
    """The coref story on the chosen mission sentence: what the model answers with each head the
    held-out story names switched off, beside the held-out average, one line each."""
    from tfviz.zoo import causal as zc

    d = _coref_d(lm)
    if d is None:
        return
    task = cache.task_of(lm)
    names = list(dict.fromkeys(d["pattern_heads"][:1] + d["effect_heads"]))
    s = computed(lm, ("findings_coref_sentence", sentence),
                 lambda p, m: zc.mission_effects(m, task, names, [task.mission_sentences()[sentence - 1]])[0],
                 "Switching heads off on the sentence")
    if s is None:
        return
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
    if d is None:
        return
    task = cache.task_of(am)
    head = (d["pattern_heads"] or d["effect_heads"])[0]
    s = computed(am, ("findings_agreement_sentence", sentence),
                 lambda p, m: zc.mission_effects(m, task, None, [task.mission_sentences()[sentence - 1]])[0],
                 "Switching each head off on the sentence")
    if s is None:
        return
    _pattern_effect_figure(s, head, "find_agree_sentence", f"“{s['text']}” (live)")
    a = s["answers"].set_index("heads off")
    h = d["heads"].set_index("name")
    base = h.attrs["baseline"][zc.PAIR]
    st.markdown(ef.off_line(head, (a.loc["none", "answer"], a.loc["none", "P(answer)"]),
                            (a.loc[head, "answer"], a.loc[head, "P(answer)"]),
                            {"metric": zc.PAIR, "data": f"{d['n']['held-out']} held-out sentences",
                             "base": base, "off": base + h.loc[head, f"Δ {zc.PAIR}"]}))
    st.markdown(zc.agreement_story(d))
    c1, c2 = chart_cells(2)
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
    if cd is None or ad is None:
        return
    c = computed(am, ("findings_contrast",),
                 lambda p, a, c: zc.pronoun_contrast(c, cache.task_of(cm), a, cache.task_of(am), cd, ad),
                 "Both models, one head off each", others=[cm])
    if c is None:
        return
    st.markdown(f"**{c['summary']}**")
    cols = chart_cells(2)
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
    df = computed(m2, ("findings_floor",), lambda p, two, one: zf.floor_frame({"2 layers": two, "1 layer": one},
                                                                              vocab, m2.config.max_len),
                  "Repeats inside r: both models on fresh sequences", others=[m1])
    if df is None:
        return
    show(cache.figure(viz.repeat_floor_curves, df, title="Repeats inside r: loss on the repeat vs the floor (live)"),
         "find_ind_floor", data=df)
    st.markdown(zf.floor_sentence(df, "2 layers", train_length_of(m2.ckpt)))


def findings_induction(m2, m1) -> None:
    """The Findings page's induction heads switched off: the previous-token head, each, every
    pair and all of the last layer's heads; the 1-layer model's (``tfviz.zoo.causal``)."""
    from tfviz.zoo import causal as zc

    n = int(m2.ckpt.task["n_symbols"])
    i = computed(m2, ("findings_induction",), lambda p, two, one: zc.induction_effects(two, one, n),
                 "Switching heads off", others=[m1])
    if i is None:
        return
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
    elif view == VIEWS[3]:
        attribution(lm, inp, site, layer, head)
    elif view == VIEWS[4]:
        effects_tools.gradients_and_paths(lm, inp, site, layer, head, _TAB)
    else:
        effects_tools.weights_and_composition(lm, inp, site, layer, head, _TAB)


class _TAB:  # the helpers effects_tools' views share with this tab's own (handed in: no import cycle)
    computed = staticmethod(computed)
    replacement = staticmethod(_replacement)
    token_or_reason = staticmethod(token_or_reason)
