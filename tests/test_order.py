"""Word order: a bag of words cannot see it; a bidirectional transformer without positions is
permutation-equivariant (exactly, in float64, on random weights); a causal one without positions
is not — its differences appear exactly where structural_classes says, on random weights and on
the shipped pos-none model; with positions everything differs."""
import numpy as np
import pytest
import torch

from tfviz import ModelConfig, load_checkpoint
from tfviz.analysis.order import (bag_of_words, explain, matching_permutation, order_differences,
                                  position_free, structural_classes)
from tfviz.model.positional import SCHEMES
from tfviz.train import new_model

A, B = "the dog chases the cat .", "the cat chases the dog ."


def tiny(arch="encoder", pos="none", layers=3, seed=0):
    cfg = ModelConfig(arch=arch, vocab_size=24, d_model=16, n_heads=2, n_layers=layers,
                      max_len=16, pos=pos)
    return new_model(cfg, seed=seed).double()


def shuffled(seed=0, n=9):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(3, 24, (n,), generator=g)
    a[4] = a[1]  # a repeated token
    return a, a[torch.randperm(n, generator=g)]


def test_bag_of_words_gives_both_sentences_one_vector():
    vocab, counts = bag_of_words([A.split(), B.split()])
    assert vocab == ["the", "dog", "chases", "cat", "."]
    np.testing.assert_array_equal(counts, [[2, 1, 1, 1, 1]] * 2)


def test_matching_permutation():
    perm = matching_permutation(A.split(), B.split())
    assert [A.split()[i] for i in perm] == B.split() and perm.tolist() == [0, 4, 2, 3, 1, 5]
    with pytest.raises(ValueError, match="exactly the tokens"):
        matching_permutation(A.split(), (A + " .").split())


def test_bidirectional_without_positions_is_exactly_permutation_equivariant():
    model = tiny()
    assert position_free(model.config)
    for seed in range(3):
        a, b = shuffled(seed)
        table, per_pos = order_differences(model, a, b)
        assert table["matched"].max() < 1e-12, table
        assert table["unmatched"].iloc[-1] > 1e-2  # position by position they do differ
        assert np.array(table.attrs["forced_equal"]).all()
    assert "permutation-equivariant" in explain(table)


@pytest.mark.parametrize("pos", [p for p in SCHEMES if p != "none"])
def test_with_positions_the_same_token_elsewhere_differs(pos):
    model = tiny(pos=pos, layers=2)
    assert not position_free(model.config)
    a, b = shuffled(1)
    table, per_pos = order_differences(model, a, b)
    moved = np.array(table.attrs["permutation"]) != np.arange(len(a))
    # every token that moved has another representation after the last layer. Random init
    # (std 0.02) makes attention nearly uniform, so the differences are small (measured 4e-5 ..
    # 4e-3), yet orders of magnitude above float64 rounding (< 1e-12 without positions, above)
    assert (per_pos[-1][moved] > 1e-8).all(), (pos, per_pos[-1])
    assert "knows positions" in explain(table)


def test_a_window_breaks_equivariance_too():
    cfg = ModelConfig(arch="encoder", vocab_size=24, d_model=16, n_heads=2, n_layers=2,
                      max_len=16, pos="none", window=2)
    assert not position_free(cfg)


def check_causal(model, a, b, tol):
    table, per_pos = order_differences(model, a, b)
    forced = np.array(table.attrs["forced_equal"])
    assert forced[0].all() and not forced[-1].all()
    assert per_pos[forced].max(initial=0.0) < tol
    assert per_pos[~forced].min() > 1e3 * tol  # where not forced equal, measurably different
    return table, per_pos, forced


def test_causal_without_positions_differs_exactly_where_the_mask_says():
    model = tiny(arch="decoder")
    for seed in range(3):
        check_causal(model, *shuffled(seed), tol=1e-12)


def test_shipped_pos_none_model_recorded_residual_stream():
    ck = load_checkpoint("checkpoints/pos-none.safetensors")
    a, b = (torch.tensor(ck.tokenizer.encode(s).ids) for s in (A, B))
    table, per_pos, forced = check_causal(ck.model, a, b, tol=1e-5)  # float32 weights
    # embeddings: one bag; after layer 0: the first "the" and the final "." (same bag of
    # prefix tokens); after layer 1: only the first "the"
    assert forced.tolist() == [[True] * 6, [True, False, False, False, False, True],
                               [True] + [False] * 5]
    assert "causal mask" in explain(table)
    learned = load_checkpoint("checkpoints/pos-learned.safetensors")
    table, per_pos = order_differences(learned.model, a, b)
    assert table["matched"].iloc[0] > 0.05  # the embeddings already differ: position vectors
    assert (per_pos[-1][1:] > 1e-3).all()


def test_structural_classes_bidirectional_keep_token_identity():
    ca, cb = structural_classes([[1, 2, 3, 1], [3, 1, 1, 2]], n_layers=2, causal=False)
    assert ca.shape == (3, 4)
    np.testing.assert_array_equal(cb[:, [0, 1, 2, 3]], ca[:, [2, 0, 3, 1]])


def test_encoder_decoder_is_refused():
    model = new_model(ModelConfig(arch="encoder-decoder", vocab_size=24, d_model=16, n_heads=2,
                                  n_layers=1, max_len=16, pos="none"), seed=0)
    with pytest.raises(ValueError, match="one stack"):
        order_differences(model, torch.tensor([3, 4]), torch.tensor([4, 3]))
