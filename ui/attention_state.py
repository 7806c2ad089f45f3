"""Streamlit state for the Attention explorer (app_pages/attention.py).

- the input panel: typed text (tokenized with the model's tokenizer, wrapped like the task's
  examples) or a task example; warnings for empty text, unknown words and over-long inputs;
- one recording per input, cached (``st.cache_data``) on model path + mtime + token ids, so that
  switching layer / head only re-slices numpy arrays;
- the per-head score table, cached per model and attention site;
- one (layer, head) pick shared by the selectors, a click in the heads grid and a row of the
  head table: clicks are applied *before* the selectors are drawn on the next run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import streamlit as st

from tfviz.analysis import explorer

# Widget keys that belong to one model: cleared when another model is picked.
MODEL_KEYS = ("att_source", "att_text", "att_src", "att_tgt", "att_example", "att_site",
              "att_layer", "att_head", "att_query", "lines_query", "lines_orientation",
              "probe_source", "probe_query", "_att_seen_grid", "_att_seen_table",
              "_att_table_heads")
EXAMPLE, TEXT = "Task example", "Type text"
N_EXAMPLES = 200  # validation examples offered in the example picker


@dataclass
class ExplorerInput:
    """One input: token ids (decoder / single stack), src ids (encoder-decoder), their display
    tokens, and the task example's meta when it came from one."""

    ids: list[int]
    tokens: list[str]
    src_ids: list[int] | None = None
    src_tokens: list[str] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def key(self) -> tuple:
        return (tuple(self.ids),) if self.src_ids is None else (tuple(self.src_ids), tuple(self.ids))

    def side(self, name: str) -> list[str]:
        return self.src_tokens if name == "src" else self.tokens

    @property
    def query(self) -> int:
        """The position worth stepping through by default: a coref example's pronoun query,
        else the last token."""
        q = self.meta.get("query_index")
        return int(q) if isinstance(q, int) and q < len(self.ids) else len(self.ids) - 1

    @property
    def alignment(self) -> list[tuple[int, int]] | None:
        """(target query pos, source pos) pairs of a translate example (meta "alignment")."""
        pairs = self.meta.get("alignment")
        return None if not pairs or self.src_ids is None else [(int(q), int(s)) for s, q in pairs]


def _mtime(loaded) -> int:
    try:
        return Path(loaded.ref.path).stat().st_mtime_ns
    except OSError:
        return 0


def task_name(loaded) -> str | None:
    return (loaded.ckpt.task or {}).get("name")


def task_of(loaded):
    """The model's task (shared by the whole server), or None when it has none or it no longer builds."""
    try:
        with st.spinner("Building the task's examples…"):
            task = loaded.ckpt.shared_task()
            task.examples("validation")  # generate now, once per server
        return task
    except Exception:  # noqa: BLE001  (no task, or one this version cannot rebuild)
        return None


def examples_of(loaded) -> list[tuple[str, object]]:
    """(label, Example) pairs: for coref the two mission sentences first, then validation."""
    task = task_of(loaded)
    if task is None:
        return []
    out = []
    if hasattr(task, "mission_sentences"):
        out += [(f"mission sentence {i + 1}: {e.text}", e)
                for i, e in enumerate(task.mission_sentences())]
    out += [(f"validation #{i}: {e.text}", e)
            for i, e in enumerate(task.examples("validation")[:N_EXAMPLES])]
    return out


# ------------------------------------------------------------------------------ recording
@st.cache_data(max_entries=24, show_spinner="Recording the forward pass…")
def _record(path: str, mtime: int, inputs: tuple, _loaded) -> dict[str, np.ndarray]:
    import torch

    tensors = [torch.tensor([list(x)], dtype=torch.long) for x in inputs]
    return explorer.to_numpy(_loaded.record(*tensors, names=explorer.is_attention_name))


def recorded(loaded, inputs: tuple) -> dict[str, np.ndarray] | None:
    """Every attention tensor of one forward on ``inputs`` (cached); None + an error on bad input."""
    try:
        return _record(loaded.ref.path, _mtime(loaded), inputs, loaded)
    except ValueError as e:
        st.error(f"The model cannot run on this input: {e}")
        return None


