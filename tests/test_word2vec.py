"""word2vec (skip-gram with negative sampling) against independent recomputations: the loss and its
gradient from the closed-form formula in float64 numpy, skip-gram pairs, neighbours and analogies
by brute force, PCA by numpy's eigendecomposition, one-hot cosines exactly 0; then what holds on
the built-in corpus (seed 0, measured) and on a shipped transformer's input embeddings."""
import numpy as np
import pytest
import torch

from tfviz import load_checkpoint
from tfviz.analysis.word2vec import (GROUPS, Word2VecConfig, analogy, builtin_corpus,
                                     model_embeddings, neighbours, one_hot_cosines, project_2d,
                                     sgns_loss, skipgram_pairs, train_word2vec, words_of)
from tfviz.tasks.grammar import ADJECTIVES, INTRANSITIVE, NOUNS, PREPOSITIONS, TRANSITIVE

ANALOGIES = [("king", "man", "woman", "queen"), ("queen", "woman", "man", "king"),
             ("prince", "boy", "girl", "princess"), ("father", "man", "woman", "mother"),
             ("son", "boy", "girl", "daughter"), ("king", "prince", "princess", "queen"),
             ("prince", "king", "father", "son")]


@pytest.fixture(scope="module")
def w2v():
    return train_word2vec()  # the built-in corpus, default config, seed 0


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_sgns_loss_and_gradient_match_the_closed_form():
    rng = np.random.default_rng(0)
    vc, uo, un = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(3, 2, 4))
    # per example: -log σ(uo·vc) - Σ_k log σ(-un_k·vc); mean over the 3 examples
    pos, neg = np.einsum("bd,bd->b", uo, vc), np.einsum("bkd,bd->bk", un, vc)
    want = np.mean(-np.log(sigmoid(pos)) - np.log(sigmoid(-neg)).sum(1))
    # d/dvc = (σ(pos) - 1) uo + Σ σ(neg_k) un_k; d/duo = (σ(pos) - 1) vc; d/dun_k = σ(neg_k) vc
    g_vc = ((sigmoid(pos) - 1)[:, None] * uo + np.einsum("bk,bkd->bd", sigmoid(neg), un)) / 3
    g_uo = (sigmoid(pos) - 1)[:, None] * vc / 3
    g_un = sigmoid(neg)[:, :, None] * vc[:, None] / 3
    t = [torch.tensor(x, requires_grad=True) for x in (vc, uo, un)]
    loss = sgns_loss(*t)
    loss.backward()
    assert loss.item() == pytest.approx(want, rel=1e-12)
    for got, exp in zip(t, (g_vc, g_uo, g_un)):
        np.testing.assert_allclose(got.grad.numpy(), exp, rtol=1e-10, atol=1e-14)


def test_skipgram_pairs_brute_force():
    sents = [[1, 2, 3, 4], [5], [6, 7]]
    want = sorted((s[i], s[j]) for s in sents for i in range(len(s)) for j in range(len(s))
                  if i != j and abs(i - j) <= 2)
    assert sorted(map(tuple, skipgram_pairs(sents, 2).tolist())) == want


def test_neighbours_and_analogy_match_brute_force():
    rng = np.random.default_rng(1)
    v = rng.normal(size=(12, 5))
    labels = [f"w{i}" for i in range(12)]
    for w in (0, 7):
        cos = [(float(v[w] @ v[j] / np.linalg.norm(v[w]) / np.linalg.norm(v[j])), j)
               for j in range(12) if j != w]
        want = [labels[j] for _, j in sorted(cos, key=lambda cj: -cj[0])[:4]]
        assert [n for n, _ in neighbours(v, labels, labels[w], 4)] == want
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    t = unit[1] - unit[2] + unit[3]
    scores = {j: float(unit[j] @ t / np.linalg.norm(t)) for j in range(12) if j not in (1, 2, 3)}
    best = sorted(scores, key=lambda j: -scores[j])[:3]
    got = analogy(v, labels, "w1", "w2", "w3", 3)
    assert [n for n, _ in got] == [labels[j] for j in best]
    assert [c for _, c in got] == pytest.approx([scores[j] for j in best], abs=1e-12)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        neighbours(v, labels, "nope")


