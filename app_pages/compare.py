"""Compare: 2-4 models that share a task or a tokenizer, side by side on one input — training
curves on the same axes, the same head, every head, head roles, loss per position and per length,
cost — and "train a pair" that differs in exactly one setting (ui.compare; tfviz.analysis.compare)."""
import pandas as pd
import streamlit as st

from tfviz import viz
from tfviz.analysis import compare as cmp
from tfviz.analysis.positional import compare_lengths, train_length
from tfviz.tasks import TASKS, cached_task
from tfviz.train.pairs import DEFAULT_VALUES, QUICK_STEPS, SETTINGS, parse_values, preset_pair
from ui import cache
from ui import compare as uc
from ui.figures import show
from ui.inputs import model_input
from ui.models import available_models, load_model
from ui.picker import current_model
from ui.widgets import choice

st.title("Compare")
current = current_model(required=False)
side, pair = st.tabs(["Side by side", "Train a pair"])
refs = {r.path: r for r in available_models()}


def columns(n):  # two per row: each chart stays readable at 1024 px
    return [c for _ in range((n + 1) // 2) for c in st.columns(2)][:n]


with pair:
    st.caption("2-4 runs on one task that differ in exactly one setting — the same seed, batches "
               "in the same order, steps — queued fairly with the class's other trainings.")
    a, b, c, d = st.columns(4)
    task_name = choice(a, "Task", list(TASKS), "pair_task", "lm")
    setting = choice(b, "Setting that differs", list(SETTINGS), "pair_setting", "norm",
                     format_func=lambda s: SETTINGS[s].title)
    text = c.text_input("Values (comma-separated)", DEFAULT_VALUES[setting], key=f"pair_values_{setting}")
    steps = d.number_input("Steps", 10, 2000, QUICK_STEPS, key="pair_steps")
    if st.button("Train the pair", key="pair_start", type="primary"):
        try:
            task = cached_task({"name": task_name})
            uc.start_pair(preset_pair(task, setting, parse_values(setting, text), steps=int(steps)), task)
        except ValueError as e:  # bad values, two differences, the session's job limit, memory
            st.error(str(e))
    uc.pair_progress()

with side:
    if "cmp_models" not in st.session_state:
        st.session_state["cmp_models"] = uc.default_models(refs, current and current.ref.path)
    st.session_state["cmp_models"] = [p for p in st.session_state["cmp_models"] if p in refs]
    chosen = st.multiselect("Models (2-4 sharing a task or a tokenizer)", list(refs), key="cmp_models",
                            format_func=lambda p: refs[p].label, max_selections=cmp.MAX_MODELS)
    if len(chosen) < 2:
        st.info("Pick two to four models (e.g. a pair trained in the other tab).")
        st.stop()
    named = {refs[p].label.rsplit(" (", 1)[0]: load_model(refs[p]) for p in chosen}
    try:
        basis = cmp.common_basis([(n, lm.ckpt) for n, lm in named.items()])
    except ValueError as e:
        st.error(str(e))
        st.stop()
    first, names = next(iter(named.values())), list(named)
    task = cache.task_of(first) if basis.kind == "task" else None
    st.caption(f"One input for all: {basis.sentence()}.")
    cap = min([lm.config.max_positions or 64 for lm in named.values()] + [64])
    if (inp := model_input(first, "cmp", cap=cap)) is None:
        st.stop()
    ids, tokens = list(inp.ids), list(inp.tokens)
    st.session_state["cmp_ids"] = ids  # the one input every model read

    st.subheader("Training")
    hist = {n: lm.ckpt.history for n, lm in named.items()}
    if len(curves := cmp.curves_frame(hist)):
        show(viz.compare_curves(curves), "cmp_curves", data=curves)
    grads = {n: cmp.grad_norm_frame(h) for n, h in hist.items()}
    if any(len(g) for g in grads.values()):
        bars = pd.concat([cmp.layer_grad_norms(h).assign(model=n) for n, h in hist.items()])
        show(viz.layer_grad_norm_bars(bars, title="Gradient norm per block, mean over training"),
             "cmp_grad_bars", data=bars)
        show(viz.grad_norm_heatmap(grads), "cmp_grads",
             data=pd.concat([g.assign(model=n) for n, g in grads.items()]))

    st.subheader("Attention on the same input")
    try:
        pats = uc.patterns(named, ids)
    except ValueError as e:
        st.error(str(e))
        st.stop()
    l_col, h_col = st.columns(2)
    layer = choice(l_col, "Layer", range(min(p.shape[0] for p in pats.values())), "cmp_layer")
    head = choice(h_col, "Head", range(min(p.shape[1] for p in pats.values())), "cmp_head")
    for col, n in zip(columns(len(names)), names):
        with col:
            show(viz.head_heatmap(pats[n][layer, head], tokens, title=f"{n}: L{layer} H{head}"),
                 f"cmp_head_{n}", data=viz.pattern_frame(pats[n][layer, head], tokens, tokens))
    for col, n in zip(columns(len(names)), names):
        with col:
            show(viz.heads_grid(pats[n], tokens, tokens, selected=(layer, head), title=f"{n}: every head"),
                 f"cmp_grid_{n}", data=viz.pattern_frame(pats[n], tokens, tokens))

    st.subheader("Head roles (orange: the models differ)")
    wide, long = uc.roles(named, task)
    show(viz.head_role_grid(wide, names), "cmp_roles", data=long)
    st.dataframe(wide.style.apply(lambda r: ["background-color: #fde7c7" if r["differs"] else ""] * len(r),
                                  axis=1), hide_index=True)

    st.subheader("Loss and accuracy per position" + ("" if task else " (on the input above)"))
    pos = uc.positions(named, task, ids)
    for col, value in zip(st.columns(2), ("loss", "accuracy")):
        with col:
            show(viz.position_curves(pos, value=value), f"cmp_pos_{value}", data=pos)
    if task is not None and first.config.arch != "encoder-decoder":
        L = train_length(task)
        factor = st.select_slider("Longest length (x training length)", [1, 2, 4, 8], 4, key="cmp_factor")
        if st.button("Evaluate at each length", key="cmp_lengths_run"):
            st.session_state["cmp_lengths_asked"] = (tuple(chosen), factor)
        if st.session_state.get("cmp_lengths_asked") == (tuple(chosen), factor):
            lens = uc.lengths(named, compare_lengths(L, factor))
            show(viz.extrapolation_curves(lens, L, scheme="model"), "cmp_lengths", data=lens)
            for m in lens.loc[lens["note"] != "", "model"].unique():
                st.warning(f"{m}: " + lens.loc[lens["model"] == m, "note"].iloc[-1])

    st.subheader("Cost")
    st.dataframe(uc.cost(named, ids), hide_index=True)
    st.caption("KV cache: bytes the self-attention keys and values take for this input (float32, "
               "batch 1). Step time: one forward + backward on this input, measured now on this "
               "server (median of 3; other sessions' load counts).")
