"""Findings: the famous effects, measured on the shipped zoo models (`python -m tfviz.zoo build`).

Numbers marked "card" were measured when the zoo was built; "live" ones are recomputed here from
the checkpoints. Shared models are read under their lock.
"""
import streamlit as st

from tfviz.analysis import explorer
from tfviz.paths import zoo_dir
from tfviz.viz import (compare_curves, cross_attention_alignment, extrapolation_curves, head_score_bars,
                       layer_grad_norm_bars, paired_bars, pronoun_probe, pronoun_probe_frame,
                       repeat_by_position)
from tfviz.zoo import findings as zf
from tfviz.zoo.measure import POS_TOKENS, pos_lengths
from ui import cache, effects, phase
from ui.figures import show, side_by_side
from ui.models import zoo_model
from ui.widgets import metric_row, or_stop

SECTIONS = {"The \"it\" heads": "coref", "“It”: pattern or choice?": "agreement",  # -> the seed of the claim
            "Induction heads": "induction",
            "Positional extrapolation": "positional", "Cross-attention": "translate",
            "Compare: one setting apart": "norm", "All models": "cost",
            "The phase change": "phase"}  # issue 33: when induction heads form (Olsson et al.)


st.title("Findings")
st.caption("Each result below was measured on models tfviz trained itself (`python -m tfviz.zoo "
           "build`, CPU, fixed seeds). **card** = measured at build time; **live** = recomputed "
           "now from the same checkpoint.")
folder = zoo_dir()
cards = cache.zoo_cards(folder)
if not cards:
    st.warning(f"No zoo models in {folder}. Build them with `python -m tfviz.zoo build` "
               "(about 15 minutes on a laptop CPU).")
    st.stop()
section = st.radio("Finding", list(SECTIONS), horizontal=True, key="finding")
first, choice, induction, positional, cross, pairs, everything, phase_change = SECTIONS

if section == first and (m := zoo_model("coref")):
    c1, c2 = st.columns(2)
    sentence = c1.radio("Mission sentence", list(zf.MISSION_SENTENCES), horizontal=True, key="find_sentence",
                        format_func=zf.MISSION_SENTENCES.get)
    position = c2.radio("Pronoun", list(zf.PRONOUN_AT), horizontal=True, key="find_position",
                        format_func=zf.PRONOUN_AT.get)
    d = cache.mission_weights(m, sentence, position)
    live = zf.strongest_heads(d)
    show(cache.figure(pronoun_probe, d["weights"], d["tokens"], d["candidates"], pronoun_index=d["q_pos"],
                      title=f"Where does '{d['tokens'][d['q_pos']]}' look? (live)"),
         key="find_coref_probe", data=pronoun_probe_frame(d["weights"], d["tokens"], d["candidates"]))
    claim = zf.coref_claim(cards["coref"])
    metric_row(*zf.coref_metrics(claim, live))
    roles = cache.head_table(m, explorer.sites(m.config)[0])  # the explorer's table
    st.markdown(zf.mission_paragraph(claim, d, live, roles, sentence, position))  # the chosen sentence
    st.markdown(zf.coref_roles(roles, live))
    effects.findings_coref(m)  # does the head the pattern shows matter? heads switched off
    effects.findings_coref_sentence(m, sentence)  # ... and on the chosen sentence

elif section == choice and (m := zoo_model("coref")) and (a := zoo_model("agreement")):
    effects.findings_contrast(m, a)  # both pronoun models, one head off each
    st.divider()
    sentence = st.radio("Mission sentence, new form", [1, 2], horizontal=True, key="find_agree_sentence_pick",
                        format_func=lambda i: cache.task_of(a).mission_sentences()[i - 1].text)
    effects.findings_agreement(a, sentence)