def test_analogy_finds_the_planted_answer():
    # axes: royal, male, female; queen = royal + female
    labels = ["king", "queen", "man", "woman", "dog"]
    v = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 0], [0, 0, 1], [0.3, 0.3, 0.3]], dtype=float)
    assert analogy(v, labels, "king", "man", "woman", 1)[0][0] == "queen"


def test_one_hot_cosines_are_exactly_zero_off_the_diagonal():
    c = one_hot_cosines(50)
    assert (c[~np.eye(50, dtype=bool)] == 0.0).all() and (np.diag(c) == 1.0).all()


def test_pca_matches_numpy_eigendecomposition():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(30, 6)) * [5, 3, 1, 1, 0.5, 0.1]
    coords, explained = project_2d(x)
    xc = x - x.mean(0)
    evals, evecs = np.linalg.eigh(xc.T @ xc)
    order = np.argsort(evals)[::-1][:2]
    np.testing.assert_allclose(explained, evals[order] / evals.sum(), rtol=1e-10)
    want = xc @ evecs[:, order]
    np.testing.assert_allclose(np.abs(coords), np.abs(want), atol=1e-10)  # up to each sign
    assert (coords[np.abs(coords).argmax(0), [0, 1]] > 0).all()


def test_config_and_text_are_checked():
    with pytest.raises(ValueError, match="dim"):
        Word2VecConfig(dim=1)
    with pytest.raises(ValueError, match="lr"):
        Word2VecConfig(lr=0)
    with pytest.raises(ValueError, match="two different words"):
        train_word2vec("word word word")
    assert words_of("The King's dog. It ran!\nTwo 2") == [["the", "king's", "dog"], ["it", "ran"],
                                                          ["two"]]


def test_training_is_deterministic_and_learns_on_user_text():
    text = " . ".join(builtin_corpus(200, seed=3))
    cfg = Word2VecConfig(epochs=3, dim=8)
    a, b = train_word2vec(text, cfg), train_word2vec(text, cfg)
    np.testing.assert_array_equal(a.vectors, b.vectors)
    assert a.losses[-1] < a.losses[0]


def test_builtin_corpus_neighbours_and_analogies(w2v):
    """Measured with seed 0. Seeds 0-4 (measured once): 34 of the 35 analogies right (seed 1
    misses father - man + woman); every group word's nearest neighbour in its group except one
    (seed 4: princess -> "with")."""
    assert w2v.losses[-1] < 0.5 * w2v.losses[0]
    for word, group in GROUPS.items():
        nearest = w2v.neighbours(word, 1)[0][0]
        assert GROUPS.get(nearest, "not a group word").split()[0] == group.split()[0], (word, nearest)
    for a, b, c, want in ANALOGIES:
        assert w2v.analogy(a, b, c, 1)[0][0] == want, (a, b, c, w2v.analogy(a, b, c, 3))
    # learned vectors are not orthogonal the way one-hot vectors are
    assert w2v.neighbours("dog", 1)[0][1] > 0.5


def test_transformer_input_embeddings_group_words_by_part_of_speech():
    """The shipped lm model's embed.weight (grammar corpus, word tokenizer): every grammar word's
    nearest neighbour has its part of speech, and nouns keep their number (measured 52/52, 20/20)."""
    ck = load_checkpoint("checkpoints/lm.safetensors")
    vectors, labels = model_embeddings(ck)
    assert len(labels) == vectors.shape[0] == ck.tokenizer.vocab_size - len(ck.tokenizer.special_ids)
    assert not set(labels) & {ck.tokenizer.display(i) for i in ck.tokenizer.special_ids}
    pos = {**{w: "noun sg" for w, _ in NOUNS}, **{w: "noun pl" for _, w in NOUNS},
           **{w: "adj" for w in ADJECTIVES}, **{w: "prep" for w in PREPOSITIONS},
           **{w: "verb" for pair in INTRANSITIVE + TRANSITIVE for w in pair}}
    for word, tag in pos.items():
        nearest = neighbours(vectors, labels, word, 1)[0][0]
        assert pos.get(nearest) == tag, (word, nearest)
