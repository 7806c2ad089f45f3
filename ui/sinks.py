"""The Masks page's attention-sink section (``tfviz.analysis.sinks``): where each head parks its
attention, and the loss far past the training length under a window, the window plus the first
tokens, and recomputation. Measured live on the picked language model (or the shipped sink
model when the picked one was not trained on the built-in text), cached per model and window."""
from __future__ import annotations

import streamlit as st

from tfviz.analysis import sinks
from tfviz.viz import sink_share_heatmap, streaming_curves

from .cache import zoo_cards
from .figures import show
from .models import zoo_model

SHIPPED = "lm-bos"  # the zoo model trained for sinks: [BOS] opens every window (tfviz.zoo.specs)


@st.cache_data(max_entries=16, show_spinner=False)
def _report(path: str, mtime: int, window: int | None, _lm) -> dict:
    with _lm.lock:
        return sinks.sink_report(_lm.model, _lm.tokenizer, _lm.ckpt.task or {}, window=window,
                                 label=_lm.ref.label)


def report(lm, window: int | None = None) -> dict:
    """``sinks.sink_report`` of a shared model, computed once per server per (model, window)."""
    return _report(*lm.key, window, lm)


def cards_in_zoo() -> dict:
    from tfviz.paths import zoo_dir

    return zoo_cards(zoo_dir())


def windows(lm) -> list[int]:
    """The windows a page offers for ``lm`` (trained on the built-in text): a quarter, a half and all
    but one of its training length."""
    length = sinks.text_setting(lm.ckpt.task)[0]
    return sorted({max(1, length // 4), max(1, length // 2), length - 1})


def default_window(lm) -> int:
    """Half the training length: the paper's caches are half their models' training length."""
    return max(1, sinks.text_setting(lm.ckpt.task)[0] // 2)


def applies(lm) -> bool:
    return lm.config.arch == "decoder" and sinks.text_setting(lm.ckpt.task) is not None


def section(lm) -> None:
    """Everything the section shows, for the picked model ``lm`` (or the shipped sink model)."""
    st.subheader("Attention sinks: a window over text 8× the training length")
    st.caption("StreamingLLM (Xiao et al. 2023): trained language models park much of their "
               "attention on the first tokens. Evict them with a sliding window and the loss can "
               "blow up; keep a few (\"attention sinks\") and it stays close to recomputing the "
               "window from scratch. Measured here on fresh sentences of the built-in grammar.")
    card = cards_in_zoo().get(SHIPPED)
    if card and card.get("finding", {}).get("story"):
        st.markdown(f"**card** (measured when the zoo was built): {card['finding']['story']['sentence']}")
    if not st.toggle("Measure it live (fresh text, about 10 s on a laptop CPU)", key="sink_live"):
        return
    m = lm if applies(lm) else zoo_model(SHIPPED)
    if m is None:
        return
    if m is not lm:
        st.info(f"**{lm.ref.label}** was not trained on the built-in text, so this section measures "
                f"the shipped **{m.ref.label}** (pick another language model in the sidebar to "
                "measure it instead).")
    length = sinks.text_setting(m.ckpt.task)[0]
    choices, default = windows(m), default_window(m)
    if st.session_state.get("sink_window") not in (None, *choices):  # a link's, or another model's
        st.session_state.pop("sink_window")
        from .links import fell_back

        fell_back("sink_window", default)
    window = st.select_slider("window w (keys i − w … i)", choices, default, key="sink_window",
                              help="The paper's caches are half their models' training length")
    with st.spinner(f"Measuring {m.ref.label} on fresh text ({sinks.FACTOR} × {length} tokens)…"):
        try:
            r = report(m, window)
        except ValueError as e:
            st.warning(str(e))
            return
    s = r["settings"]
    show(sink_share_heatmap(r["shares"], tuple(s["first"]),
                            title=f"{m.ref.label}: share of attention on the first tokens (live)"),
         key="sink_shares", data=r["shares"], filename="attention-sinks")
    show(streaming_curves(r["curves"], train_length=s["train_length"], window=s["window"],
                          title=f"{m.ref.label}: loss per position on {s['tokens']} tokens (live)"),
         key="sink_curves", data=r["curves"], filename="streaming-loss")
    st.dataframe(r["segments"].drop(columns="condition").round(3), hide_index=True, key="sink_table")
    st.markdown(r["story"]["sentence"])
    st.caption(f"{s['sequences']} sequences of fresh text (grammar seed {s['seed']}), "
               f"{'each opening with [BOS], ' if s['bos'] else ''}shares over queries ≥ "
               f"{sinks.MIN_QUERY} of {s['train_length']}-token sequences. **The paper:** "
               f"{sinks.PAPER}")


__all__ = ["SHIPPED", "applies", "default_window", "report", "section", "windows"]
