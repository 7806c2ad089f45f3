"""The Attention explorer's Effects tab in a real browser: the layer x head heatmap of every head
switched off draws, with the chosen head outlined and its exact numbers in the hover; switching
heads re-reads the stored grid (no second computation)."""
from __future__ import annotations

import time

from browser_helpers import (SCREENSHOTS, apart, chart_title, nav, plot_layout, rerun, select, settle,
                             title_problems)
from playwright.sync_api import expect

MODEL = "tiny-coref (shipped)"


def test_effect_heatmap(page, open_page, timings) -> None:
    open_page(page, "/")
    sidebar = page.locator("[data-testid='stSidebar']")
    nav(page, "Attention explorer")
    chart_title(page, "layer 0 · head 0")
    select(page, sidebar, "Model", MODEL)
    chart_title(page, "layer 0 · head 0")
    t0 = time.perf_counter()
    page.get_by_role("tab", name="Effects").click()
    chart_title(page, "each head off")
    first = time.perf_counter() - t0
    heatmap = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="each head off")).first
    layout = plot_layout(heatmap)
    assert layout["svg"]["left"] <= layout["title"]["left"] <= layout["title"]["right"] <= layout["svg"]["right"]
    heatmap.scroll_into_view_if_needed()
    heatmap.locator(".nsewdrag").first.hover()  # the plot area's centre: a cell's hover
    expect(heatmap.locator(".hoverlayer").get_by_text("unchanged").first).to_be_visible()  # exact values
    expect(page.get_by_text("Pattern vs effect").first).to_be_visible()
    expect(page.get_by_text("Switching L0H0 off").first).to_be_attached()

    t0 = select(page, page, "Head", "2")
    expect(page.get_by_text("Switching L0H2 off").first).to_be_attached()
    settle(page)
    switch = time.perf_counter() - t0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "effects.png"), full_page=True)
    timings["effects_first_s"], timings["effects_switch_s"] = round(first, 2), round(switch, 2)
    print(f"effects tab: first heatmap {first:.2f} s, head switch {switch:.2f} s")


LABEL_BOXES = """(el) => [...el.querySelectorAll('g.textpoint text')].filter(e => e.textContent.trim())
    .map(e => { const r = e.getBoundingClientRect();
                return {text: e.textContent, left: r.left, top: r.top, right: r.right, bottom: r.bottom}; })"""


def test_effects_readable_at_1024_and_1440(page, open_page) -> None:
    """Issue 30, item 6: at 1024 px the Effects charts (two columns of 274 px) had their titles and
    axis titles cut, the pattern-vs-effect labels ran into blobs (at 1440 px too), the logit lens
    printed its words tiny, and a heads-off set "L0H0+L0H0" was taken without a word. At both
    widths: every chart's title inside it and clear of its axis titles, no two head labels
    overlap, the lens's words at 12 px, the repeated head refused with a message."""
    sidebar = page.locator("[data-testid='stSidebar']")
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        open_page(page, "/attention")
        select(page, sidebar, "Model", MODEL)
        chart_title(page, "layer 0 · head 0")
        page.get_by_role("tab", name="Effects").click()
        chart_title(page, "Pattern vs effect")
        problems = []
        for plot in page.locator(".js-plotly-plot").all():
            plot.scroll_into_view_if_needed()
            problems += title_problems(plot)
        scatter = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Pattern vs effect")).first
        scatter.scroll_into_view_if_needed()
        labels = scatter.evaluate(LABEL_BOXES)
        clash = [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:] if not apart(a, b)]
        page.screenshot(path=str(SCREENSHOTS / f"effects_heads_off_{width}.png"), full_page=True)
        assert labels and not clash and not problems, (width, clash, problems)

        box = page.get_by_label("Switch several heads off together", exact=True).and_(page.locator("input"))
        box.fill("L0H0+L0H0")
        rerun(page, lambda: box.press("Enter"))
        expect(page.get_by_text("L0H0 is in the set twice")).to_be_visible()

        rerun(page, page.locator("[data-testid='stRadio'] label").filter(has_text="Logit lens").first.click)
        chart_title(page, "Logit lens")
        lens = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="Logit lens")).first
        lens.scroll_into_view_if_needed()
        layout = plot_layout(lens)
        assert layout["cells"] and min(layout["cells"]) >= 12, layout["cells"][:5]
        assert not title_problems(lens)
        lens.screenshot(path=str(SCREENSHOTS / f"effects_lens_{width}.png"))
