"""Tokens and embeddings for the Tokens page: safe text, the built-in corpus, and a model's token
vectors (one-hot vs learned).

One-hot vectors are rows of the identity (every token orthogonal to every other: cosine 0); a
trained model's ``embed.weight`` rows are learned, and tokens used alike end up pointing alike.
"""
from __future__ import annotations

import numpy as np

from ..tasks import make_task
from ..tokenize import KINDS, train_tokenizer
from ..viz.data import nearest_by_cosine

MAX_CHARS = 20_000  # the default of limits.text_chars()
SHOW_CHARS = 3_000  # coloured spans are drawn for this much text (HTML grows ~100 bytes a token)
CORPUS_SENTENCES = 5_000


def clean_text(text: str | None, max_chars: int | None = None) -> tuple[str, list[str]]:
    """Text safe to tokenize -> (text, notes for the user). Lone surrogates and other code points
    that are not valid UTF-8 become U+FFFD; text beyond ``max_chars`` characters (default
    ``limits.text_chars()``: TFVIZ_TEXT_MAX_CHARS, 20,000) is cut off."""
    from .. import limits

    max_chars = limits.text_chars() if max_chars is None else max_chars
    notes = []
    text = text or ""
    fixed = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates -> "?"
    if fixed != text:
        notes.append("Some characters were not valid Unicode and were replaced by '?'.")
    if len(fixed) > max_chars:
        notes.append(f"The text has {len(fixed):,} characters; only the first {max_chars:,} are "
                     "tokenized.")
        fixed = fixed[:max_chars]
    return fixed, notes


def clip_spans(text: str, offsets, tokens, ids, max_chars: int = SHOW_CHARS):
    """The first ``max_chars`` characters of ``text`` and the tokens that end inside them
    -> (text, offsets, tokens, ids), for drawing; counts should still use the whole text."""
    if len(text) <= max_chars:
        return text, list(offsets), list(tokens), list(ids)
    keep = [i for i, (_, end) in enumerate(offsets) if end <= max_chars]
    return (text[:max_chars], [offsets[i] for i in keep], [tokens[i] for i in keep],
            [ids[i] for i in keep])


def train_tokenizers(corpus_texts, bpe_vocab_size: int = 400, lowercase: bool = False) -> dict:
    """char, word and bpe tokenizers trained on ``corpus_texts`` exactly as
    ``tfviz.tokenize.compare_tokenizers`` trains them (kind -> Tokenizer): train once, then
    ``tokenize_all`` each new text without retraining."""
    corpus = list(corpus_texts)
    return {kind: train_tokenizer(kind, corpus, bpe_vocab_size if kind == "bpe" else None, lowercase)
            for kind in KINDS}


def tokenize_all(text: str, tokenizers: dict) -> list[dict]:
    """The rows of ``compare_tokenizers`` (kind, tokens, ids, offsets, count, vocab_size, unknowns,
    chars_per_token) for tokenizers from ``train_tokenizers``."""
    rows = []
    for kind, tok in tokenizers.items():
        enc = tok.encode(text)
        rows.append({"kind": kind, "tokens": enc.tokens, "ids": enc.ids, "offsets": enc.offsets,
                     "count": len(enc.ids), "vocab_size": tok.vocab_size,
                     "unknowns": sum(i == tok.unk_id for i in enc.ids),
                     "chars_per_token": len(text) / max(len(enc.ids), 1)})
    return rows


def default_corpus(n_sentences: int = CORPUS_SENTENCES, seed: int = 0) -> str:
    """The built-in corpus: the lm task's generated grammar sentences, joined by spaces."""
    return make_task("lm", n_sentences=n_sentences, seed=seed).corpus_text()


def embedding_matrix(model, n_rows: int | None = None, rows=None) -> np.ndarray:
    """The model's learned token embeddings ``embed.weight`` [vocab, d_model] as float64 (a copy);
    ``n_rows`` keeps the first rows (the tokenizer's vocabulary may be smaller than the model's);
    ``rows`` (token ids) copies just those rows (a 50,000-token vocabulary is 300 MB as float64)."""
    w = model.embed.weight.detach()[:n_rows]
    if rows is not None:
        w = w[list(rows)]
    return w.to("cpu").double().numpy().copy()


def token_neighbours(model, token_ids, k: int, n_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``token_ids``: the ``k`` tokens whose learned embeddings (``embed.weight``, the
    first ``n_rows``) are most cosine-similar -> (ids [len, k'], cosines [len, k']), best first.
    Computed for these rows only, in blocks: memory O(vocab · len(token_ids)), no vocab x vocab
    matrix and no copy of the embedding (``tfviz.viz.data.nearest_by_cosine``)."""
    w = model.embed.weight.detach()[:n_rows].to("cpu")
    return nearest_by_cosine(w.numpy(), token_ids, k)


def one_hot(ids, vocab_size: int) -> np.ndarray:
    """One-hot rows [len(ids), vocab_size]: the embedding a model without learning would use."""
    ids = np.asarray(list(ids), dtype=int)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"token ids must be in [0, {vocab_size})")
    out = np.zeros((len(ids), vocab_size))
    out[np.arange(len(ids)), ids] = 1.0
    return out


def unique_ids(ids, limit: int = 24, skip=()) -> list[int]:
    """The first ``limit`` distinct ids of ``ids`` in order of appearance, without ``skip``."""
    out: list[int] = []
    for i in ids:
        i = int(i)
        if i not in out and i not in skip:
            out.append(i)
        if len(out) >= limit:
            break
    return out


def ids_to_compare(ids, vocab_size: int, skip=(), limit: int = 12, at_least: int = 2) -> list[int]:
    """Tokens to compare by default: the text's first ``limit`` distinct ids (without ``skip``,
    e.g. the special tokens), topped up from the vocabulary (after ``skip``) to ``at_least`` —
    a one-word text still has a pair to compare — or to ``limit`` when the text has none."""
    out = unique_ids(ids, limit, skip)
    want = min(at_least if out else limit, vocab_size)
    spare = (i for i in range(vocab_size) if i not in skip and i not in out)
    while len(out) < want:
        nxt = next(spare, None)
        if nxt is None:
            break
        out.append(nxt)
    return out


__all__ = ["CORPUS_SENTENCES", "MAX_CHARS", "SHOW_CHARS", "clean_text", "clip_spans", "default_corpus", "embedding_matrix",
           "ids_to_compare", "token_neighbours", "one_hot", "tokenize_all", "train_tokenizers", "unique_ids"]
