"""Attention explorer: one recorded forward (cached per model and input), re-sliced by tabs:
one head, every head, lines, the formula stepped through (checked against the recording), head
roles, the pronoun probe."""
import streamlit as st

from tfviz import viz
from tfviz.analysis import explorer, labels_markdown, pronoun_probe
from ui import cache, effects
from ui.figures import npz_download, show
from ui.inputs import model_input
from ui.picker import current_model
from ui.widgets import (forget_on_model_change, or_stop, query_picker, remember_table_heads,
                        site_layer_head)

TABS = ["Heatmap", "All heads", "Lines", "Step-through", "Head roles", "Pronoun probe", "Effects"]
MODEL_KEYS = ("att_site", "att_layer", "att_head", "att_query", "lines_query", "lines_orientation",
              "probe_source", "probe_query", "_att_seen_grid", "_att_seen_table", "_att_table_heads")

st.title("Attention explorer")
lm = current_model(needs="self_attention")
cfg = lm.config
forget_on_model_change(lm, "att", MODEL_KEYS)
left, right = st.columns([3, 1])  # the input beside layer / head: at 1024 × 768 the heatmap shows
with left:
    if (inp := model_input(lm, "att")) is None:
        st.stop()
arrays = or_stop(lambda: cache.record(lm, inp.key), "The model cannot run on this input: {}")
with right:
    site, layer, head = site_layer_head(cfg, "att", stacked=True)
qt, kt = inp.side(site.q_side), inp.side(site.k_side)
pattern = arrays[site.name(layer, "hook_pattern")][0, head]  # [q_pos, k_pos]
where = f"{site.label} · layer {layer} · head {head}"


def heatmap(key: str) -> None:
    fig = cache.figure(viz.head_heatmap, pattern, qt, kt, title=where) if site.is_self else \
        cache.figure(viz.cross_attention_alignment, pattern, kt, qt, inp.alignment, title=where)
    show(fig, key, data=lambda: viz.pattern_frame(pattern, qt, kt), filename=f"{site.label} L{layer} H{head}")
    st.caption("Rows are **queries** (the token doing the looking), columns **keys** (the tokens "
               "looked at); each row sums to 1. Every number is recorded from the real model.")


def all_heads() -> None:
    stack = explorer.layer_stack(arrays, site)  # [layer, head, q_pos, k_pos]
    csv, note = explorer.grid_csv(stack, pattern)  # every head, or the selected one of a large grid
    show(viz.heads_grid(stack, qt, kt, selected=(layer, head),
                        title=f"{site.label}: every layer × head (click a tile)"),
         "att_grid", data=viz.pattern_frame(csv, qt, kt), on_select="rerun", filename="attention-all-heads")
    st.caption(f"Selected (red outline): **layer {layer}, head {head}** — shown below." + note)
    heatmap("att_grid_head")


def lines() -> None:
    c1, c2, c3 = st.columns([2, 1, 1])
    q = query_picker("Query token", "lines_query", qt, -1, every=True, where=c1)
    st.session_state.setdefault("lines_orientation", "horizontal" if len(qt) > 40 else "vertical")
    orient = c2.radio("Layout", ["vertical", "horizontal"], key="lines_orientation")
    every = c3.toggle("Every head of the layer", key="lines_all_heads")
    stack = arrays[site.name(layer, "hook_pattern")][0]  # [head, q_pos, k_pos]
    show(viz.line_view(stack, qt, kt, selected=None if q < 0 else q,
                       heads=None if every else [head], orientation=orient,
                       title=f"{site.label} · layer {layer}" + ("" if every else f" · head {head}")),
         "att_lines", data=viz.pattern_frame(stack if every else pattern, qt, kt))


def step_through() -> None:
    q = query_picker("Query token", "att_query", qt,
                     inp.query if site.q_side == "tokens" else len(qt) - 1)
    s = explorer.step_inputs(arrays, site, layer, head, q)
    table, ok, check = explorer.step_table(s, kt, q)
    st.latex(explorer.step_formula(s))
    st.markdown(explorer.step_sentence(table, s, kt))
    if notes := explorer.step_notes(s, cfg, head):
        st.caption(notes)
    (st.success if ok else st.error)(check)
    show(viz.step_through_figure(s.q, s.K, s.V, kt, q, query_token=qt[q], bias_row=s.bias_row,
                                 mask_row=s.mask_row, title=f"Query '{qt[q]}' (pos {q}) step by step",
                                 subtitle=where),
         "att_step", data=table, filename=f"step-through-L{layer}-H{head}-q{q}")


def head_roles() -> None:
    try:
        df = cache.head_table(lm, site, inp.ids)
    except ValueError as e:
        return st.info(str(e))
    remember_table_heads("att", df)
    st.dataframe(df.round(3), key="att_table", on_select="rerun", selection_mode="single-row",
                 hide_index=True, width="stretch")
    st.caption("Pick a row to show that head. Scored on: " + explorer.scored_on(df))
    st.expander("What the labels mean").markdown(labels_markdown())
    st.markdown(explorer.role_line(df, layer, head))
    heatmap("att_table_head")


def probe() -> None:
    task = cache.task_of(lm)
    if why := explorer.probe_unavailable(lm.task_name, task):
        return st.info(why)
    sentences = explorer.probe_sentences(task, inp, "The input above")
    ids, tokens, meta, text = sentences[st.radio("Sentence", list(sentences), key="probe_source",
                                                 horizontal=True)]
    if text:
        st.markdown(f"> {text}")
    candidates, queries = explorer.probe_candidates(tokens, meta), explorer.probe_queries(tokens, meta)
    if not queries or not candidates:
        return st.info("This sentence needs an 'it'/'its' and candidate nouns (e.g. 'the law').")
    q = query_picker("Pronoun (query)", "probe_query", tokens, explorer.probe_default(queries, meta),
                     positions=queries, follows=tuple(ids))  # the chosen sentence's pronouns
    P = explorer.layer_stack(cache.record(lm, (tuple(ids),)), explorer.sites(cfg)[0])
    df = explorer.with_roles(pronoun_probe(P, q, candidates), cache.head_table(lm, explorer.sites(cfg)[0]))
    st.markdown("  \n".join(explorer.probe_lines(df, list(candidates), tokens[q])))
    show(viz.pronoun_probe(P[:, :, q], tokens, candidates, pronoun_index=q,
                           title=f"Where does '{tokens[q]}' (pos {q}) look, in every head?"),
         "att_probe", data=viz.pronoun_probe_frame(P[:, :, q], tokens, candidates))
    st.dataframe(df.round(3), hide_index=True)


tabs = st.tabs(TABS, key="att_tab", on_change="rerun")
for tab, render in zip(tabs, [lambda: heatmap("att_heatmap"), all_heads, lines, step_through,
                              head_roles, probe, lambda: effects.render(lm, inp, site, layer, head)]):
    if tab.open:
        with tab:
            render()
npz_download(arrays, "att_npz", filename="attention-recording.npz")