elif section == induction and (m2 := zoo_model("induction-2L")) and (m1 := zoo_model("induction-1L")):
    contrast = zf.induction_contrast(cards["induction-2L"], cards["induction-1L"])
    two, c1, c2 = contrast["2L"], *st.columns(2)
    condition = c1.selectbox("Fresh sequences", zf.condition_choices(m2.config.max_len), key="find_ind_cond")
    value = c2.radio("Show", list(zf.REPEAT_VALUES), horizontal=True, key="find_ind_value",
                     format_func=zf.REPEAT_VALUES.get)
    curves = cache.repeat_curves({"2 layers": m2, "1 layer": m1}, cache.task_of(m2).tokenizer.vocab_size,
                                 m2.config.max_len, condition)
    show(cache.figure(repeat_by_position, curves, train_length=two["train_length"], chance=two["chance"],
                      value=value, title=f"Repeated tokens by position: {condition} (live)"),
         key="find_ind_curve", data=curves)
    st.caption(zf.repeat_curves_note(m2.config.max_len, two["train_length"]))
    metric_row(*zf.induction_metrics(contrast))
    st.dataframe(zf.heldout_frame(cards["induction-2L"], cards["induction-1L"]).round(3),
                 hide_index=True, key="find_ind_heldout")
    st.markdown(zf.induction_sentence(contrast))
    effects.findings_floor(m2, m1)  # repeats inside r: the loss beside the copier's floor
    score = st.radio("Score", ["induction", "prev_token"], horizontal=True, key="find_ind_score")
    df = cache.induction_frame({"2 layers": m2, "1 layer": m1})
    show(cache.figure(head_score_bars, df, score, threshold=0.4, title=f"{score} score per head (live)"),
         key="find_ind_bars", data=df)
    effects.findings_induction(m2, m1)

elif section == positional:
    df = or_stop(lambda: zf.extrapolation_frame(cards, required=True), show=st.warning)
    L = zf.train_length(cards)
    where = "card"
    if st.button("Re-measure live", key="find_pos_live"):
        models = {n: x for n in df["model"].unique() if (x := zoo_model(n))}
        df, where = cache.extrapolation(models, pos_lengths(L), POS_TOKENS), "live"
    show(cache.figure(extrapolation_curves, df, L, title=f"Loss vs evaluation length ({where})"),
         key="find_pos_curves", data=df)
    order = zf.positional_ordering(df, L)
    st.dataframe(order.round(3), hide_index=True, key="find_pos_table")
    st.markdown(zf.positional_sentence(order, L))

elif section == cross and (m := zoo_model("translate")):
    best = cards["translate"]["finding"]["best_head"]
    c1, c2, c3 = st.columns(3)
    task = m.ckpt.shared_task()
    index = c1.number_input("Test sentence", 0, len(task.examples("test")) - 1, 0, key="find_tr_index")
    layer = c2.selectbox("Layer", range(m.config.n_layers), index=best["layer"], key="find_tr_layer")
    head = c3.selectbox("Head", [-1, *range(m.config.n_heads)], index=1 + best["head"], key="find_tr_head",
                        format_func=lambda h: "mean of heads" if h < 0 else f"head {h}")
    d = cache.translate_example(m, int(index), layer, None if head < 0 else head)
    show(cache.figure(cross_attention_alignment, d["pattern"], d["src_tokens"], d["tgt_tokens"], d["alignment"],
                      title=f"“{d['text']}” → “{d['target']}” (live)"),
         key="find_tr_heatmap")
    st.markdown(zf.translate_sentence(cards["translate"]))

elif section == pairs:
    if all(n in cards for n in zf.NORM_PAIR):
        st.markdown(zf.NORM_PAIR_INTRO)
        contrast = zf.norm_contrast(*(cards[n] for n in zf.NORM_PAIR))
        metric_row(*zf.norm_metrics(contrast))
        curves, bars = zf.norm_frames(cards)
        side_by_side((cache.figure(compare_curves, curves, title="Training loss (card)"), "find_norm_curves", None, curves),
                     (cache.figure(layer_grad_norm_bars, bars, title="Gradient norm per block, early steps (card)"),
                      "find_norm_grads", None, bars))
        st.markdown(zf.norm_sentence(contrast))
    st.markdown(zf.PAIRS_INTRO)
    st.dataframe(zf.compare_frame(cards), hide_index=True, key="find_compare")
    st.page_link("app_pages/compare.py", label="Compare models side by side", icon="📏")

elif section == phase_change and (p2 := zoo_model(phase.ZOO["2 layers"])) \
        and (p1 := zoo_model(phase.ZOO["1 layer"])):
    phase.findings_section({"2 layers": p2, "1 layer": p1})

elif section == everything:
    summary = zf.summary_frame(cards)
    st.dataframe(summary, hide_index=True, height=36 * (len(summary) + 1), key="find_summary")
    lm = zf.lm_family_frame(cards)
    if len(lm):
        show(cache.figure(paired_bars, lm["model"], lm["kv_bytes_per_token"], lm["val_loss"],
                         left_name="KV cache bytes / token", right_name="validation loss",
                         title="MHA vs GQA vs MQA (card)"), key="find_lm_bars", data=lm)
    st.page_link("app_pages/cost.py", label="Time and memory vs sequence length (O(n²) vs a sliding "
                 "window) are measured on the Cost page", icon="⏱️")
st.caption(f"Seed: {zf.SEEDS[SECTIONS[section]]}")
