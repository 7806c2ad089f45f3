"""Compare: 2-4 models that share a task or a tokenizer, side by side on one input — training
curves on the same axes, the same head, every head, head roles, loss per position and per length,
cost — and "train a pair" that differs in exactly one setting (ui.compare; tfviz.analysis.compare)."""
import streamlit as st

from tfviz import viz
from tfviz.analysis import compare as cmp
from tfviz.analysis.positional import compare_lengths, train_length
from tfviz.bench.measure import STEP_WARMUP
from tfviz.tasks import TASKS, cached_task
from tfviz.runs.pairs import DEFAULT_VALUES, MAX_RUNS, SETTINGS, parse_values, preset_pair
from ui import cache
from ui import compare as uc
from ui.figures import show
from ui.inputs import model_input
from ui.models import available_models
from ui.picker import current_model
from ui.widgets import choice, column_pairs, or_stop

st.title("Compare")
current = current_model(required=False)
if uc.OPEN in st.session_state:  # "Compare them side by side" was pressed: show that tab
    st.session_state["cmp_tab"] = "Side by side"
side, pair = st.tabs(["Side by side", "Train a pair"], key="cmp_tab", on_change="rerun")
refs = {r.path: r for r in available_models()}


def attention_panels(named: dict, inp, task) -> None:
    """The same layer/head of every model with heads (of one kind of attention for
    encoder-decoders: ``uc.attention_view``), their every-head grids and head roles."""
    names, at = list(named), (uc.key(named), inp.key)
    st.subheader("Attention on the same input")
    view = uc.attention_view(named)
    site = cmp.view_site(next(iter(named.values())).config, view)
    qt, kt = inp.side(site.q_side), inp.side(site.k_side)  # source tokens where it reads the source
    pats = or_stop(lambda: uc.patterns(named, inp.ids, inp.src_ids, view))
    l_col, h_col = st.columns(2)
    layer = choice(l_col, "Layer", range(min(p.shape[0] for p in pats.values())), "cmp_layer")
    head = choice(h_col, "Head", range(min(p.shape[1] for p in pats.values())), "cmp_head")
    what = f"{view} " if view else ""
    for col, n in zip(column_pairs(len(names)), names):
        with col:
            show(cache.figure_for((*at, view, n, layer, head), viz.head_heatmap, pats[n][layer, head],
                                  qt, kt, title=f"{n}: {what}L{layer} H{head}"),
                 f"cmp_head_{n}", data=lambda p=pats[n][layer, head]: viz.pattern_frame(p, qt, kt))
    for col, n in zip(column_pairs(len(names)), names):
        with col:
            show(cache.figure_for((*at, view, n, layer, head), viz.heads_grid, pats[n], qt, kt,
                                  selected=(layer, head), title=f"{n}: {what}every head"),
                 f"cmp_grid_{n}", data=lambda p=pats[n]: viz.pattern_frame(p, qt, kt))
    uc.roles_panel(named, task, view)


with pair:
    most = uc.runs_allowed()
    st.caption("2-4 runs on one task that differ in exactly one setting — the same seed, batches "
               "in the same order, steps; each otherwise the task's Train preset (its model and, by "
               "default, its steps) — queued fairly with the class's other trainings."
               + (f" On this server a session trains at most {most} runs at once "
                  "(TFVIZ_JOBS_PER_SESSION)." if most is not None and most < MAX_RUNS else ""))
    (a, b), (c, d) = st.columns([1, 2]), st.columns(2)  # four in a row cut the setting's name
    task_name = choice(a, "Task", list(TASKS), "pair_task", "lm")
    setting = choice(b, "Setting that differs", list(SETTINGS), "pair_setting", "norm",
                     format_func=lambda s: SETTINGS[s].title)
    text = c.text_input("Values (comma-separated)", DEFAULT_VALUES[setting], key=f"pair_values_{setting}")
    steps = d.number_input("Steps", 10, uc.PAIR_MAX_STEPS, uc.pair_steps(task_name), key=f"pair_steps_{task_name}",
                           help="Each run's steps; the default is the Train page's preset for the task")
    if st.button("Train the pair", key="pair_start", type="primary"):
        try:
            task = cached_task({"name": task_name})
            uc.start_pair(preset_pair(task, setting, parse_values(setting, text), steps=int(steps),
                                      d_model=None), task)  # the Train preset's width and steps
        except ValueError as e:  # bad values, two differences, the session's job limit, memory
            st.error(str(e))
    uc.pair_progress()

