"""Widgets several pages share: selectors that survive a model change, the layer / head pick,
the query pick. (The text a model reads is ``ui.inputs``; the model picker is ``ui.picker``.)

Streamlit keeps a widget's value under its key across reruns; when the options change (another
model: fewer layers, no cross-attention) a kept value may no longer be an option. These widgets
drop such a value first, so the widget falls back to its default instead of raising.
"""
from __future__ import annotations

from collections.abc import Sequence

import streamlit as st


def forget_on_model_change(lm, scope: str, keys: Sequence[str]) -> bool:
    """Drop ``keys`` from session state when the model differs from the last run of ``scope``
    (a page): another model starts from its own defaults. Returns True when it did."""
    from .links import protected

    marker = f"_{scope}_model"
    if st.session_state.get(marker) == lm.key:
        return False
    for k in keys:
        if not protected(k):  # a value a link just gave is kept (ui.links)
            st.session_state.pop(k, None)
    st.session_state[marker] = lm.key
    return True


def choice(where, label: str, options: Sequence, key: str, default=None, **kw):
    """A selectbox whose kept value is dropped when it is no longer an option (then ``default``,
    or the first option). The box's own default (``index``) is always the value it holds: a
    value written only into session state left the browser showing the first option after a
    later run redrew the box (Compare's "Setting that differs" read "positional scheme" while the
    pair trained pre vs post norm, in about one new tab in four). A value a link gave that is not
    an option is said once (``links.fell_back``)."""
    from .links import fell_back

    options = list(options)
    ss = st.session_state
    dropped = key in ss and ss[key] not in options
    if dropped:
        del ss[key]  # then the box starts again from its default, below
    value = ss[key] if key in ss else (default if default in options else options[0])
    if dropped:
        fell_back(key, value)
    return where.selectbox(label, options, index=options.index(value), key=key, **kw)


def layer_head(cfg, prefix: str, where=None, *, average: bool = False) -> tuple[int, int | None]:
    """Layer and head selectors (keys ``{prefix}_layer`` / ``{prefix}_head``), side by side in
    ``where`` (two columns; default: new columns). ``average`` offers "average" over the heads
    (returned as head None)."""
    cols = where if where is not None else st.columns(2)
    layer = choice(cols[0], "Layer", range(cfg.n_layers), f"{prefix}_layer")
    heads = (["average"] if average else []) + list(range(cfg.n_heads))
    head = choice(cols[1], "Head", heads, f"{prefix}_head")
    return layer, None if head == "average" else head


def query_picker(label: str, key: str, tokens: Sequence[str], default: int,
                 every: bool = False, where=st, positions: Sequence[int] | None = None,
                 follows=None) -> int:
    """A query-position selector ("pos 3 · 'law'"); -1 = every token when ``every``.
    ``positions``: only these positions (default: every one). ``follows``: what the choice
    belongs to (e.g. the sentence): when it changes, the kept choice is dropped and ``default``
    shown — position 16 of another sentence is another token; a value set before the box followed
    anything (a link's, which clears the marker) is kept."""
    options = ([-1] if every else []) + list(range(len(tokens)) if positions is None else positions)
    last = st.session_state.get(f"_{key}_follows")
    if follows is not None and last != follows:
        if last is not None:  # another sentence than the box last showed (none: a link's, or new)
            st.session_state.pop(key, None)
        st.session_state[f"_{key}_follows"] = follows
    return choice(where, label, options, key, default,
                  format_func=lambda i: "every token" if i < 0 else f"pos {i} · '{tokens[i]}'")


def position_slider(where, label: str, lo: int, hi: int, default: int, key: str) -> int:
    """A slider over the positions ``lo``..``hi``. A single position needs no slider (Streamlit
    refuses one whose minimum equals its maximum): that position is said in a caption instead."""
    if hi <= lo:
        where.caption(f"{label}: {lo} (the only one)")
        return lo
    kept = st.session_state.get(key)
    if kept is not None and not lo <= kept <= hi:  # e.g. a shorter text than last run
        st.session_state.pop(key)
        from .links import fell_back

        fell_back(key, f"{min(max(default, lo), hi)}")
    return where.slider(label, lo, hi, min(max(default, lo), hi), key=key)


