"""The text a model reads, the same way on every page: a task example or typed text, tokenized
with the model's tokenizer, wrapped like the task's examples ([BOS] … for a decoder, [CLS] … [SEP]
for an encoder), and fitted to the model — cut to the positions it has (a learned table stops at
max_len) or the page can show, with a warning saying so — never an error from the model.

Another model starts from its own example (the text boxes are reset), so text typed for one model
is never fed to another whose vocabulary or length it does not fit.

Typed text is cut by characters before it is tokenized (``readable``: ``TFVIZ_TEXT_MAX_CHARS``,
fewer for a tokenizer whose rules make a text longer, ``Tokenizer.max_chars``); the text areas
stop there too. Every page that tokenizes typed text goes through ``readable``.
"""
from __future__ import annotations

import streamlit as st

from tfviz.analysis import explorer
from tfviz.analysis.explorer import ModelInput

from . import cache
from .widgets import forget_on_model_change

EXAMPLE, TEXT = "Task example", "Type text"
FIELDS = ("source", "text", "src", "tgt", "example")


def max_chars(tok=None) -> int:
    """The most characters of typed text a page tokenizes with ``tok`` (any tokenizer: None)."""
    from tfviz import limits

    return limits.text_chars() if tok is None else min(limits.text_chars(), tok.max_chars)


def readable(tok, text: str, what: str = "The text") -> str:
    """``text`` cut to ``max_chars(tok)`` characters, with a warning when it was longer (a text
    area stops there, but a value set otherwise, e.g. by a link, may not)."""
    most = max_chars(tok)
    if len(text) > most:
        st.warning(f"{what} has {len(text):,} characters; the first {most:,} are read.")
        return text[:most]
    return text


def _tokens_caption(label: str, tokens: list[str]) -> None:
    shown = " ".join("`" + t.replace("`", "'").replace("\n", "↵") + "`" for t in tokens)
    st.caption(f"{label} — {len(tokens)} tokens: {shown}")


def _fit(tok, text: str, like, limit: int, why: str, what: str):
    # a task's layout, read off its example; without a task (an imported model) the tokenizer's
    # own template: [CLS] … [SEP] for BERT, <s> … for Llama, nothing for GPT-2
    prefix, suffix = explorer.layout_of(like, tok.special_ids) if like is not None else \
        explorer.template_layout(tok)
    text = readable(tok, text, what)
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


def _example(choices, prefix: str, tok, limit: int, why: str) -> ModelInput:
    i = st.selectbox("Example", range(len(choices)), key=f"{prefix}_example",
                     format_func=lambda i: choices[i][0][:110])
    e = choices[i][1]
    ids, src = list(e.tokens)[:limit], None if e.src is None else list(e.src)[:limit]
    if len(e.tokens) > limit or (e.src is not None and len(e.src) > limit):
        st.warning(f"This example is longer than {limit} tokens; cut: {why}.")
    names = tok.tokens_of if tok else (lambda xs: [str(x) for x in xs])
    return ModelInput(ids, names(ids), src, None if src is None else names(src), dict(e.meta))


def _typed(lm, prefix: str, like, limit: int, why: str, labels: tuple[str, str]) -> ModelInput | None:
    tok, ss = lm.tokenizer, st.session_state
    text, src_text = cache.default_texts(lm)
    if lm.config.arch == "encoder-decoder":
        ss.setdefault(f"{prefix}_src", src_text)
        ss.setdefault(f"{prefix}_tgt", text)
        st.text_input("Source (encoder input)", key=f"{prefix}_src", max_chars=max_chars(tok))
        st.text_input("Target so far (decoder input)", key=f"{prefix}_tgt", max_chars=max_chars(tok))
        ps = _fit(tok, ss[f"{prefix}_src"], like and like.src, limit, why, "The source")
        pt = _fit(tok, ss[f"{prefix}_tgt"], like and like.tokens, limit, why, "The target") if ps else None
        return None if ps is None or pt is None else ModelInput(pt.ids, pt.tokens, ps.ids, ps.tokens)
    ss.setdefault(f"{prefix}_text", text)
    st.text_area(labels[0], key=f"{prefix}_text", height=80, max_chars=max_chars(tok),
                 help=f"Tokenized with the model's {tok.kind} tokenizer; at most {limit} tokens.")
    p = _fit(tok, ss[f"{prefix}_text"], like and like.tokens, limit, why, labels[1])
    return None if p is None else ModelInput(p.ids, p.tokens)


def model_input(lm, prefix: str, *, examples: bool = True, cap: int = explorer.READABLE_MAX,
                cap_why: str | None = None, label: str = "Text") -> ModelInput | None:
    """The input widgets (keys ``{prefix}_source`` / ``_text`` / ``_src`` / ``_tgt`` /
    ``_example``); returns the input to show, or None after a message saying why there is none.
    ``examples``: offer the task's examples beside typed text. ``cap``: the most tokens this page
    shows (``cap_why`` says why); the model's own limit applies too."""
    forget_on_model_change(lm, f"{prefix}_input", [f"{prefix}_{k}" for k in FIELDS])
    tok = lm.tokenizer
    choices = explorer.example_choices(cache.task_of(lm)) if examples else []
    limit, why = explorer.length_limit(lm.config, cap)
    if limit == cap and cap_why:
        why = cap_why
    sources = ([EXAMPLE] if choices else []) + ([TEXT] if tok is not None else [])
    if not sources:
        st.warning("This checkpoint has neither a tokenizer nor a task: there is no input to show.")
        return None
    default = TEXT if lm.task_name == "induction" or not choices else EXAMPLE
    if st.session_state.get(f"{prefix}_source") not in sources:
        st.session_state[f"{prefix}_source"] = default if default in sources else sources[0]
    source = st.radio("Input", sources, key=f"{prefix}_source", horizontal=True) \
        if len(sources) > 1 else sources[0]
    like = explorer.example_choices(cache.task_of(lm), 1)
    like = like[0][1] if like else None
    out = _example(choices, prefix, tok, limit, why) if source == EXAMPLE else \
        _typed(lm, prefix, like, limit, why, (label, f"The {label.lower()}"))
    if out is not None and out.src_tokens is not None:
        _tokens_caption("Source", out.src_tokens)
        _tokens_caption("Target", out.tokens)
    elif out is not None:
        _tokens_caption("Input", out.tokens)
    return out