with side:
    uc.select(refs, current and current.ref.path)
    chosen = st.multiselect("Models (2-4 sharing a task or a tokenizer)", list(refs), key="cmp_models",
                            format_func=lambda p: refs[p].label, max_selections=cmp.MAX_MODELS)
    if len(chosen) < 2:
        st.info("Pick two to four models (e.g. a pair trained in the other tab).")
        st.stop()
    named = uc.load_named(refs, chosen)
    basis = or_stop(lambda: cmp.common_basis([(n, lm.ckpt) for n, lm in named.items()]))
    first, names, models_key = uc.input_model(named), list(named), uc.key(named)
    task = cache.task_of(first) if basis.kind == "task" else None
    st.caption(f"One input for all: {basis.sentence()}.")
    if (inp := model_input(first, "cmp", cap=cmp.input_cap([lm.config for lm in named.values()]))) is None:
        st.stop()
    ids, tokens, src = list(inp.ids), list(inp.tokens), inp.src_ids
    st.session_state["cmp_ids"], st.session_state["cmp_src"] = ids, src  # the one input every model read

    st.subheader("Training")
    curves, gradients = uc.training(named)
    if bare := [n for n, lm in named.items() if not lm.ckpt.history]:
        st.info(f"{', '.join(bare)}: no training history (imported from disk, or saved without "
                "one), so no curve here.")
    if len(curves):
        show(cache.figure_for(models_key, viz.compare_curves, curves), "cmp_curves", data=curves)
    if gradients is not None:
        bars, every, grads = gradients
        show(cache.figure_for(models_key, viz.layer_grad_norm_bars, bars,
                              title="Gradient norm per block, mean over training"), "cmp_grad_bars", data=bars)
        show(cache.figure_for(models_key, viz.grad_norm_heatmap, grads), "cmp_grads", data=every)

    if attending := uc.with_heads(named):  # a recurrent network has no heads
        attention_panels(attending, inp, task)

    st.subheader("Loss and accuracy per position" + ("" if task else " (on the input above)"))
    pos = uc.positions(named, task, ids, src)
    for col, value in zip(st.columns(2), ("loss", "accuracy")):
        with col:
            show(cache.figure_for((models_key, () if task else tuple(ids)), viz.position_curves, pos,
                                  value=value), f"cmp_pos_{value}", data=pos)
    if task is None:
        st.caption("Loss at each length (extrapolation) needs a task the models share: theirs is "
                   "measured on its data at 1x to 8x its training length.")
    elif first.config.arch != "encoder-decoder":
        L = train_length(task)
        factor = st.select_slider("Longest length (x training length)", [1, 2, 4, 8], 4, key="cmp_factor")
        if st.button("Evaluate at each length", key="cmp_lengths_run"):
            st.session_state["cmp_lengths_asked"] = (tuple(chosen), factor)
        if st.session_state.get("cmp_lengths_asked") == (tuple(chosen), factor):
            lens = uc.lengths(named, compare_lengths(L, factor))
            show(cache.figure_for((models_key, factor), viz.extrapolation_curves, lens, L, scheme="model"),
                 "cmp_lengths", data=lens)
            for m, note in cmp.length_notes(lens).items():
                st.warning(f"{m}: {note}")

    st.subheader("Cost")
    st.dataframe(uc.cost(named, ids, src), hide_index=True)
    st.caption("KV cache: bytes the self-attention keys and values take for this input (float32, "
               "batch 1); for a recurrent network, its hidden (and LSTM cell) state, the same at any "
               "length. Step time: one forward + backward on this input, measured now on this "
               f"server: {STEP_WARMUP} untimed warm-up steps of each model first (the first steps "
               "pay one-off costs), then the median of 3 taken in turn; other sessions' load counts.")
