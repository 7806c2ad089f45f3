"""Attention explorer: every head of the selected model on your text, from one recorded forward.

Input -> one recording (cached) -> tabs that re-slice it: one head's heatmap, every layer × head,
bertviz-style lines, the formula stepped through for one query on the recorded numbers (and
checked against the recorded pattern and z), head roles, and (coreference models) the pronoun probe.
"""
import numpy as np
import streamlit as st

from tfviz import viz
from tfviz.analysis import LABELS, SOURCES, explorer, pronoun_probe
from ui import attention_state as state
from ui.figures import npz_download, show
from ui.models import current_model

TABS = ["Heatmap", "All heads", "Lines", "Step-through", "Head roles", "Pronoun probe"]
GRID_CSV_CELLS = 120_000  # larger grids: CSV of the selected head only (NPZ has everything)

st.title("Attention explorer")
st.caption("Rows are **queries** (the token doing the looking), columns **keys** (the tokens "
           "looked at); each row sums to 1. Every number is recorded from the real model.")
loaded = current_model()
cfg = loaded.config
state.reset_on_model_change(loaded.ref.path)
inp = state.input_panel(loaded)
arrays = state.recorded(loaded, inp.key) if inp is not None else None
if arrays is None:
    st.stop()
site, layer, head = state.head_picker(cfg)
qt, kt = inp.side(site.q_side), inp.side(site.k_side)
pattern = arrays[site.name(layer, "hook_pattern")][0, head]  # [q_pos, k_pos]
where = f"{site.label} · layer {layer} · head {head}"


def heatmap(key: str) -> None:
    if site.is_self:
        fig = viz.head_heatmap(pattern, qt, kt, title=where)
    else:
        fig = viz.cross_attention_alignment(pattern, kt, qt, inp.alignment, title=where)
    show(fig, key, data=viz.pattern_frame(pattern, qt, kt), filename=f"{site.label} L{layer} H{head}")


def all_heads() -> None:
    stack = explorer.layer_stack(arrays, site)  # [layer, head, q_pos, k_pos]
    fig = viz.heads_grid(stack, qt, kt, selected=(layer, head),
                         title=f"{site.label}: every layer × head (click a tile)")
    small = stack.size <= GRID_CSV_CELLS  # else the CSV holds the selected head (NPZ: all)
    show(fig, "att_grid", data=viz.pattern_frame(stack if small else pattern, qt, kt),
         on_select="rerun", filename="attention-all-heads")
    st.caption(f"Selected (red outline): **layer {layer}, head {head}** — shown below."
               + ("" if small else " The CSV holds the selected head; every head is in the NPZ "
                  "download at the bottom."))
    heatmap("att_grid_head")


def lines() -> None:
    c1, c2, c3 = st.columns([2, 1, 1])
    q = state.query_picker("Query token", "lines_query", qt, -1, every=True, where=c1)
    st.session_state.setdefault("lines_orientation", "horizontal" if len(qt) > 40 else "vertical")
    orient = c2.radio("Layout", ["vertical", "horizontal"], key="lines_orientation")
    every = c3.toggle("Every head of the layer", key="lines_all_heads")
    stack = arrays[site.name(layer, "hook_pattern")][0]  # [head, q_pos, k_pos]
    fig = viz.line_view(stack, qt, kt, selected=None if q < 0 else q,
                        heads=None if every else [head], orientation=orient,
                        title=f"{site.label} · layer {layer}" + ("" if every else f" · head {head}"))
    show(fig, "att_lines", data=viz.pattern_frame(stack if every else pattern, qt, kt))


def step_through() -> None:
    q = state.query_picker("Query token", "att_query", qt,
                           inp.query if site.q_side == "tokens" else len(qt) - 1)
    s = explorer.step_inputs(arrays, site, layer, head, q)
    kw = dict(bias_row=s.bias_row, mask_row=s.mask_row)
    table = viz.step_through_table(s.q, s.K, kt, q, **kw)
    z = viz.step_through_output(table, s.V)
    d_soft, d_z = explorer.step_check(table["softmax"], z, s)
    st.latex(r"z_i=\sum_j \mathrm{softmax}_j\Big(\mathrm{mask}_j\big(\tfrac{q_i\cdot k_j}"
             rf"{{\sqrt{{d_k}}}}+b_{{ij}}\big)\Big)\,v_j \qquad d_k={len(s.q)}")
    j = int(np.argmax(table["softmax"]))
    r = table.iloc[j]
    bias = "" if s.bias_row is None else f" → + bias {s.bias_row[j]:.3f} = {r['+bias']:.3f}"
    st.markdown(f"Largest weight: key `{kt[j]}` (pos {j}): q·k = {r['q·k']:.3f} → ÷√{len(s.q)} = "
                f"{r['q·k/√d']:.3f}{bias} → softmax **{r['softmax']:.3f}** · "
                f"{int((~s.mask_row).sum())} of {len(kt)} keys masked (−∞)")
    notes = ["q and k are the RoPE-rotated vectors (hook_rot_q, hook_rot_k)" if s.rotated else "",
             f"bias = row of hook_pos_bias ({cfg.pos})" if s.bias_row is not None else "",
             f"query head {head} reads kv head {s.kv_head} (n_heads {cfg.n_heads}, n_kv_heads "
             f"{cfg.n_kv_heads})" if cfg.n_kv_heads != cfg.n_heads else ""]
    if any(notes):
        st.caption(" · ".join(n for n in notes if n))
    ok = max(d_soft, d_z) < 1e-4
    (st.success if ok else st.error)(
        f"{'✓' if ok else '✗'} softmax = recorded hook_pattern row (max |Δ| = {d_soft:.1e}); "
        f"z = Σ softmax·v = recorded hook_z (max |Δ| = {d_z:.1e})")
    fig = viz.step_through_figure(s.q, s.K, s.V, kt, q, query_token=qt[q], **kw,
                                  title=f"{where} · query '{qt[q]}' (pos {q}) step by step")
    show(fig, "att_step", data=table, filename=f"step-through-L{layer}-H{head}-q{q}")


