"""Positional encodings: the sinusoidal table and its waves, a trained model's learned table, RoPE
rotating a real query, ALiBi and T5 biases, and the same task trained with each scheme compared
on inputs longer than training (extrapolation)."""
import contextlib
import math

import streamlit as st
import torch

import tfviz
from tfviz.analysis.positional import (comparable, demo_vector, extrapolation_table, scheme_tables,
                                       stack_tables, train_length)
from tfviz.analysis.rope import rope_freqs, rope_score_grid
from tfviz.model import hook_name
from tfviz.model.positional import SCHEMES as POSITIONAL
from tfviz.train.checkpoint import read_metadata
from tfviz.viz import (alibi_bias, default_dims, extrapolation_curves, pe_matrix, pe_waves,
                       position_similarity, rope_frequencies, rope_relative_scores,
                       rope_rotation_animation, similarity_vs_distance, t5_bias, t5_buckets)
from ui.figures import show
from ui.models import available_models, current_model, load_model

SCHEMES = {name: POSITIONAL[name].label for name in ("sinusoidal", "learned", "rope", "alibi", "t5")}
SECTIONS = [*SCHEMES.values(), "Compare schemes"]


@st.cache_data(max_entries=32, show_spinner=False)
def _rotation(q_pair: tuple, freq: float, n_pos: int, k_pair: tuple, n: int, pair: int, title: str):
    """The RoPE animation (48 frames take a while to build: cached per input)."""
    return rope_rotation_animation(q_pair, freq, range(n_pos), k=k_pair, k_position=n,
                                   pair_index=pair, title=title)


def _probe_text(lm) -> str:
    try:
        task = lm.ckpt.shared_task()
        return task.probe().text or ""
    except Exception:  # a checkpoint without (or with an unbuildable) task: no default text
        return ""


st.title("Positional encodings")
st.caption("Attention alone ignores order. Each scheme below tells the model where a token is — "
           "every table and score here is computed by tfviz's own positional code or recorded "
           "from the selected model.")
lm = current_model(required=False)
cfg = lm.config if lm is not None else None
index = SECTIONS.index(SCHEMES.get(cfg.pos if cfg else "", "Sinusoidal"))
section = st.radio("Scheme", SECTIONS, index=index, horizontal=True, key="pos_section")
stack = ""
if cfg is not None and cfg.arch == "encoder-decoder" and section != "Compare schemes":
    stack = st.radio("Stack", ["encoder", "decoder"], horizontal=True, key="pos_stack")
uses = cfg is not None and SCHEMES.get(cfg.pos) == section
name = lm.ref.label if lm is not None else ""


def model_tables(n: int | None = None) -> dict:
    return stack_tables(tfviz.positional_tables(lm.model, n), stack)


if section == "Sinusoidal":
    c1, c2 = st.columns(2)
    d0 = cfg.d_model if cfg is not None and cfg.d_model % 2 == 0 else 64
    d = c1.slider("d_model", 8, 512, min(512, max(8, d0 - d0 % 8)), step=8, key="pos_sin_d")
    n = c2.slider("positions", 8, 256, min(256, max(8, cfg.max_len if cfg else 128)),
                  key="pos_sin_n")
    table = scheme_tables("sinusoidal", d_model=d, n=n)["sinusoidal"].numpy()
    if uses:
        st.success(f"{name} adds exactly this table (its d_model is {cfg.d_model}).")
    st.latex(r"PE(p, 2i) = \sin\left(p / 10000^{2i/d}\right),\quad "
             r"PE(p, 2i{+}1) = \cos\left(p / 10000^{2i/d}\right)")
    show(pe_matrix(table, title=f"Sinusoidal table: {n} positions × d_model {d}"),
         key="pos_sin_matrix")
    dims = st.multiselect("Dimensions to plot", list(range(d)), default=default_dims(d),
                          key="pos_sin_dims")
    show(pe_waves(table, dims, title="One wave per dimension: fast on the left, slow on the right"),
         key="pos_sin_waves")
    left, right = st.columns(2)
    with left:
        show(position_similarity(table), key="pos_sin_sim")
    with right:
        show(similarity_vs_distance({"sinusoidal": table}), key="pos_sin_dist")