# ------------------------------------------------------------------------------ attention site, layer, head
def _selection(key: str) -> dict:
    ev = st.session_state.get(key)
    try:
        return dict(ev["selection"]) if ev else {}
    except (KeyError, TypeError):
        return {}


def apply_head_clicks(prefix: str) -> None:
    """A click on a heads-grid tile (chart ``{prefix}_grid``) or a head-table row (dataframe
    ``{prefix}_table``, whose heads ``remember_table_heads`` kept) since the last run becomes the
    (layer, head) selection. Runs before the selectors are drawn; an old click is not re-applied."""
    from tfviz.analysis.explorer import pick_from_points

    ss = st.session_state
    grid = pick_from_points(_selection(f"{prefix}_grid").get("points", []))
    rows = _selection(f"{prefix}_table").get("rows", [])
    heads = ss.get(f"_{prefix}_table_heads") or []
    table = tuple(heads[rows[0]]) if rows and rows[0] < len(heads) else None
    for pick, seen in ((grid, f"_{prefix}_seen_grid"), (table, f"_{prefix}_seen_table")):
        if pick != ss.get(seen):
            ss[seen] = pick
            if pick is not None:
                ss[f"{prefix}_layer"], ss[f"{prefix}_head"] = pick


def remember_table_heads(prefix: str, df) -> None:
    st.session_state[f"_{prefix}_table_heads"] = list(zip(df["layer"].tolist(), df["head"].tolist()))


def site_layer_head(cfg, prefix: str, stacked: bool = False):
    """(site, layer, head): the attention kind (encoder-decoder: encoder self / decoder self /
    cross), layer and head, after applying a click on a grid tile or table row. ``stacked``: one
    under another (in a narrow column), else side by side."""
    from tfviz.analysis.explorer import sites

    apply_head_clicks(prefix)
    all_sites = sites(cfg)
    labels = [s.label for s in all_sites]
    cols = [st] * 3 if stacked else st.columns([3, 1, 1] if len(all_sites) > 1 else [1, 1])
    label = labels[0]
    if len(all_sites) > 1:
        label = cols[0].radio("Attention", labels, key=f"{prefix}_site", horizontal=not stacked)
    layer, head = layer_head(cfg, prefix, cols[-2:])
    return all_sites[labels.index(label)], layer, head



def column_pairs(n: int) -> list:
    """``n`` columns laid out two per row: each chart stays readable at 1024 px."""
    return [c for _ in range((n + 1) // 2) for c in st.columns(2)][:n]


CELL_PX = 470  # two cells a row from a 1440 px screen (main column 980 px), one on a 1024 px one (564)


def chart_cells(n: int, width: int = CELL_PX) -> list:
    """``n`` containers ``width`` px wide in a row that wraps: side by side where the page is wide
    enough, one under another where not (at 1024 px two columns of 274 px cut the charts'
    titles and axis titles). Each is a context manager, like a column."""
    row = st.container(horizontal=True, gap="medium")
    return [row.container(width=width) for _ in range(n)]


def metric_row(*items) -> None:
    """One row of ``st.metric`` boxes: each item (label, value) or (label, value, keywords such
    as help / delta)."""
    for col, item in zip(st.columns(len(items)), items):
        col.metric(item[0], item[1], **(item[2] if len(item) > 2 else {}))


def or_stop(compute, message: str = "{}", show=st.error):
    """``compute()``, or, when it raises ValueError (input the model cannot take: the library's
    message says why), ``message`` with the reason in ``{}`` shown and the page stopped there."""
    try:
        return compute()
    except ValueError as e:
        show(message.format(e))
        st.stop()
