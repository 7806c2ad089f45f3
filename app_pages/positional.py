"""Positional encodings: the sinusoidal table and its waves, a trained model's learned table, RoPE
rotating a real query, ALiBi and T5 biases (the schemes compared on longer inputs: compare.py)."""
import streamlit as st

import tfviz
from tfviz.analysis import positional as ap
from tfviz.analysis.rope import GRID_NOTE, rope_caption, rope_score_grid
from tfviz.model.positional import SCHEMES as POSITIONAL
from tfviz.viz import (alibi_bias, default_dims, pe_matrix, pe_waves,
                       position_similarity, rope_frequencies, rope_relative_scores,
                       similarity_vs_distance, t5_bias, t5_buckets)
from ui import cache
from ui.figures import show, side_by_side
from ui.inputs import model_input
from ui.picker import current_model
from ui.widgets import forget_on_model_change, layer_head, position_slider

SCHEMES = {name: POSITIONAL[name].label for name in ("sinusoidal", "learned", "rope", "alibi", "t5")}
SECTIONS = list(SCHEMES.values())
LEARNED_SHOWN = 256  # rows of a learned table shown at first

st.title("Positional encodings")
st.caption("Attention alone ignores order. Each scheme below tells the model where a token is — "
           "every table and score here is computed by tfviz's own positional code or recorded "
           "from the selected model.")
lm = current_model(required=False, needs="positions")
cfg = lm.config if lm is not None else None
if lm is not None:  # another model opens on its own scheme
    forget_on_model_change(lm, "pos", ("pos_section", "pos_stack", "pos_rope_layer", "pos_rope_head"))
index = SECTIONS.index(SCHEMES.get(cfg.pos if cfg else "", "Sinusoidal"))
section = st.radio("Scheme", SECTIONS, index=index, horizontal=True, key="pos_section")
stack = st.radio("Stack", ["encoder", "decoder"], horizontal=True, key="pos_stack") \
    if cfg is not None and cfg.arch == "encoder-decoder" else ""
uses = cfg is not None and SCHEMES.get(cfg.pos) == section
name = lm.ref.label if lm is not None else ""


def sinusoidal() -> None:
    c1, c2 = st.columns(2)
    d0, n0 = ap.sinusoidal_start(cfg)
    d = c1.slider("d_model", 8, 512, d0, step=8, key="pos_sin_d")
    n = c2.slider("positions", 8, 256, n0, key="pos_sin_n")
    table = ap.scheme_tables("sinusoidal", d_model=d, n=n)["sinusoidal"].numpy()
    if uses:
        st.success(f"{name} adds exactly this table (its d_model is {cfg.d_model}).")
    st.latex(ap.SINUSOIDAL_LATEX)
    show(cache.figure(pe_matrix, table, title=f"Sinusoidal table: {n} positions × d_model {d}"),
         key="pos_sin_matrix")
    dims = st.multiselect("Dimensions to plot", list(range(d)), default=default_dims(d), key="pos_sin_dims")
    show(cache.figure(pe_waves, table, dims,
                      title="One wave per dimension: fast on the left, slow on the right"),
         key="pos_sin_waves")
    side_by_side((cache.figure(position_similarity, table), "pos_sin_sim"),
                 (cache.figure(similarity_vs_distance, {"sinusoidal": table}), "pos_sin_dist"))


def learned() -> None:
    if not uses:
        return st.info(ap.no_learned_note(name, cfg.pos if cfg else None))
    table = ap.stack_tables(tfviz.positional_tables(lm.model), stack)["learned"].numpy()
    if len(table) > LEARNED_SHOWN:  # GPT-2's 1,024 x 768: a grid no projector shows
        n = st.slider("positions shown", 16, len(table), LEARNED_SHOWN, step=16, key="pos_learned_n")
        st.caption(ap.rows_shown_note(n, len(table)))
        table = table[:n]
    show(cache.figure(pe_matrix, table, title=f"Learned position table of {name} ({stack or 'model'})"),
         key="pos_learned_matrix")
    side_by_side((cache.figure(position_similarity, table,
                               title="Cosine similarity between learned positions"),
                  "pos_learned_sim"),
                 (cache.figure(similarity_vs_distance,
                               {"learned": table, "sinusoidal (same size)": ap.sinusoidal_like(table)}),
                  "pos_learned_dist"))
    st.caption(ap.learned_limit_note(cfg.max_len))
    types = ap.token_type_table(lm.model)
    if types is not None:  # BERT: a segment vector is added too
        st.subheader("Token types (segments)")
        show(cache.figure(pe_matrix, types,
                          title=f"Token-type table of {name}: {len(types)} rows × d_model {cfg.d_model}"),
             key="pos_token_types")
        st.caption(ap.TOKEN_TYPES_NOTE)