elif section == "Learned":
    if not uses:
        st.info(f"{name or 'No model'} has no learned position table (it uses "
                f"{cfg.pos if cfg else 'nothing'}). Pick a model with learned positions in the "
                "sidebar.")
    else:
        table = model_tables()["learned"].numpy()
        sin = scheme_tables("sinusoidal", d_model=cfg.d_model + cfg.d_model % 2,
                            n=table.shape[0])["sinusoidal"].numpy()
        show(pe_matrix(table, title=f"Learned position table of {name} ({stack or 'model'})"),
             key="pos_learned_matrix")
        left, right = st.columns(2)
        with left:
            show(position_similarity(table, title="Cosine similarity between learned positions"),
                 key="pos_learned_sim")
        with right:
            show(similarity_vs_distance({"learned": table, "sinusoidal (same size)": sin}),
                 key="pos_learned_dist")
        st.caption(f"A table has exactly {cfg.max_len} rows: a longer input has no vector, so "
                   "learned positions cannot extrapolate.")

elif section == "RoPE":
    d_head = cfg.d_head if cfg is not None and cfg.d_head % 2 == 0 else 16
    freqs = model_tables(1)["rope_freqs"].double() if uses else rope_freqs(d_head)
    show(rope_frequencies(freqs.numpy(), context_length=cfg.max_len if cfg else None),
         key="pos_rope_freqs")
    c = st.columns(3)
    n_pos = c[0].slider("positions shown", 8, 128, 48, key="pos_rope_n")
    pair = min(d_head // 2 - 1, c[1].slider("dimension pair i", 0, max(1, d_head // 2 - 1), 0,
                                             key="pos_rope_pair"))
    q_vec = k_vec = None
    if uses:
        text = st.text_input("Text the model reads (q and k are recorded from it)",
                             _probe_text(lm), key="pos_rope_text")
        tok = lm.tokenizer
        ids = tok.encode(text).ids[:n_pos - 1] if tok is not None else []
        layer = c[2].selectbox("layer", range(cfg.n_layers), key="pos_rope_layer")
        c = st.columns(3)
        head = c[0].selectbox("head", range(cfg.n_heads), key="pos_rope_head")
        toks = torch.tensor([[tok.bos_id] * cfg.causal + ids if tok else []], dtype=torch.long)
        T = toks.shape[1]
        if T < 2:
            st.warning("The text has too few tokens: type something to record a real query.")
        else:
            m = c[1].slider("query pos m", 0, T - 1, T - 1, key="pos_rope_m")
            n = c[2].slider("key pos n", 0, T - 1, 0, key="pos_rope_kpos")
            names = [hook_name(layer, f"attn.hook_{x}", stack) for x in ("q", "k", "attn_scores")]
            bos = torch.tensor([[tok.bos_id]])
            inputs = {"encoder": (toks, bos), "decoder": (toks, toks)}.get(stack, (toks,))
            try:
                rec = lm.record(*inputs, names=names)
            except ValueError as e:
                st.error(str(e))
                st.stop()
            kv = head // (cfg.n_heads // cfg.n_kv_heads)
            q_vec, k_vec = rec[names[0]][0, m, head].double(), rec[names[1]][0, n, kv].double()
            model_score = float(rec[names[2]][0, head, m, n]) * math.sqrt(cfg.d_head)
            tokens = tok.tokens_of(toks[0].tolist())
    real = q_vec is not None
    if not uses:
        st.info("DEMO vectors (random, fixed): the selected model does not use RoPE, so there is "
                "no real query to rotate. Pick a RoPE model in the sidebar for real ones.")
    if not real:
        q_vec, k_vec, n = demo_vector(d_head, 0), demo_vector(d_head, 1), 0
    label = "real q/k" if real else "DEMO vectors"
    f = float(freqs[pair])
    anim = _rotation(tuple(q_vec[2 * pair:2 * pair + 2].tolist()), f, n_pos,
                     tuple(k_vec[2 * pair:2 * pair + 2].tolist()), n, pair,
                     f"RoPE, {label}: pair {pair}, θ = {f:.4g}")
    grid = rope_score_grid(q_vec, k_vec, freqs, n_pos).numpy()
    if real:
        st.caption(f"Real vectors from {name}, layer {layer}, head {head}, before rotation "
                   f"(hook_q, hook_k): q of {tokens[m]!r} (m={m}), k of {tokens[n]!r} (n={n}). "
                   f"Rotated to those positions their q·k is {grid[m, n]:.4f}; the model's own "
                   f"recorded score × √d_head is {model_score:.4f}"
                   + (" (masked there: a decoder query never sees a later key)."
                      if math.isinf(model_score) else "."))
    left, right = st.columns(2)
    with left:
        show(anim, key="pos_rope_anim")
    with right:
        show(rope_relative_scores(grid, title=f"q·k over (m, n), {label}"), key="pos_rope_grid")
        st.caption("The same q placed at every position m and k at every n: the score depends "
                   "only on m − n, so every diagonal is constant (q·k before the 1/√d_head).")

