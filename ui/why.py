"""The "Why attention" page's shared work (``app_pages/why.py``): word2vec trained once per text
for the whole server, the measured why experiments, and per-model computations cached on
``lm.key`` + the input, like ``ui.cache``. Every sentence comes from ``tfviz.zoo.why_story``."""
from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import streamlit as st

from .models import ModelRef, load_model

W2V_KEEP = 8  # word2vec models kept for the server (each a few hundred kB)


# ------------------------------------------------------------------------------ word2vec
@st.cache_resource
def _w2v_store() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def _digest(text: str | None) -> str:
    return "builtin" if text is None else hashlib.sha256(text.encode()).hexdigest()


def word2vec_source(text: str | None, w2v) -> tuple:
    """What identifies ``w2v``, trained on ``text``, for the server's figure cache: the text's digest
    and its final loss (a model retrained after it left the store is a new one)."""
    return ("word2vec", _digest(text), float(w2v.losses[-1]))


def word2vec_trained(text: str | None):
    """The word2vec already trained on ``text`` (None: the built-in corpus) by any session, or None."""
    store, lock = _w2v_store()
    with lock:
        return store.get(_digest(text))


def word2vec(text: str | None):
    """Train word2vec on ``text`` (None: the built-in corpus) with a progress bar, once for the
    server. ValueError with a plain reason for a text it cannot learn from."""
    from tfviz.analysis.word2vec import train_word2vec

    bar = st.progress(0.0, text="Training word2vec…")
    w2v = train_word2vec(text, progress=lambda e, n, loss: bar.progress(
        e / n, text=f"word2vec epoch {e}/{n}: loss {loss:.3f}"))
    bar.empty()
    store, lock = _w2v_store()
    with lock:
        store[_digest(text)] = w2v
        while len(store) > W2V_KEEP:
            store.popitem(last=False)
    return w2v


def vectors_view(vectors, labels, key: str, shown=None, groups=None, word=None, abc=None, expected=None,
                 source=None):
    """Word vectors (word2vec's or a transformer's) on the page: the 2-D map and one-hot vs learned
    cosines of the ``shown`` rows; ``word``'s nearest neighbour and the analogy ``abc`` over every
    word; the sentence quoting them (``why_story.embeddings_text``). ``source``: what determines
    ``vectors`` and ``labels`` (a model's key, a word2vec text's digest): the figures are then
    shared by the server on it (``cache.figure_for``) instead of on the vectors' hash."""
    from tfviz.analysis.word2vec import analogy, neighbours, one_hot_cosines, project_2d
    from tfviz.viz import analogy_bars, cosine_similarity, embedding_map, one_hot_vs_learned
    from tfviz.zoo.why_story import embeddings_text

    from . import cache
    from .figures import show

    shown = list(range(len(labels))) if shown is None else shown
    v, names, n = vectors[shown], [labels[i] for i in shown], min(24, len(shown))
    coords, explained = project_2d(v) if source is None else _projection(source, tuple(shown), v)
    def fig(builder, *args, **kwargs):
        if source is None:
            return cache.figure(builder, *args, **kwargs)
        return cache.figure_for((source, tuple(shown), None if groups is None else tuple(groups)),
                                builder, *args, **kwargs)

    # one under the other: side by side at 1024 px their titles were cut and overlapped
    show(fig(embedding_map, coords, names, groups, explained=tuple(explained)), f"{key}_map")
    show(fig(one_hot_vs_learned, v[:n], names[:n]), f"{key}_cos")
    best = None
    try:
        best = analogy(vectors, labels, *abc) if abc else None
    except ValueError as e:
        st.error(f"Analogy: {e}.")
    if best:
        show(cache.figure(analogy_bars, best, *abc, expected=expected), key=f"{key}_analogy")
    near = (word, *neighbours(vectors, labels, word, 1)[0]) if word in labels else None
    st.markdown(embeddings_text(v, names, cosine_similarity(v[:n]), one_hot_cosines(n), near,
                                      (*abc, *best[0], expected) if best else None))


@st.cache_data(max_entries=32, show_spinner=False)
def _projection(source: tuple, shown: tuple, _v):
    from tfviz.analysis.word2vec import project_2d

    return project_2d(_v)  # an SVD of the shown vectors: 0.07 s for the lm's, per visit before


# ------------------------------------------------------------------------------ why experiments
def why_folder() -> Path:
    from tfviz.zoo.why import why_dir

    return why_dir()


@st.cache_resource(max_entries=4, show_spinner=False)  # read-only: shared, not copied per rerun
def _results(path: str, mtime: int) -> dict:
    from tfviz.zoo.why_story import read_results

    return read_results(Path(path).parent)


def results_key() -> tuple | None:
    """(path, mtime) of checkpoints/why/why.json, None when not built: what ``results`` is."""
    path = why_folder() / "why.json"
    return (str(path), path.stat().st_mtime_ns) if path.is_file() else None


def results() -> dict:
    """The why experiments' measured frames (checkpoints/why/why.json), {} when not built; shared by
    the server (read-only)."""
    return _results(*key) if (key := results_key()) is not None else {}