def rope() -> None:
    d_head, freqs = ap.rope_setup(lm.model if lm is not None else None, stack)
    show(cache.figure(rope_frequencies, freqs.numpy(), context_length=cfg.max_len if cfg else None),
         key="pos_rope_freqs")
    c = st.columns(3)
    n_pos = c[0].slider("positions shown", 8, 128, 48, key="pos_rope_n")
    pair = min(d_head // 2 - 1, c[1].slider("dimension pair i", 0, max(1, d_head // 2 - 1), 0, key="pos_rope_pair"))
    inp = model_input(lm, "pos_rope", examples=False, cap=n_pos, label="Text the model reads (q and k "
                      "are recorded from it)") if uses and lm.tokenizer is not None else None
    real = inp is not None
    if real:
        tokens = inp.src_tokens if stack == "encoder" else inp.tokens
        layer, head = layer_head(cfg, "pos_rope", [c[2], st.columns(3)[0]])
        c = st.columns(2)
        m = position_slider(c[0], "query pos m", 0, len(tokens) - 1, len(tokens) - 1, "pos_rope_m")
        n = position_slider(c[1], "key pos n", 0, len(tokens) - 1, 0, "pos_rope_kpos")
        arrays = cache.record(lm, inp.key, ap.qk_names(layer, stack))
        q_vec, k_vec, model_score = ap.recorded_qk(arrays, layer, head, m, n, stack)
    else:
        (q_vec, k_vec), n = ap.demo_qk(d_head), 0
        st.info(ap.demo_note(uses))
    label = "real q/k" if real else "DEMO vectors"
    rp = ap.rope_pair(cfg.rope_pairs if uses else "interleaved", d_head, pair, freqs)  # rotated together
    if uses:
        st.caption(rp.caption(name))
    grid = rope_score_grid(q_vec, k_vec, freqs, n_pos, rp.pairs.name).numpy()
    anim = cache.rope_rotation(q_vec, k_vec, pair, rp.theta, n_pos, n, rp.title(label), dims=(rp.a, rp.b),
                               start=m if real else None, totals=grid[:, n])  # one m, one q·k
    if real:
        st.caption(rope_caption(name, layer, head, (tokens[m], m), (tokens[n], n), grid[m, n], model_score))
    side_by_side((anim, "pos_rope_anim"),
                 (cache.figure(rope_relative_scores, grid, title=f"q·k over (m, n), {label}"), "pos_rope_grid",
                  GRID_NOTE))


def bias() -> None:
    n = st.slider("positions", 4, 64, 16, key="pos_bias_n")
    scheme = next(s for s, label in SCHEMES.items() if label == section)
    t = ap.bias_tables(scheme, lm.model if lm is not None else None, n, stack)
    if not uses:
        st.info(ap.formula_note(section, cfg.n_heads if cfg else 4, name))
    if section == "ALiBi":
        show(cache.figure(alibi_bias, t["alibi_bias"].numpy(), t["alibi_slopes"].numpy()), key="pos_alibi")
        st.caption("Score bias −m·|i − j|: steep heads look nearby, gentle heads far away.")
    else:
        show(cache.figure(t5_buckets, t["t5_buckets"].numpy()), key="pos_t5_buckets")
        if uses:
            show(cache.figure(t5_bias, t["t5_bias"].numpy(), title=f"T5 learned bias of {name}"),
                 key="pos_t5_bias")


{"Sinusoidal": sinusoidal, "Learned": learned, "RoPE": rope, "ALiBi": bias, "T5": bias}[section]()
st.page_link("app_pages/compare.py", icon="📏", label="Which scheme copes with inputs longer than "
             "training? Compare models trained with each scheme")