elif section in ("ALiBi", "T5"):
    n = st.slider("positions", 4, 64, 16, key="pos_bias_n")
    causal = cfg.causal and stack != "encoder" if cfg else True
    heads = cfg.n_heads if cfg else 4
    scheme = next(name for name, label in SCHEMES.items() if label == section)
    t = model_tables(n) if uses else scheme_tables(scheme, n_heads=heads, n=n, causal=causal)
    if not uses:
        st.info(f"Formula for {heads} heads: {name or 'the selected model'} does not use "
                f"{section} itself." + (" T5's bias values are learned, so only the buckets can "
                                        "be shown without a T5 model." if section == "T5" else ""))
    if section == "ALiBi":
        show(alibi_bias(t["alibi_bias"].numpy(), t["alibi_slopes"].numpy()), key="pos_alibi")
        st.caption("Score bias −m·|i − j|: steep heads look nearby, gentle heads far away.")
    else:
        show(t5_buckets(t["t5_buckets"].numpy()), key="pos_t5_buckets")
        if uses:
            show(t5_bias(t["t5_bias"].numpy(), title=f"T5 learned bias of {name}"),
                 key="pos_t5_bias")

else:  # Compare schemes
    refs = {r.path: r for r in available_models()}
    cards = {}
    for path in refs:
        with contextlib.suppress(ValueError):
            cards[path] = read_metadata(path)
    options, family = comparable(cards, lm.ref.path if lm is not None else None)
    if not family:
        st.info("No checkpoints marked as the positional family yet (the shipped model zoo adds "
                "one model per scheme on one task). Meanwhile, compare any decoder or encoder "
                "checkpoints trained on the same task as the selected model.")
    if not options:
        st.warning("Nothing to compare: select a decoder or encoder model in the sidebar (and "
                   "train its task with other schemes on the Train page).")
        st.stop()
    labels = {p: f"{refs[p].label} · {cards[p]['model_config'].get('pos')}" for p in options}
    chosen = st.multiselect("Models", options, default=options[:6], format_func=labels.get,
                            key="pos_cmp_models")
    factor = st.select_slider("Longest length (× training length)", [1, 2, 4, 8], 4,
                              key="pos_cmp_max")
    want = (tuple(chosen), factor)
    if chosen and st.button("Evaluate", key="pos_cmp_run", type="primary"):
        loaded = [load_model(refs[p]) for p in chosen]
        with st.spinner("Evaluating each model at each length…"), contextlib.ExitStack() as locks:
            for m in sorted(loaded, key=lambda m: m.ref.path):
                locks.enter_context(m.lock)  # the models are shared with other sessions
            L = train_length(loaded[0].ckpt.shared_task())
            lengths = sorted({max(4, L // 2)} | {f * L for f in (1, 2, 4, 8) if f <= factor})
            try:
                df = extrapolation_table([(labels[m.ref.path], m.ckpt) for m in loaded], lengths)
            except ValueError as e:
                st.error(str(e))
                st.stop()
        st.session_state["pos_cmp_result"] = (want, df, L)
    result = st.session_state.get("pos_cmp_result")
    if result is not None and result[0] == want:
        _, df, L = result
        show(extrapolation_curves(df, L, scheme="model"), key="pos_cmp_chart", data=df)
        for model in df.loc[df["note"] != "", "model"].unique():
            st.warning(f"{model}: " + df.loc[df["model"] == model, "note"].iloc[-1])
        st.dataframe(df, key="pos_cmp_table", hide_index=True)
    elif chosen:
        st.caption("Press **Evaluate**: each model's loss on its task, with examples packed into "
                   "sequences of each length (the dashed line marks the training length).")
