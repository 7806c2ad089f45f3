"""The Attention explorer's Effects tab in a real browser: the layer x head heatmap of every head
switched off draws, with the chosen head outlined and its exact numbers in the hover; switching
heads re-reads the stored grid (no second computation)."""
from __future__ import annotations

import time

from browser_helpers import SCREENSHOTS, chart_title, nav, plot_layout, select, settle
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
