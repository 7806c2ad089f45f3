"""Computations shared by every session, cached per (model, input): what a page computes from a
model is computed once per server, not once per visitor or per rerun.

Every function here takes a ``LoadedModel`` (``ui.models``) and plain inputs, and is keyed on
``lm.key`` — the checkpoint's path and modification time — plus those inputs, so a retrained file
under the same name is recomputed. The model itself is passed as an unhashed ``_lm`` argument.
Each runs the shared model under its lock (``LoadedModel.record`` / ``forward``, or ``with
lm.lock``). Results are plain data (numpy arrays, DataFrames, figures): ``st.cache_data`` hands
every caller its own copy, so nothing a page does to a result leaks into another session.

To add one: a private ``@st.cache_data`` function whose first arguments are ``path, mtime`` and
whose model argument is ``_lm``, and a public wrapper that passes ``*lm.key``. A figure built from
plain data: ``show(cache.figure(viz_function, *data), key)`` (built once per server, read-only).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from tfviz.analysis import explorer

from .models import locked


# ------------------------------------------------------------------------------ per model
@st.cache_resource(max_entries=16, show_spinner="Building the task's examples…")
def _task(path: str, mtime: int, _lm):
    try:
        task = _lm.ckpt.shared_task()  # one task per spec for the server (tfviz.tasks.cached_task)
        task.examples("validation")  # generate now, once
        return task
    except Exception:  # noqa: BLE001  (no task, or one this version cannot rebuild)
        return None


def task_of(lm):
    """The model's task, built once per server (read-only afterwards), or None without one."""
    return _task(*lm.key, lm)


@st.cache_data(max_entries=32, show_spinner=False)
def _default_texts(path: str, mtime: int, _lm) -> tuple[str, str]:
    return explorer.default_texts(_task(path, mtime, _lm), _lm.tokenizer, _lm.config)


def default_texts(lm) -> tuple[str, str]:
    """(text, source text) a page shows first for this model (``explorer.default_texts``)."""
    return _default_texts(*lm.key, lm)


@st.cache_data(max_entries=32, show_spinner=False)
def _prompt_texts(path: str, mtime: int, _lm) -> tuple[str, str | None]:
    from tfviz.generation import default_inputs

    task = _task(path, mtime, _lm)
    try:
        return default_inputs(task, _lm.tokenizer)
    except Exception:  # noqa: BLE001 - a checkpoint without a usable task: plain defaults
        return "[BOS]", ("" if _lm.config.arch == "encoder-decoder" else None)


def prompt_texts(lm) -> tuple[str, str | None]:
    """(prompt, source text or None) the Generate page starts from (``default_inputs``)."""
    return _prompt_texts(*lm.key, lm)


@st.cache_data(max_entries=32, show_spinner=False)
def _generation_note(path: str, mtime: int, _lm) -> str | None:
    from tfviz.generation import generation_note

    return generation_note(_task(path, mtime, _lm))


def generation_note(lm) -> str | None:
    """Why this model is a poor generator (``tfviz.generation.generation_note``), or None."""
    return _generation_note(*lm.key, lm)


@st.cache_data(max_entries=24, show_spinner="Scoring every head…")
def _head_table(path: str, mtime: int, site_label: str, text_ids: tuple | None, _lm):
    site = next(s for s in explorer.sites(_lm.config) if s.label == site_label)
    task = _task(path, mtime, _lm)
    with _lm.lock:  # scoring runs the shared model: hold its lock like LoadedModel.record
        return explorer.head_table(_lm.model, task, site, tokenizer=_lm.tokenizer,
                                   text_ids=None if task is not None else text_ids)


def head_table(lm, site, text_ids=None):
    """The per-head score table of ``site`` (ValueError with a reason when it cannot be made).
    A model without a task (imported) is scored on ``text_ids``, the text the page shows."""
    text_ids = None if text_ids is None or task_of(lm) is not None else tuple(text_ids)
    return _head_table(*lm.key, site.label, text_ids, lm)


