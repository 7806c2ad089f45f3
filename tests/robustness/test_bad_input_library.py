"""Bad input at the library level that the older unit tests did not cover: a tokenizer that does
not belong to the model, windows of 0 / wider than the sequence, unknown tokens, generation
requests too long to record, lone surrogates. (Most library cases are covered by
tests/test_config.py, test_model.py, test_checkpoint.py, test_train.py and test_jobs.py: see
docs/robustness.md.)"""
from __future__ import annotations

import pytest
import torch

from tfviz import ModelConfig, Transformer
from tfviz.analysis.embeddings import clean_text
from tfviz.analysis.masks_demo import MaskChoice, effective_mask
from tfviz.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from tfviz.generation import MAX_POSITIONS, encode_text, generate_with_attention
from tfviz.model.masks import causal_mask, sliding_window_mask
from tfviz.tasks import make_task
from tfviz.tokenize import train_tokenizer
from tfviz.train.setup import model_config_for


@pytest.fixture(scope="module")
def task():
    return make_task("copy", arch="decoder", n_symbols=6, min_len=2, max_len=5,
                     n_train=50, n_val=10, n_test=10)


def tiny(vocab: int, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**dict(vocab_size=vocab, d_model=16, n_heads=2, n_layers=1,
                                              max_len=16, pos="rope"), **kw})).eval()


@pytest.mark.parametrize("extra", [-1, +1, +50])
def test_tokenizer_that_does_not_match_the_model_is_rejected_at_load(tmp_path, task, extra):
    n = task.tokenizer.vocab_size
    path = save_checkpoint(tmp_path / "m", tiny(n + extra), tokenizer=task.tokenizer) if n + extra >= 2 \
        else None
    with pytest.raises(CheckpointError, match=rf"the tokenizer has {n} tokens but the model's "
                                              rf"vocab_size is {n + extra}: they do not belong together"):
        load_checkpoint(path)
    assert load_checkpoint(save_checkpoint(tmp_path / "ok", tiny(n), tokenizer=task.tokenizer))


def test_training_config_cannot_pick_another_vocab_size(task):
    n = task.tokenizer.vocab_size
    for vocab in (n - 1, n + 8):  # refused before training, not after (the checkpoint would not load)
        with pytest.raises(ValueError, match=rf"vocab_size={vocab} differs from the task's tokenizer"):
            model_config_for(task, vocab_size=vocab)
    assert model_config_for(task).vocab_size == n


def test_window_zero_or_negative_is_rejected_and_wider_than_the_sequence_is_full():
    with pytest.raises(ValueError, match="window=0 must be at least 1"):
        ModelConfig(window=0)
    with pytest.raises(ValueError, match="window must be >= 1"):
        MaskChoice("sliding window", 0, 0, 0)
    with pytest.raises(ValueError, match="window=-1 must be >= 0"):
        sliding_window_mask(4, 4, -1, causal=True)
    for n in (1, 5, 9):  # a window of 50 on a short sequence: exactly causal attention
        wide = effective_mask(MaskChoice("sliding window", 50, 0, 0), n, causal=True)
        assert torch.equal(wide, causal_mask(n, n))
        assert effective_mask(MaskChoice("sliding window", 50, 0, 0), n, causal=False).all()
    model = tiny(20, window=10_000)  # a config window beyond max_len equals no window
    x = torch.randint(1, 20, (1, 12))
    torch.testing.assert_close(model(x), tiny(20)(x))


def test_unknown_tokens_become_unk_and_are_counted():
    tok = train_tokenizer("word", ["the cat sat on the mat"])
    ids = encode_text(tok, "the zebra sat", "prompt", bos=True)
    assert ids[0] == tok.bos_id and ids.count(tok.unk_id) == 1
    assert tok.tokens_of([10_000]) == ["[UNK]"]  # an id outside the vocabulary is shown, not raised


def test_generation_refuses_requests_too_long_to_record(task):
    model = tiny(task.tokenizer.vocab_size)
    with pytest.raises(ValueError, match=rf"= {MAX_POSITIONS + 1} positions; at most {MAX_POSITIONS}"):
        generate_with_attention(model, [2] * (MAX_POSITIONS - 3), 4)
    assert len(generate_with_attention(model, [2] * 8, 2).ids) == 10
    seq2seq = tiny(task.tokenizer.vocab_size, arch="encoder-decoder")
    with pytest.raises(ValueError, match=rf"source text has {MAX_POSITIONS + 1} tokens"):
        generate_with_attention(seq2seq, [2], 2, src=[3] * (MAX_POSITIONS + 1))


def test_lone_surrogates_and_binary_text_are_cleaned():
    text, notes = clean_text("a\udcffb\ud800" + bytes(range(256)).decode("latin-1"))
    assert "\ud800" not in text and notes and text.encode("utf-8")
    tok = train_tokenizer("char", ["abc"])
    assert tok.encode(text).ids  # binary characters tokenize (as [UNK]) once the text is clean