@st.cache_data(max_entries=8, show_spinner=False)
def _results_text(path: str, mtime: int, name: str) -> str:
    from tfviz.zoo import why_story as story

    text = {"recall": story.recall_text, "bottleneck": story.bottleneck_text}[name]
    return text(_results(path, mtime)[name])


def results_text(name: str) -> str:
    """The sentence quoting experiment ``name`` ("recall", "bottleneck"; ``why_story``), written
    once per server for the measured frames (0.05 s of pandas each, per visit before)."""
    return _results_text(*results_key(), name)


def why_model(file: str):
    """A why checkpoint (e.g. "bottleneck-gru-attention"), shared like every model, or None."""
    path = why_folder() / f"{file}.safetensors"
    return load_model(ModelRef(f"{file} (why)", str(path), "shipped")) if path.is_file() else None


@st.cache_resource(max_entries=4, show_spinner="Building the task's examples…")
def _task(path: str, mtime: int, _lm):
    return _lm.ckpt.shared_task()


@st.cache_data(max_entries=32, show_spinner="Recording the alignment…")
def _alignment(path: str, mtime: int, length: int, seed: int, _lm) -> dict | None:
    from tfviz.analysis.bottleneck import cross_attention, fresh_at_length, reverse_alignment

    fresh = fresh_at_length(_task(path, mtime, _lm), length, 1, seed).examples("test")
    if not fresh:
        return None
    ex, tok = fresh[0], _lm.tokenizer
    with _lm.lock:
        pats = cross_attention(_lm.model, ex.src, ex.tokens)
    return {"pattern": pats[sorted(pats)[-1]].mean(0), "src": tok.tokens_of(list(ex.src)),
            "tgt": tok.tokens_of(list(ex.tokens)), "pairs": reverse_alignment(length)}


def alignment(lm, length: int, seed: int = 7000) -> dict | None:
    """One fresh source of ``length`` (never in training): the model's cross-attention [tgt, src]
    (heads averaged; last layer), its tokens and the reversal's pairs; None when none is fresh."""
    return _alignment(*lm.key, length, seed, lm)


# ------------------------------------------------------------------------------ per model + input
@st.cache_data(max_entries=16, show_spinner=False)
def _embeddings(path: str, mtime: int, _lm):
    from tfviz.analysis.word2vec import model_embeddings

    return model_embeddings(_lm.ckpt)


def embeddings(lm) -> tuple[np.ndarray, list[str]]:
    """A transformer's input embeddings with their token strings (``model_embeddings``)."""
    return _embeddings(*lm.key, lm)


def _ids(lm, text: str) -> list[int]:
    tok = lm.tokenizer
    ids = tok.encode(text).ids
    if tok.unk_id is not None and tok.unk_id in ids:
        unknown = [w for w in re.findall(r"\w+|[^\w\s]", text) if tok.token_to_id(w) is None]
        raise ValueError(f"{Path(lm.ref.path).stem} does not know the word(s) "
                         f"{', '.join(map(repr, unknown or ['?']))}: use its vocabulary")
    if not ids:
        raise ValueError("type at least one word")
    return ids


@st.cache_data(max_entries=64, show_spinner="Recording both sentences…")
def _order(path: str, mtime: int, a: str, b: str, _lm):
    import torch

    from tfviz.analysis.order import order_differences

    ids_a, ids_b = _ids(_lm, a), _ids(_lm, b)
    with _lm.lock:
        table, per_position = order_differences(_lm.model, torch.tensor(ids_a), torch.tensor(ids_b))
    return table, per_position, _lm.tokenizer.tokens_of(ids_b)


@st.cache_data(max_entries=32, show_spinner="Following the words through the layers…")
def _order_unmasked(path: str, mtime: int, a: str, b: str, _lm):
    import torch

    from tfviz.analysis.order import order_differences, without_causal_mask

    ids_a, ids_b = _ids(_lm, a), _ids(_lm, b)
    with _lm.lock:
        model = without_causal_mask(_lm.model)
    return order_differences(model, torch.tensor(ids_a), torch.tensor(ids_b))[0]


def order_unmasked(lm, a: str, b: str):
    """``order``'s table for the same decoder's weights run without its causal mask
    (``order.without_causal_mask``): attention alone, when the model has no positions."""
    return _order_unmasked(*lm.key, a, b, lm)


def order(lm, a: str, b: str):
    """``order_differences`` of two sentences (table, per_position, tokens of b); ValueError when
    they are not rearrangements of each other or hold a word the model does not know."""
    return _order(*lm.key, a, b, lm)


@st.cache_data(max_entries=32, show_spinner="Following attention through the layers…")
def _layers(path: str, mtime: int, text: str, _lm):
    import torch

    from tfviz.analysis.rollout import FLOW_MAX_POSITIONS, across_layers

    ids = _ids(_lm, text)
    if len(ids) > FLOW_MAX_POSITIONS:
        raise ValueError(f"{len(ids)} tokens: attention flow takes at most {FLOW_MAX_POSITIONS}")
    with _lm.lock:
        views = across_layers(_lm.model, torch.tensor(ids))
    return views, _lm.tokenizer.tokens_of(ids)


def layers(lm, text: str):
    """``across_layers`` (raw, residual, rollout, flow) of ``text``, and its tokens."""
    return _layers(*lm.key, text, lm)