@st.cache_data(max_entries=64, show_spinner="Finding neighbours…")
def _neighbours(path: str, mtime: int, token: int, k: int, _lm):
    import pandas as pd

    from tfviz.analysis.embeddings import token_neighbours

    tok = _lm.tokenizer
    near, cosine = token_neighbours(_lm.model, [token], k, tok.vocab_size)  # this token's row only
    return pd.DataFrame({"token": tok.tokens_of([token])[0], "rank": range(1, near.shape[1] + 1),
                         "neighbour": tok.tokens_of(near[0].tolist()), "cosine": cosine[0]})


def neighbours(lm, token: int, k: int):
    """The ``k`` tokens nearest to ``token`` in the learned embedding (computed for that row only:
    a 60,000-token vocabulary has no vocab x vocab matrix)."""
    return _neighbours(*lm.key, token, k, lm)


@st.cache_data(max_entries=256, show_spinner=False)
def _card(path: str, mtime: int) -> dict | None:
    from tfviz.train.checkpoint import read_metadata

    try:
        return read_metadata(path)
    except ValueError:
        return None


def card(path: str) -> dict | None:
    """A checkpoint's JSON metadata read from its header alone (None when unreadable)."""
    try:
        return _card(path, Path(path).stat().st_mtime_ns)
    except OSError:
        return None


def _keys(models: dict) -> tuple:
    return tuple((name, *lm.key) for name, lm in models.items())


@st.cache_data(max_entries=16, show_spinner="Scoring the induction heads…")
def _induction_frame(keys: tuple, _models: dict):
    from tfviz.zoo.findings import induction_frame

    with locked(_models.values()):
        return induction_frame({name: lm.model for name, lm in _models.items()})


def induction_frame(models: dict):
    """Induction and previous-token scores of every head of each model (name -> LoadedModel)."""
    return _induction_frame(_keys(models), models)


@st.cache_data(max_entries=32, show_spinner="Reading fresh repeated sequences…")
def _repeat_curves(keys: tuple, vocab: int, max_len: int, condition, _models: dict):
    from tfviz.zoo.findings import repeat_curves

    with locked(_models.values()):
        return repeat_curves({name: lm.model for name, lm in _models.items()}, vocab, max_len,
                             condition)


def repeat_curves(models: dict, vocab: int, max_len: int, condition: str | None):
    """Per-position loss and accuracy on the repeated tokens of fresh held-out sequences
    (``zoo.findings.repeat_curves``; name -> LoadedModel)."""
    return _repeat_curves(_keys(models), vocab, max_len, condition, models)


@st.cache_data(max_entries=16, show_spinner="Evaluating each model at each length…")
def _extrapolation(keys: tuple, lengths: tuple, n_tokens: int, _named: dict):
    from tfviz.analysis.positional import extrapolation_table

    with locked(_named.values()):
        return extrapolation_table([(name, lm.ckpt) for name, lm in _named.items()], lengths,
                                   n_tokens=n_tokens)


def extrapolation(named: dict, lengths, n_tokens: int = 4096):
    """Each model's loss on its task at each length (``extrapolation_table``; name -> model).
    ValueError when a model cannot be evaluated so."""
    return _extrapolation(_keys(named), tuple(lengths), n_tokens, named)


# ------------------------------------------------------------------------------ per model + input
@st.cache_data(max_entries=16, show_spinner=False)
def _mission_weights(path: str, mtime: int, sentence: int, position: str, _lm) -> dict:
    from tfviz.zoo.findings import mission_weights

    with _lm.lock:
        return mission_weights(_lm.model, _task(path, mtime, _lm), sentence, position)


def mission_weights(lm, sentence: int, position: str) -> dict:
    """A coref model's pronoun row in every head on a mission sentence (``zoo.findings``)."""
    return _mission_weights(*lm.key, sentence, position, lm)


@st.cache_data(max_entries=64, show_spinner=False)
def _translate_example(path: str, mtime: int, index: int, layer: int, head, _lm) -> dict:
    from tfviz.zoo.findings import translate_example

    with _lm.lock:
        return translate_example(_lm.model, _task(path, mtime, _lm), index, layer, head)


def translate_example(lm, index: int, layer: int, head: int | None) -> dict:
    """Cross-attention of a translate model's test sentence (``zoo.findings``)."""
    return _translate_example(*lm.key, index, layer, head, lm)

