"""Compare schemes: the same task trained with each positional scheme, each model's loss on its
task at lengths up to 8× its training length (Press et al.'s "train short, test long"), evaluated
once per server for each choice (ui.cache.extrapolation)."""
import streamlit as st

from tfviz.analysis.positional import comparable, compare_lengths, train_length
from tfviz.viz import extrapolation_curves
from ui import cache
from ui.figures import show
from ui.models import available_models, load_model
from ui.picker import current_model

st.title("Compare schemes")
st.caption("Which positional scheme copes with inputs longer than any seen in training? Models "
           "trained on the same task with different schemes, evaluated at growing lengths.")
lm = current_model(required=False)
refs = {r.path: r for r in available_models()}
cards = {p: c for p in refs if (c := cache.card(p)) is not None}
options, family = comparable(cards, lm.ref.path if lm is not None else None)
if not family:
    st.info("No checkpoints marked as the positional family yet (the shipped model zoo adds "
            "one model per scheme on one task). Meanwhile, compare any decoder or encoder "
            "checkpoints trained on the same task as the selected model.")
if not options and lm is not None and lm.task_name is None:
    st.info(f"**{lm.ref.label}** has no task (it was imported, not trained here), so there is no "
            "task to evaluate it on at growing lengths. This page compares models trained on one "
            "task with different positional schemes: pick one of those, or train them on the "
            "Train page.")
    st.stop()
if not options:
    st.warning("Nothing to compare: select a decoder or encoder model in the sidebar (and "
               "train its task with other schemes on the Train page).")
    st.stop()
labels = {p: f"{refs[p].label} · {cards[p]['model_config'].get('pos')}" for p in options}
chosen = st.multiselect("Models", options, default=options[:6], format_func=labels.get,
                        key="pos_cmp_models")
factor = st.select_slider("Longest length (× training length)", [1, 2, 4, 8], 4, key="pos_cmp_max")
if chosen and st.button("Evaluate", key="pos_cmp_run", type="primary"):
    st.session_state["pos_cmp_asked"] = (tuple(chosen), factor)  # the result: cached, shared
if chosen and st.session_state.get("pos_cmp_asked") == (tuple(chosen), factor):
    loaded = {labels[p]: load_model(refs[p]) for p in chosen}
    L = train_length(cache.task_of(next(iter(loaded.values()))))
    try:
        df = cache.extrapolation(loaded, compare_lengths(L, factor))
    except ValueError as e:
        st.error(str(e))
        st.stop()
    show(extrapolation_curves(df, L, scheme="model"), key="pos_cmp_chart", data=df)
    for model in df.loc[df["note"] != "", "model"].unique():
        st.warning(f"{model}: " + df.loc[df["model"] == model, "note"].iloc[-1])
    st.dataframe(df, key="pos_cmp_table", hide_index=True)
elif chosen:
    st.caption("Press **Evaluate**: each model's loss on its task, with examples packed into "
               "sequences of each length (the dashed line marks the training length).")
