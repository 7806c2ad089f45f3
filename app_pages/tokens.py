"""Tokens & embeddings: one text cut three ways (characters, words, BPE) and by the selected
model's own tokenizer; then one-hot vs learned token vectors and a token's nearest neighbours."""
import pandas as pd
import streamlit as st

from tfviz.analysis.embeddings import (SHOW_CHARS, clean_text, clip_spans, embedding_matrix,
                                       ids_to_compare, one_hot, tokenize_all)
from tfviz.tokenize import BPE_MIN_VOCAB
from tfviz.viz import similarity_heatmap, token_spans_html
from ui import cache
from ui.figures import side_by_side
from ui.inputs import max_chars, readable
from ui.picker import current_model

DEFAULT_TEXT = "the dogs near the old cat run. The zebra sings 🦓 unbelievably!"


def spans(offsets, tokens, ids) -> None:
    """The text with one coloured span per token (only the start of a very long text)."""
    st.html(token_spans_html(*clip_spans(text, offsets, tokens, ids)))


st.title("Tokens & embeddings")
st.caption("A model never sees letters: text is cut into **tokens**, each token becomes an id, "
           "and each id looks up a vector. Hover a coloured span to see its id and offsets.")

raw = st.text_area("Text to tokenize", DEFAULT_TEXT, key="tok_text", height=90, max_chars=max_chars(),
                   help=f"At most {max_chars():,} characters (TFVIZ_TEXT_MAX_CHARS).")
text, notes = clean_text(raw)
for note in notes:
    st.warning(note)
if not text:
    st.info("Type some text above to see it tokenized.")

c1, c2 = st.columns([2, 1])
source = c1.radio("Train the three tokenizers on", ["built-in corpus", "my own text"],
                  key="tok_corpus_src", horizontal=True,
                  help="Built-in: 5,000 sentences of the lm task's generated grammar corpus.")
bpe_vocab = c2.slider("BPE vocabulary size", BPE_MIN_VOCAB, 2000, 400, step=1, key="tok_bpe_vocab",
                      help=f"At least {BPE_MIN_VOCAB}: 7 special tokens + the 256 bytes.")
corpus = cache.default_corpus()
if source == "my own text":
    corpus, more = clean_text(st.text_area("Corpus to train on", key="tok_corpus_text",
                                           max_chars=max_chars(), placeholder="Paste a few paragraphs…"))
    for note in more:
        st.warning(note)
    if not corpus.strip():
        st.warning("The corpus is empty: paste some text to train on (using the built-in one).")
        corpus = cache.default_corpus()

rows = tokenize_all(text, cache.tokenizers(corpus, bpe_vocab))
st.dataframe(pd.DataFrame([{k: r[k] for k in ("kind", "count", "vocab_size", "unknowns",
                                               "chars_per_token")} for r in rows]),
             key="tok_counts", hide_index=True)
if len(text) > SHOW_CHARS:
    st.caption(f"Coloured below: the first {SHOW_CHARS:,} characters (the counts cover all).")
for r in rows:
    st.markdown(f"**{r['kind']}** — {r['count']} tokens · vocabulary {r['vocab_size']} · "
                f"{r['unknowns']} unknown ([UNK])")
    spans(r["offsets"], r["tokens"], r["ids"])

loaded = current_model(required=False)
tok = loaded.tokenizer if loaded is not None else None
if tok is None:
    st.info("Pick a model with a tokenizer in the sidebar to see its tokens and embeddings.")
    st.stop()

st.subheader(f"The selected model's tokenizer ({tok.kind}, {tok.vocab_size} tokens)")
text = readable(tok, text)  # its rules may make a text longer: it reads fewer characters
try:
    enc = tok.encode(text)
except ValueError as e:  # tfviz.tokenize.TokenizerError: e.g. "this tokenizer cannot read this text"
    st.warning(f"The selected model's tokenizer: {e}")
    st.stop()
unk = sum(i == tok.unk_id for i in enc.ids)
st.markdown(f"{len(enc)} tokens · {unk} unknown" + (" — this model never saw those words."
                                                   if unk else ""))
spans(enc.offsets, enc.tokens, enc.ids)

st.subheader("One-hot vs learned embeddings")
vocab = tok.vocab_size
labels = tok.tokens_of(range(vocab))
default = ids_to_compare(enc.ids, vocab, skip=tok.special_ids)
# Reset the picked tokens to the text's when the model or text changes — or when Streamlit dropped
# the widget's state because another page was shown in between.
source_of_pick = (loaded.ref.path, text)
if st.session_state.get("_tok_pick_for") != source_of_pick or "tok_pick" not in st.session_state:
    st.session_state["_tok_pick_for"] = source_of_pick
    st.session_state["tok_pick"] = default
    st.session_state["tok_nn_token"] = (default or [0])[0]
ids = st.multiselect("Tokens to compare", list(range(vocab)), key="tok_pick",
                     format_func=lambda i: f"{labels[i]!r} (id {i})")
if len(ids) < 2:
    st.warning("Pick at least two tokens to compare.")
else:
    names = [labels[i] for i in ids]
    side_by_side((cache.figure(similarity_heatmap, one_hot(ids, vocab), names, title="One-hot vectors: cosine"),
                  "tok_onehot_sim", "One-hot: every token is its own axis, so all pairs are "
                  "orthogonal (identity)."),
                 (cache.figure(similarity_heatmap, embedding_matrix(loaded.model, vocab, rows=ids), names,
                               title="Learned embed.weight: cosine"),
                  "tok_learned_sim", f"Rows of {loaded.ref.label}'s trained `embed.weight` "
                  f"({loaded.config.d_model} dimensions)."))

st.subheader("Nearest neighbours in the trained embedding")
c1, c2 = st.columns([2, 1])
st.session_state.setdefault("tok_nn_token", (default or [0])[0])
anchor = c1.selectbox("Token", list(range(vocab)), key="tok_nn_token",
                      format_func=lambda i: f"{labels[i]!r} (id {i})")
k = c2.slider("Neighbours", 1, 10, 5, key="tok_nn_k")
st.dataframe(cache.neighbours(loaded, anchor, k), key="tok_nn", hide_index=True)