@st.cache_data(max_entries=48, show_spinner="Recording the forward pass…")
def _record(path: str, mtime: int, inputs: tuple, names: tuple | None, _lm) -> dict[str, np.ndarray]:
    import torch

    tensors = [torch.tensor([list(x)], dtype=torch.long) for x in inputs]
    wanted = explorer.is_attention_name if names is None else list(names)
    return explorer.to_numpy(_lm.record(*tensors, names=wanted))


def record(lm, inputs: tuple, names: tuple | None = None) -> dict[str, np.ndarray]:
    """Recorded tensors of one forward on ``inputs`` ((ids,) or (src ids, ids)) as numpy arrays:
    ``names``, or every attention tensor (``explorer.is_attention_name``) when None. Switching
    layer, head or query only re-slices them. ValueError when the model cannot run the input."""
    return _record(*lm.key, tuple(tuple(x) for x in inputs), names, lm)


@st.cache_data(max_entries=32, show_spinner="Recording attention…")
def _mask_patterns(path: str, mtime: int, inputs: tuple, pads: tuple | None, window, n_global: int,
                   stack: str, _lm) -> np.ndarray:
    import torch

    import tfviz
    from tfviz.analysis.masks_demo import windowed_model
    from tfviz.model import layer_template

    xs = [torch.tensor([list(x)]) for x in inputs]
    kw = {} if pads is None else {"padding_mask": torch.tensor([list(pads)])}
    template = layer_template("attn.hook_pattern", stack)
    names = [template.format(l=layer) for layer in range(_lm.config.n_layers)]
    if window is None:
        rec = _lm.record(*xs, names=names, **kw)
    else:  # a private copy with the window: no lock needed
        rec = tfviz.record(windowed_model(_lm.model, window, n_global), *xs, names=names, **kw)
    return rec.stack_layers(template)[:, 0].numpy()


def mask_patterns(lm, inputs: tuple, pads: tuple | None, window: int | None, n_global: int,
                  stack: str) -> np.ndarray:
    """[layer, head, q_pos, k_pos] of ``stack`` ("" / "encoder" / "decoder") under a padding mask
    (``pads``: True = pad) and/or a window with global tokens applied to the same weights."""
    return _mask_patterns(*lm.key, tuple(tuple(x) for x in inputs), pads, window, n_global, stack, lm)


@st.cache_data(max_entries=64, show_spinner=False)
def _logits(path: str, mtime: int, inputs: tuple, _lm) -> np.ndarray:
    import torch

    return _lm.forward(*[torch.tensor([list(x)], dtype=torch.long) for x in inputs]).float().numpy()


def logits(lm, inputs: tuple) -> np.ndarray:
    """The model's output logits for one input ((ids,) or (src ids, ids)), [1, pos, vocab]."""
    return _logits(*lm.key, tuple(tuple(x) for x in inputs), lm)


@st.cache_data(max_entries=64, show_spinner="Generating…")
def _generation(path, mtime, prompt, src, n, temperature, top_k, seed, eos, _lm):
    from tfviz import generation as g

    tok = _lm.tokenizer
    ids = g.encode_text(tok, prompt, "prompt", bos=True)
    src_ids = None if src is None else g.encode_text(tok, src, "source text")
    with _lm.lock:
        return g.generate_with_attention(_lm.model, ids, n, temperature, top_k or None, seed,
                                         src=src_ids, eos_id=tok.eos_id if eos else None)


def generation(lm, prompt: str, src: str | None, n: int, temperature: float, top_k: int,
               seed: int, eos: bool):
    """``tfviz.generation.generate_with_attention`` on text (ValueError on bad text)."""
    return _generation(*lm.key, prompt, src, n, temperature, top_k, seed, eos, lm)


# ------------------------------------------------------------------------------ figures
@st.cache_resource(max_entries=256, show_spinner=False)
def _figure(name: str, args: tuple, kwargs: dict, _builder):
    return _builder(*args, **kwargs)


