"""Tokens page in AppTest: counts equal compare_tokenizers, the similarity heatmaps equal the
one-hot identity and the cosine of embed.weight rows, neighbours equal nearest_neighbours_frame."""
from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import arr, chart, ok, open_page

from tfviz.analysis.embeddings import MAX_CHARS, SHOW_CHARS, clean_text, default_corpus
from tfviz.train.checkpoint import load_checkpoint
from tfviz.tokenize import compare_tokenizers
from tfviz.viz import nearest_neighbours_frame

COLS = ["kind", "count", "vocab_size", "unknowns"]


def frame(at, i: int = 0):
    return at.dataframe[i].value


@pytest.fixture(scope="module")
def corpus() -> str:
    return default_corpus()


def test_counts_equal_compare_tokenizers(tiny_zoo, corpus) -> None:
    at = open_page("tokens", tiny_zoo["tiny-coref"])
    ok(at)
    text = "the dogs near the cat run. Zebras 🦓 sing!"
    at.text_area(key="tok_text").input(text)
    at.slider(key="tok_bpe_vocab").set_value(300).run()
    ok(at)
    want = [[r[c] for c in COLS] for r in compare_tokenizers(text, [corpus], 300)]
    assert frame(at)[COLS].values.tolist() == want
    assert len(at.get("html")) == 4  # char, word, bpe + the model's own tokenizer
    enc = load_checkpoint(tiny_zoo["tiny-coref"]).tokenizer.encode(text)
    assert f"{len(enc)} tokens" in at.markdown[3].value

    # the user's own corpus
    at.radio(key="tok_corpus_src").set_value("my own text").run()
    own = "zebras sing and zebras dance. " * 20
    at.text_area(key="tok_corpus_text").input(own).run()
    ok(at)
    want = [[r[c] for c in COLS] for r in compare_tokenizers(text, [own], 300)]
    assert frame(at)[COLS].values.tolist() == want


@pytest.mark.parametrize("name", ["tiny-coref", "tiny-induction", "tiny-translate", "tiny-mlm"])
def test_embedding_similarity_is_the_models(tiny_zoo, name) -> None:
    at = open_page("tokens", tiny_zoo[name])
    ok(at)
    ck = load_checkpoint(tiny_zoo[name])
    ids = at.multiselect(key="tok_pick").value
    assert len(ids) >= 2
    w = ck.model.embed.weight.detach().double().numpy()[ids]
    u = w / np.linalg.norm(w, axis=1, keepdims=True)
    np.testing.assert_allclose(arr(chart(at, "tok_learned_sim")["data"][0]["z"]), u @ u.T, atol=1e-9)
    np.testing.assert_array_equal(arr(chart(at, "tok_onehot_sim")["data"][0]["z"]), np.eye(len(ids)))

    # nearest neighbours of a chosen token over the whole vocabulary
    at.selectbox(key="tok_nn_token").set_value(ids[1])
    at.slider(key="tok_nn_k").set_value(3).run()
    ok(at)
    vocab = ck.tokenizer.vocab_size
    full = nearest_neighbours_frame(ck.model.embed.weight.detach().numpy()[:vocab],
                                    ck.tokenizer.tokens_of(range(vocab)), 3)
    got = frame(at, 1)
    want = full.iloc[ids[1] * 3:ids[1] * 3 + 3]
    assert got["neighbour"].tolist() == want["neighbour"].tolist()
    np.testing.assert_allclose(got["cosine"], want["cosine"], atol=1e-6)


def test_picking_tokens_changes_the_heatmap(tiny_zoo) -> None:
    at = open_page("tokens", tiny_zoo["tiny-induction"])
    at.multiselect(key="tok_pick").set_value([10, 11, 12]).run()
    ok(at)
    assert arr(chart(at, "tok_learned_sim")["data"][0]["z"]).shape == (3, 3)
    at.multiselect(key="tok_pick").set_value([10]).run()
    ok(at)
    assert any("at least two" in w.value for w in at.warning)


@pytest.mark.parametrize("text", [
    pytest.param("", id="empty"), pytest.param("   \n ", id="blank"),
    pytest.param("\x00\x01\x7f ü 🦓\u200b\ufeff 中文 ﷽", id="odd-unicode"),
    pytest.param("x" * (MAX_CHARS + 5), id="huge")])
def test_bad_text_gives_a_message_not_an_exception(tiny_zoo, text) -> None:
    at = open_page("tokens", tiny_zoo["tiny-coref"])
    box = at.text_area(key="tok_text")
    assert box.max_chars == MAX_CHARS  # the text area stops there (issue 29): the browser takes no more
    (box.set_value(text) if len(text) > MAX_CHARS else box.input(text)).run()  # set_value: a client
    ok(at)  # that ignores the limit; the server cuts it
    if not text:
        assert any("Type some text" in i.value for i in at.info)
    if len(text) > MAX_CHARS:
        assert frame(at)["count"][0] == MAX_CHARS  # characters, capped
        spans = at.get("html")[0].proto.body
        assert spans.count("<span") == SHOW_CHARS  # only the start is coloured (one per char)


def test_clean_text_replaces_lone_surrogates() -> None:
    text, notes = clean_text("a\ud800b")
    assert text == "a?b" and notes
    assert clean_text(None) == ("", [])


def test_trained_once_equals_compare_tokenizers(corpus) -> None:
    from tfviz.analysis.embeddings import tokenize_all, train_tokenizers

    toks = train_tokenizers([corpus[:20000]], 300)
    for text in ["", "the dogs run.", "Zebras 🦓 ünïcode [MASK] x", "a\tb\nc"]:
        assert tokenize_all(text, toks) == compare_tokenizers(text, [corpus[:20000]], 300)
