"""Figures into slides (issue 25, item 11): ``tfviz.viz.export`` builds one self-contained HTML
file (plotly.js inlined, nothing from the network) without Streamlit; the app offers it under every
figure and once per page (AppTest here; opened offline in Chromium in
tests/e2e/test_browser_export.py)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
from apptest_helpers import chart, heatmap_z, open_page

from tfviz import viz
from tfviz.viz.export import Slide

TOKENS = ["the", "law", "</script><script>alert(1)</script>", "it"]
P = np.array([[1, 0, 0, 0], [.5, .5, 0, 0], [.2, .3, .5, 0], [.1, .6, .1, .2]])


def _figure_json(page: str, div_id: str) -> list:
    """The data array passed to Plotly.newPlot for the div ``div_id`` in an exported page."""
    m = re.search(r'Plotly\.newPlot\(\s*"' + div_id + r'",\s*(\[.*?\]),\s*\{', page, re.S)
    assert m, f"no Plotly.newPlot for {div_id}"
    return json.loads(m.group(1))


def test_one_figure_is_self_contained_and_holds_its_data():
    fig = viz.head_heatmap(P, TOKENS, TOKENS, title="Layer 0 · head 1<br><sup>coref</sup>")
    page = viz.figure_html(fig, caption="Rows are **queries**, `embed.weight` <i>.")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script src=" not in page and 'src="http' not in page  # nothing loaded from outside
    assert "Plotly.newPlot" in page and len(page) > 3_000_000      # plotly.js itself is inlined
    assert page.count("Plotly.newPlot(") == 1
    data = _figure_json(page, "tfviz-figure-1")
    np.testing.assert_allclose(heatmap_z({"data": data}), P)
    assert "<title>Layer 0 · head 1 coref</title>" in page  # the figure's own title, as text
    assert "Rows are <b>queries</b>, <code>embed.weight</code> &lt;i&gt;." in page
    assert "<script><script>alert" not in page and "</script><script>alert(1)" not in page  # escaped


def test_slides_one_section_per_figure_in_order_escaped():
    figs = [viz.head_heatmap(P, TOKENS, TOKENS, title=f"head {h}") for h in range(3)]
    page = viz.slides_html([Slide(f, t, c) for f, t, c in zip(
        figs, ["first", "<b>second</b>", ""], ["", "caption & more", ""])],
        title="tfviz · Attention explorer", subtitle="Exported")
    assert page.count("Plotly.newPlot(") == 3 and page.count("<section") == 3
    assert page.count("var Plotly") + page.count("Plotly=") >= 1  # the library once, in <head>
    head, body = page.split("</head>", 1)
    assert len(head) > 3_000_000 and len(body) < 200_000           # not inlined again per figure
    assert re.findall(r"<h2>(.*?)</h2>", page) == ["1. first", "2. &lt;b&gt;second&lt;/b&gt;"]
    assert '<a href="#fig3">3. head 2</a>' in page  # untitled: the figure's own (drawn, no heading)
    assert "caption &amp; more" in page
    assert page.index('id="tfviz-figure-1"') < page.index('id="tfviz-figure-2"') < page.index('id="tfviz-figure-3"')
    with pytest.raises(ValueError, match="no figures"):
        viz.slides_html([], title="empty")


def test_attention_page_offers_figure_and_page_downloads(tiny_zoo):
    """Each figure has its CSV and HTML buttons; the sidebar's export button lists the figures
    this run showed, and they are the figures on the page (the HTML is built from them on click)."""
    at = open_page("attention", tiny_zoo["tiny-coref"])
    ids = [b.proto.id for b in at.get("download_button")]
    for key in ("att_heatmap-csv", "att_heatmap-html"):
        assert sum(i.endswith(f"-{key}") for i in ids) == 1, ids
    labels = [b.label for b in at.get("download_button")]
    assert labels[:2] == ["Download data (CSV)", "HTML"]
    export = [b for b in at.sidebar.get("download_button") if b.proto.id.endswith("-page-export-html")]
    assert len(export) == 1 and export[0].label == "Export this page (HTML)"
    remembered = at.session_state["_page_figures"]
    assert list(remembered) == ["att_heatmap"]
    np.testing.assert_allclose(heatmap_z(json.loads(remembered["att_heatmap"].figure.to_json())),
                               heatmap_z(chart(at, "att_heatmap")))
    page = viz.slides_html(list(remembered.values()), title="tfviz · Attention explorer")
    assert page.count("Plotly.newPlot(") == 1

    at.session_state["att_tab"] = "All heads"  # another tab: the export follows what is shown
    at.run()
    assert list(at.session_state["_page_figures"]) == ["att_grid", "att_grid_head"]
    assert [b for b in at.sidebar.get("download_button")
            if b.proto.id.endswith("-page-export-html")][0].help.startswith("The 2 figures")


def test_a_page_without_figures_has_no_export():
    at = open_page()  # Home
    assert not [b for b in at.get("download_button") if b.proto.id.endswith("-page-export-html")]


def test_side_by_side_captions_go_into_the_export(tiny_zoo):
    at = open_page("tokens", tiny_zoo["tiny-coref"])
    slides = at.session_state["_page_figures"]
    onehot = slides["tok_onehot_sim"]
    assert onehot.title == "One-hot vectors: cosine" and onehot.caption.startswith("One-hot: every token")
    page = viz.slides_html(list(slides.values()), title="tfviz · Tokens & embeddings")
    assert "One-hot: every token is its own axis" in page