def head_roles() -> None:
    try:
        df = state.head_table(loaded, site)
    except ValueError as e:
        st.info(str(e))
        return
    state.remember_table(df)
    st.dataframe(df.round(3), key="att_table", on_select="rerun", selection_mode="single-row",
                 hide_index=True, width="stretch")
    inputs = sorted(set(df.attrs.get("inputs", {}).values()))
    st.caption("Pick a row to show that head. Scored on: " + "; ".join(inputs))
    with st.expander("What the labels mean"):
        st.markdown("\n".join(f"- **{k}**: {v}" for k, v in LABELS.items()))
        st.markdown("\n".join(f"- *{k}*: {v}" for k, v in SOURCES.items()))
    row = df[(df["layer"] == layer) & (df["head"] == head)]
    if len(row):
        lab = row["label"].iloc[0]
        st.markdown(f"**Layer {layer}, head {head}: {lab}** — {LABELS.get(lab, '')}")
    heatmap("att_table_head")


def probe() -> None:
    task = state.task_of(loaded)
    if state.task_name(loaded) != "coref" or not hasattr(task, "mission_sentences"):
        st.info("The pronoun probe is for coreference models (task “coref”): pick one in the "
                "sidebar, e.g. one trained on the Train page with the coref task.")
        return
    missions = task.mission_sentences()
    choices = [f"Mission sentence {i + 1}" for i in range(len(missions))] + ["The input above"]
    pick = st.radio("Sentence", choices, key="probe_source", horizontal=True)
    if pick == choices[-1]:
        ids, tokens, meta = inp.ids, inp.tokens, inp.meta
    else:
        e = missions[choices.index(pick)]
        ids, tokens, meta = list(e.tokens), loaded.tokenizer.tokens_of(e.tokens), e.meta
        st.markdown(f"> {e.text}")
    rec = state.recorded(loaded, (tuple(ids),))
    candidates = explorer.probe_candidates(tokens, meta)
    queries = sorted(set(explorer.pronoun_positions(tokens)) | {int(meta.get("query_index", -1))}
                     - {-1})
    if rec is None or not queries or not candidates:
        st.info("This sentence needs an 'it'/'its' and candidate nouns (e.g. 'the law').")
        return
    q = state.query_picker("Pronoun (query)", "probe_query", tokens, queries[-1])
    P = explorer.layer_stack(rec, explorer.sites(cfg)[0])  # [layer, head, q_pos, k_pos]
    df = pronoun_probe(P, q, candidates)
    for name, heads in explorer.probe_summary(df, list(candidates)).items():
        who = ", ".join(f"L{lh[0]}·H{lh[1]} ({lh[2]:.2f})" for lh in heads) or \
            "no head (none puts ≥ 0.1 and 1.5× the other candidates' weight on it)"
        st.markdown(f"Heads resolving `{tokens[q]}` → **'{name}'**: {who}")
    w = P[:, :, q, :]
    fig = viz.pronoun_probe(w, tokens, candidates, pronoun_index=q,
                            title=f"Where does '{tokens[q]}' (pos {q}) look, in every head?")
    show(fig, "att_probe", data=viz.pronoun_probe_frame(w, tokens, candidates))
    st.dataframe(df.round(3), hide_index=True)


tabs = st.tabs(TABS, key="att_tab", on_change="rerun")
for tab, render in zip(tabs, [lambda: heatmap("att_heatmap"), all_heads, lines, step_through,
                              head_roles, probe]):
    if tab.open:
        with tab:
            render()
with st.expander("Download the recorded tensors"):
    st.caption(", ".join(f"{k} {list(v.shape)}" for k, v in list(arrays.items())[:12]) + " …")
    npz_download(arrays, "att_npz", filename="attention-recording.npz")
