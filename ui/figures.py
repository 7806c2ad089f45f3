"""Show a figure the one tfviz way: themed, full width, PNG from the modebar, CSV of its data, and
a self-contained HTML file of it (plotly.js inlined: opens offline, interactive; for slides).

Every figure a page shows in a script run is remembered (session state, reset when a page starts:
``run_page``), so one button exports the page's figures as one HTML file a teacher can open in
class without the server (``page_export``). Files are built only when their button is clicked
(``st.download_button`` with a callable): inlining plotly.js makes each about 4.8 MB."""
from __future__ import annotations

import io
import re
from datetime import datetime, timezone

import numpy as np
import streamlit as st

from tfviz.viz import Slide, apply_theme, figure_data, figure_html, figure_title, slides_html


def _viewer_uses_dark_theme() -> bool:
    theme = getattr(st.context, "theme", None)  # the theme this browser is showing
    return getattr(theme, "type", None) == "dark"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-").lower() or "figure"


_CHARTS_DRAWN = "_charts_drawn"  # session state: this browser tab has drawn a Plotly chart


def charts_later() -> bool:
    """True when this run should leave its charts out: the browser tab has not drawn a Plotly
    chart yet. A new tab loads Plotly's 4.7 MB script, and every element of the page waits for
    it as a grey skeleton (measured, reopening /train: the script run ended after 1 s, the runs
    list appeared after 9–15 s on a loaded 2-core machine; 3–4 s without the charts). So such a
    run draws everything else, and the browser asks for the charts about a second later (a
    fragment tick): a page's widgets never wait on Plotly. Later runs of the tab draw charts
    at once."""
    ss = st.session_state
    if ss.get(_CHARTS_DRAWN):
        return False

    def ask_for_charts() -> None:
        ss["_charts_ticks"] = ss.get("_charts_ticks", 0) + 1
        if ss["_charts_ticks"] > 1:  # not the run that drew the page: a tick from the browser
            ss[_CHARTS_DRAWN] = True
            ss.pop("_charts_ticks")
            st.rerun(scope="app")

    st.fragment(ask_for_charts, run_every=1)()
    return True


def show(fig, key: str, *, data=None, filename: str | None = None, on_select=None,
         caption: str | None = None, height: str | int = "content", downloads: bool = True):
    """Render ``fig`` with tfviz's own theme (``theme=None``), a PNG button in the modebar, a CSV
    download of ``data`` (a DataFrame, or a function returning one, called only when the button is
    clicked; default: the figure's own data in long form) and an HTML download of the figure.
    ``caption``: written under the figure in the page export (the page shows its own captions).
    ``height``: Streamlit's (``"stretch"``: the height of the container it is drawn in, e.g. a
    presented lesson step's, sized to the viewport); ``downloads=False``: no download buttons
    (a projector). Returns the chart's selection state when ``on_select`` is given."""
    name = _slug(filename or key)
    light = fig  # exports keep the light theme: a slide or a printout
    if _viewer_uses_dark_theme():  # light ink on a dark page; a copy, figures may be cached
        fig = apply_theme(type(fig)(fig), dark=True)
    config = {"displaylogo": False,
              "toImageButtonOptions": {"format": "png", "filename": name, "scale": 2}}
    kwargs = dict(theme=None, width="stretch", height=height, key=key, config=config)
    if on_select is not None:
        kwargs["on_select"] = on_select
    event = st.plotly_chart(fig, **kwargs)
    st.session_state[_CHARTS_DRAWN] = True
    title = figure_title(light) or (filename or key)
    _remember(key, Slide(light, title, caption or ""))
    if not downloads:
        return event

    def csv() -> bytes:  # built when the button is clicked: a figure's long-form table took up to
        # 4.5 s per render (RoPE's 48 frames), for every session, every rerun
        frame = figure_data(fig) if data is None else data() if callable(data) else data
        return frame.to_csv(index=False).encode()

    def page() -> bytes:  # built when clicked: plotly.js inlined is ~4.7 MB
        return figure_html(light, title=title, caption=caption or "", subtitle=_exported()).encode()

    with st.container(horizontal=True, gap="small"):
        st.download_button("Download data (CSV)", csv, f"{name}.csv", "text/csv", key=f"{key}-csv",
                           icon=":material/download:")
        st.download_button("HTML", page, f"{name}.html", "text/html", key=f"{key}-html",
                           icon=":material/download:", on_click="ignore",  # short: one row at 1024 px
                           help="Download this figure as one interactive HTML file: it opens "
                                "offline in any browser (hover, zoom), for slides.")
    return event


_PAGE_FIGURES = "_page_figures"  # session state: key -> Slide, the figures this page run showed


def _remember(key: str, slide: Slide) -> None:
    st.session_state.setdefault(_PAGE_FIGURES, {})[key] = slide  # a fragment's rerun replaces its own


def _exported() -> str:
    return f"Exported from tfviz on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"


def run_page(page) -> None:
    """Run a page of ``st.navigation`` (app.py), then offer its figures as one HTML file."""
    st.session_state[_PAGE_FIGURES] = {}
    page.run()
    page_export(page.title)


def page_export(title: str) -> None:
    """The sidebar's "Export this page" button: every figure this run of the page showed, in
    page order, as one self-contained HTML file (built when clicked). Nothing when none was shown."""
    slides = st.session_state.get(_PAGE_FIGURES) or {}
    if not slides:
        return

    def build() -> bytes:  # the dict, not a copy: a fragment's later run updates its figures
        return slides_html(list(slides.values()), title=f"tfviz · {title}", subtitle=_exported()).encode()

    n = len(slides)
    st.sidebar.download_button(
        "Export this page (HTML)", build, f"tfviz-{_slug(title)}.html", "text/html",
        key="page-export-html", icon=":material/slideshow:", on_click="ignore",
        help=f"{'The ' + str(n) + ' figures' if n > 1 else 'The figure'} on this page as one HTML "
             "file with titles and captions: it opens offline in any browser, without this server, "
             "and stays interactive — for class or slides.")


def npz_download(tensors: dict, key: str, filename: str = "recording.npz") -> None:
    """Offer recorded tensors (name -> tensor/array) as one NumPy .npz file, in an expander that
    lists their names and shapes. The file is built only when the button is clicked (compressing
    MBs of tensors on every rerun cost ~0.3 s)."""
    def build() -> bytes:
        buf = io.BytesIO()
        np.savez_compressed(buf, **{k: np.asarray(v.float() if hasattr(v, "float") else v)
                                    for k, v in tensors.items()})
        return buf.getvalue()

    with st.expander("Download the recorded tensors"):
        st.caption(", ".join(f"{k} {list(v.shape)}" for k, v in list(tensors.items())[:12])
                   + (" …" if len(tensors) > 12 else ""))
        st.download_button("Download recorded tensors (NPZ)", build, filename,
                           "application/octet-stream", key=f"{key}-npz", icon=":material/download:")


def side_by_side(*figures) -> None:
    """Figures in equal columns, each ``(figure, key)``, ``(figure, key, caption)`` or
    ``(figure, key, caption or None, data)`` (``data``: the CSV download, as in ``show``)."""
    for col, (fig, key, *rest) in zip(st.columns(len(figures)), figures):
        caption, data = (rest + [None, None])[:2]
        with col:
            show(fig, key, data=data, caption=caption)
            if caption:
                st.caption(caption)
