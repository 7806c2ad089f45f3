"""Why attention: what came before it, each step measured on models trained here (issue 14) —
one-hot vs learned word vectors, a bag of words and word order, an RNN reading in order (its
bottleneck and vanishing gradient), an encoder–decoder with and without additive attention, and
attention's direct paths across layers. Sentences: ``tfviz.zoo.why_story``; shared work: ``ui.why``."""
import streamlit as st

from tfviz.analysis.order import bag_of_words, explain
from tfviz.analysis.word2vec import GROUPS
from tfviz.analysis.word2vec import MAX_CHARS as W2V_MAX_CHARS
from tfviz.viz import across_layers_grid, bag_of_words_bars, cross_attention_alignment, order_bars, order_positions
from tfviz.viz.longrange import (accuracy_vs_distance, accuracy_vs_length, gradient_through_time,
                                 gradient_vs_distance, path_length_curves)
from tfviz.zoo import why_story as story
from ui import cache, why
from ui.figures import show
from ui.inputs import max_chars
from ui.models import zoo_model

st.title("Why attention")
st.caption("Attention answers problems older models had. Each step below is measured on a model "
           "trained here — word2vec on this page, the rest shipped checkpoints — on fresh inputs.")


st.header("1. Words as vectors: one-hot vs learned")
builtin = st.radio("word2vec learns from", ["the built-in corpus", "your text"], horizontal=True,
                   key="why_corpus") == "the built-in corpus"
text = None if builtin else st.text_area("Your text (a few hundred sentences work best)", key="why_text",
                                         max_chars=W2V_MAX_CHARS)
w2v = why.word2vec_trained(text)
if w2v is None and st.button("Train word2vec (skip-gram, negative sampling; seconds, once for "
                             "everyone)", key="why_w2v_train"):
    try:
        w2v = why.word2vec(text)
        st.rerun()  # drawn by the next run, without the button
    except ValueError as e:
        st.error(f"word2vec cannot learn from this text: {e}.")
if w2v is not None:
    words = [w for w in GROUPS if w in w2v.index] if builtin else w2v.words[:60]
    defaults = ("king", "man", "woman") if builtin else tuple(words[:3])
    abc = tuple(c.text_input(f"analogy: {x}", d, key=f"why_abc_{x}_{'corpus' if builtin else 'text'}").strip().lower()
                for c, x, d in zip(st.columns(3), "abc", defaults))
    st.caption(f"word2vec: {len(w2v.words)} words, {w2v.config.dim} numbers each, loss "
               f"{w2v.losses[0]:.3f} → {w2v.losses[-1]:.3f} over {len(w2v.losses)} epochs.")
    why.vectors_view(w2v.vectors, w2v.words, "why_w2v", [w2v.index[w] for w in words],
                 [GROUPS.get(w, "word") for w in words], "dog" if builtin else words[0],
                 abc if len(abc) == 3 and all(abc) else None, "queen" if builtin and abc == defaults else None,
                 source=why.word2vec_source(text, w2v))
if (lm := zoo_model("lm")) is not None:
    st.subheader("The same views of a transformer's input embeddings (shipped lm)")
    vectors, labels = why.embeddings(lm)
    why.vectors_view(vectors, labels, "why_lm", word="dog" if "dog" in labels else labels[0], source=lm.key)

st.header("2. Word order: a bag of words loses it")
c1, c2 = st.columns(2)
a = c1.text_input("sentence A", "the dog chases the cat", key="why_order_a", max_chars=max_chars())
b = c2.text_input("sentence B (the same words, rearranged)", "the cat chases the dog", key="why_order_b",
                  max_chars=max_chars())
vocab, counts = bag_of_words([a.split(), b.split()])
show(cache.figure_for((a, b), bag_of_words_bars, vocab, counts, [a, b]), key="why_bow")
st.markdown(f"Bag-of-words vectors identical: **{bool((counts[0] == counts[1]).all())}**.")
tables, diffs, names = {}, {}, {"pos-none": "no positions", "pos-learned": "learned positions"}
order_key = [a, b]  # what the order figures show: the two sentences and each model read
for name, label in names.items():
    if (m := zoo_model(name)) is not None:
        try:
            tables[label], diffs[label], toks = why.order(m, a, b)
            order_key.append((label, m.key))
        except ValueError as e:
            st.error(f"{name}: {e}.")
            continue
        st.caption(f"{label}: {explain(tables[label])}")
        if label == "no positions":
            show(cache.figure_for((m.key, a, b), order_positions, diffs[label], toks,
                                  list(tables[label]["stage"]), forced_equal=tables[label].attrs["forced_equal"]),
                 key="why_order_pos")
if tables:
    show(cache.figure_for(tuple(order_key), order_bars, tables), key="why_order_bars")
    st.markdown(story.order_text(tables, diffs))

st.header("3. Reading in order: an RNN's bottleneck and vanishing gradient")
results, results_key = why.results(), why.results_key()
if not results:
    st.warning("The why experiments are not built here: run `python -m tfviz.zoo why`.")
if (r := results.get("recall")) is not None:
    show(cache.figure_for(results_key, accuracy_vs_distance, r["accuracy"]), "why_recall_acc")  # full
    if "through_time" in r:  # the vanishing gradient before and after training (issue 42)
        show(cache.figure_for((results_key, "through_time"), gradient_through_time, r["through_time"]),
             "why_recall_grad")
    else:
        show(cache.figure_for(results_key, gradient_vs_distance, r["gradient"]), "why_recall_grad")  # width
    show(cache.figure_for(results_key, path_length_curves, r["paths"]), key="why_paths")
    st.markdown(why.results_text("recall"))

st.header("4. The encoder–decoder bottleneck, and additive attention")
if (r := results.get("bottleneck")) is not None:
    show(cache.figure_for(results_key, accuracy_vs_length, r["accuracy"]), key="why_bn_acc")
    st.markdown(why.results_text("bottleneck"))
    c1, c2 = st.columns(2)
    which = c1.radio("model", ["gru-attention", "transformer"], horizontal=True, key="why_bn_model")
    length = c2.slider("source length (fresh, never trained on)", 2, 16, 8, key="why_bn_len")
    if (m := why.why_model(f"bottleneck-{which}")) is not None:
        ex = why.alignment(m, length)
        if ex is None:
            st.info(f"Every source of length {length} was in training: pick another length.")
        else:
            show(cache.figure_for((m.key, length), cross_attention_alignment, ex["pattern"], ex["src"],
                                  ex["tgt"], ex["pairs"],
                                  title=f"{which}: where each output looks"), key="why_bn_align")
            st.caption("Squares: the source token each output position reverses (its expected source).")

st.header("5. Attention: a direct path from every token, across layers")
if lm is not None:
    sentence = st.text_input("text (the shipped lm reads it)", "the dog sees a cat . the cat "
                             "follows the dog .", key="why_layers_text", max_chars=max_chars())
    try:
        views, toks = why.layers(lm, sentence)
        show(cache.figure_for((lm.key, sentence), across_layers_grid,
                              {k: views[k] for k in ("raw", "rollout", "flow")}, toks),
             key="why_layers")
        st.markdown(story.layers_text(views, toks))
    except ValueError as e:
        st.error(f"{e}.")