@st.cache_data(max_entries=24, show_spinner="Scoring every head…")
def _head_table(path: str, mtime: int, site_label: str, _loaded):
    site = next(s for s in explorer.sites(_loaded.config) if s.label == site_label)
    task = task_of(_loaded)
    with _loaded.lock:  # score_model runs the shared model: hold its lock like LoadedModel.record
        return explorer.head_table(_loaded.model, task, site)


def head_table(loaded, site):
    """The per-head score table of ``site`` (ValueError with a reason when it cannot be made)."""
    return _head_table(loaded.ref.path, _mtime(loaded), site.label, loaded)


# ------------------------------------------------------------------------------ input panel
def reset_on_model_change(path: str) -> None:
    if st.session_state.get("_att_for") != path:
        for k in MODEL_KEYS:
            st.session_state.pop(k, None)
        st.session_state["_att_for"] = path


def _default_text(loaded, examples) -> tuple[str, str]:
    """(text, src text) for the text boxes: an induction probe for induction models, else the
    first example (for coref: mission sentence 1)."""
    from tfviz.analysis import induction_probe

    tok, cfg = loaded.tokenizer, loaded.config
    if task_name(loaded) == "induction" and tok is not None:
        half = max(1, min(16, (cfg.max_len - 1) // 2))
        text = explorer.probe_text(tok, induction_probe(min(cfg.vocab_size, tok.vocab_size), half,
                                                        batch=1)[0, 1:].tolist())
        if text:
            return text, ""
    if examples:
        e = examples[0][1]
        if e.src is not None:
            return e.meta.get("target") or tok.decode(e.tokens, skip_special=True), e.text
        return e.text, ""
    return "the cat sat on the mat .", "the cat sat on the mat ."


def _tokens_caption(label: str, tokens: list[str]) -> None:
    shown = " ".join("`" + t.replace("`", "'").replace("\n", "↵") + "`" for t in tokens)
    st.caption(f"{label} — {len(tokens)} tokens: {shown}")


def _from_text(tok, text: str, like, limit: int, why: str, what: str):
    prefix, suffix = explorer.layout_of(like, tok.special_ids)
    try:
        p = explorer.prepare_text(tok, text, prefix, suffix, limit)
    except ValueError as e:
        st.warning(f"{what}: {e}")
        return None
    if p.unknown:
        st.warning(f"{what}: not in this model's vocabulary (read as [UNK]): "
                   + ", ".join(f"'{w}'" for w in p.unknown))
    if p.truncated_from:
        st.warning(f"{what} has {p.truncated_from} tokens; showing the first {limit}: {why}.")
    return p


def input_panel(loaded) -> ExplorerInput | None:
    """The input widgets; returns the input to record, or None after showing why there is none."""
    tok, cfg = loaded.tokenizer, loaded.config
    examples = examples_of(loaded)
    limit, why = explorer.length_limit(cfg)
    sources = ([EXAMPLE] if examples else []) + ([TEXT] if tok is not None else [])
    if not sources:
        st.warning("This checkpoint has neither a tokenizer nor a task: there is no input to show.")
        return None
    default = TEXT if task_name(loaded) == "induction" or not examples else EXAMPLE
    if st.session_state.get("att_source") not in sources:
        st.session_state["att_source"] = default if default in sources else sources[0]
    source = st.radio("Input", sources, key="att_source", horizontal=True)
    if source == EXAMPLE:
        i = st.selectbox("Example", range(len(examples)), key="att_example",
                         format_func=lambda i: examples[i][0][:110])
        e = examples[i][1]
        ids, src = list(e.tokens)[:limit], None if e.src is None else list(e.src)[:limit]
        if len(e.tokens) > limit or (e.src is not None and len(e.src) > limit):
            st.warning(f"This example is longer than {limit} tokens; cut: {why}.")
        out = ExplorerInput(ids, tok.tokens_of(ids) if tok else [str(i) for i in ids],
                            src, None if src is None else tok.tokens_of(src), dict(e.meta))
    else:
        like = examples[0][1] if examples else None
        text, src_text = _default_text(loaded, examples)
        if cfg.arch == "encoder-decoder":
            st.session_state.setdefault("att_src", src_text)
            st.session_state.setdefault("att_tgt", text)
            st.text_input("Source (encoder input)", key="att_src")
            st.text_input("Target so far (decoder input)", key="att_tgt")
            ps = _from_text(tok, st.session_state["att_src"], like and like.src, limit, why,
                            "The source")
            pt = _from_text(tok, st.session_state["att_tgt"], like and like.tokens, limit, why,
                            "The target") if ps else None
            if ps is None or pt is None:
                return None
            out = ExplorerInput(pt.ids, pt.tokens, ps.ids, ps.tokens)
        else:
            st.session_state.setdefault("att_text", text)
            st.text_area("Text", key="att_text", height=80,
                         help=f"Tokenized with the model's {tok.kind} tokenizer; at most {limit} "
                              "tokens.")
            p = _from_text(tok, st.session_state["att_text"], like and like.tokens, limit, why,
                           "The text")
            if p is None:
                return None
            out = ExplorerInput(p.ids, p.tokens)
    if out.src_tokens is not None:
        _tokens_caption("Source", out.src_tokens)
        _tokens_caption("Target", out.tokens)
    else:
        _tokens_caption("Input", out.tokens)
    return out


# ------------------------------------------------------------------------------ the head pick
def _event_selection(key: str) -> dict:
    ev = st.session_state.get(key)
    try:
        return dict(ev["selection"]) if ev else {}
    except (KeyError, TypeError):
        return {}


def apply_picks() -> None:
    """A click on a heads-grid tile or a head-table row since the last run becomes the
    (layer, head) selection. Must run before the selectors are drawn."""
    grid = explorer.pick_from_points(_event_selection("att_grid").get("points", []))
    rows = _event_selection("att_table").get("rows", [])
    heads = st.session_state.get("_att_table_heads") or []
    table = tuple(heads[rows[0]]) if rows and rows[0] < len(heads) else None
    for pick, seen in ((grid, "_att_seen_grid"), (table, "_att_seen_table")):
        if pick != st.session_state.get(seen):
            st.session_state[seen] = pick
            if pick is not None:
                st.session_state["att_layer"], st.session_state["att_head"] = pick


def remember_table(df) -> None:
    st.session_state["_att_table_heads"] = list(zip(df["layer"].tolist(), df["head"].tolist()))


def head_picker(cfg) -> tuple[explorer.Site, int, int]:
    """Site (encoder-decoder: encoder self / decoder self / cross), layer and head selectors."""
    apply_picks()
    all_sites = explorer.sites(cfg)
    labels = [s.label for s in all_sites]
    for key, n in (("att_layer", cfg.n_layers), ("att_head", cfg.n_heads)):
        if st.session_state.get(key) not in range(n):
            st.session_state[key] = 0
    cols = st.columns([3, 1, 1] if len(all_sites) > 1 else [1, 1])
    if len(all_sites) > 1:
        label = cols[0].radio("Attention", labels, key="att_site", horizontal=True)
    else:
        label = labels[0]
    layer = cols[-2].selectbox("Layer", range(cfg.n_layers), key="att_layer")
    head = cols[-1].selectbox("Head", range(cfg.n_heads), key="att_head")
    return all_sites[labels.index(label)], layer, head


def query_picker(label: str, key: str, tokens: list[str], default: int,
                 every: bool = False, where=st) -> int:
    """A query-position selector ("pos 3 · 'law'"); -1 = every token when ``every``."""
    options = ([-1] if every else []) + list(range(len(tokens)))
    if st.session_state.get(key) not in options:
        st.session_state[key] = default
    return where.selectbox(label, options, key=key,
                           format_func=lambda i: "every token" if i < 0 else
                           f"pos {i} · '{tokens[i]}'")
