"""Positional encodings: the sinusoidal table and its waves, a trained model's learned table, RoPE
rotating a real query, ALiBi and T5 biases (the schemes compared on longer inputs: compare.py)."""
import streamlit as st

import tfviz
from tfviz.analysis.positional import (bias_tables, demo_vector, recorded_qk, rope_setup,
                                       scheme_tables, sinusoidal_start, stack_tables,
                                       token_type_table)
from tfviz.analysis.rope import rope_caption, rope_score_grid
from tfviz.model import hook_name
from tfviz.model.positional import ROTARY_PAIRS, SCHEMES as POSITIONAL
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
lm = current_model(required=False)
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
    d0, n0 = sinusoidal_start(cfg)
    d = c1.slider("d_model", 8, 512, d0, step=8, key="pos_sin_d")
    n = c2.slider("positions", 8, 256, n0, key="pos_sin_n")
    table = scheme_tables("sinusoidal", d_model=d, n=n)["sinusoidal"].numpy()
    if uses:
        st.success(f"{name} adds exactly this table (its d_model is {cfg.d_model}).")
    st.latex(r"PE(p, 2i) = \sin\left(p / 10000^{2i/d}\right),\quad "
             r"PE(p, 2i{+}1) = \cos\left(p / 10000^{2i/d}\right)")
    show(pe_matrix(table, title=f"Sinusoidal table: {n} positions × d_model {d}"), key="pos_sin_matrix")
    dims = st.multiselect("Dimensions to plot", list(range(d)), default=default_dims(d), key="pos_sin_dims")
    show(pe_waves(table, dims, title="One wave per dimension: fast on the left, slow on the right"),
         key="pos_sin_waves")
    side_by_side((position_similarity(table), "pos_sin_sim"),
                 (similarity_vs_distance({"sinusoidal": table}), "pos_sin_dist"))


def learned() -> None:
    if not uses:
        return st.info(f"{name or 'No model'} has no learned position table (it uses "
                       f"{cfg.pos if cfg else 'nothing'}). Pick a model with learned positions in the sidebar.")
    table = stack_tables(tfviz.positional_tables(lm.model), stack)["learned"].numpy()
    if len(table) > LEARNED_SHOWN:  # GPT-2's 1,024 x 768: a grid no projector shows
        n = st.slider("positions shown", 16, len(table), LEARNED_SHOWN, step=16, key="pos_learned_n")
        st.caption(f"The first {n} of the table's {len(table):,} rows (the figures grow with the "
                   "square of the positions shown).")
        table = table[:n]
    sin = scheme_tables("sinusoidal", d_model=cfg.d_model + cfg.d_model % 2, n=table.shape[0])["sinusoidal"]
    show(pe_matrix(table, title=f"Learned position table of {name} ({stack or 'model'})"),
         key="pos_learned_matrix")
    side_by_side((position_similarity(table, title="Cosine similarity between learned positions"),
                  "pos_learned_sim"),
                 (similarity_vs_distance({"learned": table, "sinusoidal (same size)": sin.numpy()}),
                  "pos_learned_dist"))
    st.caption(f"A table has exactly {cfg.max_len} rows: a longer input has no vector, so learned "
               "positions cannot extrapolate.")
    types = token_type_table(lm.model)
    if types is not None:  # BERT: a segment vector is added too
        st.subheader("Token types (segments)")
        show(pe_matrix(types, title=f"Token-type table of {name}: {len(types)} rows × d_model {cfg.d_model}"),
             key="pos_token_types")
        st.caption("Besides its position vector, every token gets the vector of its segment: type 0 "
                   "for the first sentence (every input on these pages), type 1 for the second "
                   "sentence of a pair (BERT's next-sentence inputs: [CLS] A [SEP] B [SEP]).")


def rope() -> None:
    d_head, freqs = rope_setup(lm.model if lm is not None else None, stack)
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
        names = tuple(hook_name(layer, f"attn.hook_{x}", stack) for x in ("q", "k", "attn_scores"))
        q_vec, k_vec, model_score = recorded_qk(cache.record(lm, inp.key, names), layer, head, m, n, stack)
    else:
        q_vec, k_vec, n = demo_vector(d_head, 0), demo_vector(d_head, 1), 0
        st.info("DEMO vectors (random, fixed): " + ("type a text above to rotate a real query." if uses else
                "the selected model does not use RoPE. Pick a RoPE model in the sidebar for real ones."))
    label, f = "real q/k" if real else "DEMO vectors", float(freqs[pair])
    pairs = ROTARY_PAIRS[cfg.rope_pairs if uses else "interleaved"]  # which dims rotate together
    a, b = (int(d[pair]) for d in pairs.pair_dims(d_head))
    if uses:
        st.caption(f"{name} rotates {pairs.label}: pair {pair} is dimensions ({a}, {b}).")
    anim = cache.rope_rotation(q_vec, k_vec, pair, f, n_pos, n,
                               f"RoPE, {label}: pair {pair} (dims {a}, {b}), θ = {f:.4g}", dims=(a, b))
    grid = rope_score_grid(q_vec, k_vec, freqs, n_pos, pairs.name).numpy()
    if real:
        st.caption(rope_caption(name, layer, head, (tokens[m], m), (tokens[n], n), grid[m, n], model_score))
    side_by_side((anim, "pos_rope_anim"),
                 (cache.figure(rope_relative_scores, grid, title=f"q·k over (m, n), {label}"), "pos_rope_grid",
                  "The same q placed at every position m and k at every n: the score depends only on "
                  "m − n, so every diagonal is constant (q·k before the 1/√d_head)."))


def bias() -> None:
    n = st.slider("positions", 4, 64, 16, key="pos_bias_n")
    scheme = next(s for s, label in SCHEMES.items() if label == section)
    t = bias_tables(scheme, lm.model if lm is not None else None, n, stack)
    if not uses:
        st.info(f"Formula for {cfg.n_heads if cfg else 4} heads: {name or 'the selected model'} does not use {section} "
                "itself." + (" T5's bias values are learned, so only the buckets can be shown "
                             "without a T5 model." if section == "T5" else ""))
    if section == "ALiBi":
        show(alibi_bias(t["alibi_bias"].numpy(), t["alibi_slopes"].numpy()), key="pos_alibi")
        st.caption("Score bias −m·|i − j|: steep heads look nearby, gentle heads far away.")
    else:
        show(t5_buckets(t["t5_buckets"].numpy()), key="pos_t5_buckets")
        if uses:
            show(t5_bias(t["t5_bias"].numpy(), title=f"T5 learned bias of {name}"), key="pos_t5_bias")


{"Sinusoidal": sinusoidal, "Learned": learned, "RoPE": rope, "ALiBi": bias, "T5": bias}[section]()
st.page_link("app_pages/compare.py", icon="📏", label="Which scheme copes with inputs longer than "
             "training? Compare models trained with each scheme")
