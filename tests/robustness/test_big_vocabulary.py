"""The Tokens page with a large vocabulary (issue 15, item 2). Was: nearest neighbours built two
vocab x vocab float64 arrays: a valid 0.3 MB upload with vocab 12,000 took 2.3 GB and 22-25 s;
vocab 60,000 failed with "Unable to allocate 26.8 GiB" and a traceback showing server paths (and
around 35,000 the kernel would have killed the server). Now neighbours are computed for the shown
token only, in blocks: O(vocab x shown) memory, also for the 50k-vocabulary GPT-2 models."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from apptest_helpers import messages, problems

from tfviz.model import ModelConfig
from tfviz.tokenize import vocab_tokenizer
from tfviz.train.checkpoint import load_checkpoint, save_checkpoint
from tfviz.train.setup import new_model
from tfviz.viz.data import nearest_by_cosine


def brute_force(vectors: np.ndarray, row: int, k: int) -> tuple[list[int], np.ndarray]:
    v = vectors.astype(np.float64)
    norms = np.linalg.norm(v, axis=1)
    cos = (v @ v[row]) / np.where(norms > 0, norms, 1) / (norms[row] or 1)
    cos[norms == 0] = 0
    cos[row] = -np.inf
    order = np.lexsort((np.arange(len(cos)), -cos))[:k]
    return list(order), cos[order]


def test_top_k_matches_the_full_matrix_and_keeps_memory_to_the_rows_shown():
    rng = np.random.default_rng(0)
    small = rng.normal(size=(400, 16)).astype(np.float32)
    small[3] = 0  # a zero vector: similarity 0 to everything
    small[7] = small[8]
    index, cosine = nearest_by_cosine(small, None, 6)
    for row in range(400):
        want, want_cos = brute_force(small, row, 6)
        np.testing.assert_allclose(cosine[row], want_cos, atol=1e-5)
        assert list(index[row]) == want or np.allclose(np.sort(want_cos), np.sort(cosine[row]), atol=1e-5)
    big = rng.normal(size=(12_000, 64)).astype(np.float32)  # the 12,000-token upload
    tracemalloc.start()
    index, cosine = nearest_by_cosine(big, [5, 11_999], 10)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert peak < 5, f"{peak:.1f} MB for two rows (two 12,000^2 float64 matrices: 2.3 GB)"
    for i, row in enumerate([5, 11_999]):
        want, want_cos = brute_force(big, row, 10)
        assert list(index[i]) == want
        np.testing.assert_allclose(cosine[i], want_cos, atol=1e-5)


@pytest.fixture(scope="module")
def sixty_thousand(tmp_path_factory):
    """A valid checkpoint with a 60,000-word vocabulary (d_model 8: a small file)."""
    folder = tmp_path_factory.mktemp("vocab")
    tok = vocab_tokenizer([f"w{i}" for i in range(60_000 - 7)])
    cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=8, n_heads=2, n_layers=1, max_len=32)
    path = save_checkpoint(folder / "checkpoints" / "wide.safetensors", new_model(cfg, 0), tokenizer=tok)
    return path


def test_the_tokens_page_serves_a_60000_token_model(sixty_thousand, monkeypatch, app):
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(sixty_thousand.parent))
    at = app("tokens", model=sixty_thousand, tok_text="w10 w20 w30")
    assert not problems(at), problems(at)
    assert "Unable to allocate" not in messages(at)
    anchor = at.selectbox(key="tok_nn_token").value
    at.slider(key="tok_nn_k").set_value(4).run()
    assert not problems(at), problems(at)
    frame = at.dataframe[-1].value  # the neighbours table (dataframes have no key accessor)
    ck = load_checkpoint(sixty_thousand)
    want, want_cos = brute_force(ck.model.embed.weight.detach().numpy(), anchor, 4)
    labels = ck.tokenizer.tokens_of(want)
    assert frame["neighbour"].tolist() == labels
    np.testing.assert_allclose(frame["cosine"].to_numpy(), want_cos, atol=1e-5)