def figure(builder, *args, **kwargs):
    """``builder(*args, **kwargs)`` (a ``tfviz.viz`` figure function), built once per server for
    these exact arguments and shared by every session that shows them. Building and validating a
    Plotly figure costs 0.1-1 s of CPU (RoPE's 48-frame animation: 1 s just to copy it out of
    ``st.cache_data``), paid on every rerun of every session before; a shared figure is only read
    (``ui.figures.show`` copies it to restyle it, and builds its CSV only when asked). Arguments
    must be hashable by Streamlit (numpy arrays, DataFrames, plain values: not torch tensors), and
    a caller must never change the figure it gets."""
    return _figure(f"{builder.__module__}.{builder.__qualname__}", args, kwargs, builder)


# At most 128: its largest figures are Compare's every-head grids (12 x 12 heads of 64 tokens:
# ~5 MB each), one per model, input and selected head.
@st.cache_resource(max_entries=128, show_spinner=False)
def _figure_for(name: str, key: tuple, kwargs: dict, _args: tuple, _builder):
    return _builder(*_args, **kwargs)


def figure_for(key: tuple, builder, *args, **kwargs):
    """``figure`` keyed on ``key`` instead of on the arguments: for figures of data that is itself
    cached on a small key (the compared models' paths and mtimes, the input's ids, a layer and
    head), where hashing the data on every rerun cost more than the figure saved (a DataFrame or
    a [layer, head, pos, pos] array: 5-10 ms each, per figure, per session). The builder and the
    keyword arguments (small plain values: a title, "loss" or "accuracy") are part of the key; ``key``
    must determine every positional argument: two calls with the same key, builder and keywords get
    the first call's figure."""
    return _figure_for(f"{builder.__module__}.{builder.__qualname__}", key, kwargs, args, builder)


# ------------------------------------------------------------------------------ no model
@st.cache_resource(max_entries=32, show_spinner=False)  # a figure, shared read-only (see figure)
def _rope_rotation(q_pair: tuple, freq: float, n_pos: int, k_pair: tuple, n: int, pair: int,
                   title: str, start: int | None = None, totals: tuple | None = None):
    from tfviz.viz import rope_rotation_animation

    return rope_rotation_animation(q_pair, freq, range(n_pos), k=k_pair, k_position=n,
                                   pair_index=pair, title=title, start=start, totals=totals)


def rope_rotation(q_vec, k_vec, pair: int, freq: float, n_pos: int, n: int, title: str,
                  dims: tuple[int, int] | None = None, start: int | None = None, totals=None):
    """The RoPE animation of dimension pair ``pair`` of q (placed at positions 0..n_pos-1) and k
    (at ``n``); 48 frames take a while to build, so it is cached by value. ``dims``: the pair's two
    dimensions in the model's convention (``ROTARY_PAIRS[...].pair_dims``; default interleaved
    (2·pair, 2·pair + 1)). ``start``: the position m it opens on; ``totals``: the whole q·k at each
    position (``rope_score_grid``'s column n), said beside the pair's part."""
    a, b = dims if dims is not None else (2 * pair, 2 * pair + 1)
    q, k = ((float(v[a]), float(v[b])) for v in (q_vec, k_vec))
    totals = None if totals is None else tuple(float(x) for x in totals)
    return _rope_rotation(q, float(freq), n_pos, k, n, pair, title, start, totals)


@st.cache_data(show_spinner=False)
def default_corpus() -> str:
    from tfviz.analysis.embeddings import default_corpus as corpus

    return corpus()


@st.cache_resource(max_entries=8, show_spinner="Training the tokenizers…")
def tokenizers(corpus: str, bpe_vocab: int) -> dict:
    """char, word and BPE tokenizers trained on ``corpus`` (once per corpus and size)."""
    from tfviz.analysis.embeddings import train_tokenizers

    return train_tokenizers([corpus], bpe_vocab)


@st.cache_data(show_spinner=False)
def _zoo_cards(folder: str, stamp: tuple) -> dict:
    from tfviz.zoo.cards import read_cards

    return read_cards(folder)


def zoo_cards(folder) -> dict:
    """The shipped zoo's cards (re-read when a checkpoint there changes)."""
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in Path(folder).glob("*.safetensors")))
    return _zoo_cards(str(folder), stamp)
