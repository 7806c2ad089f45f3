"""The Attention explorer in a real browser: open it, pick a model, switch heads, click a tile of
the all-heads grid, step through a query. Prints p50/p95 of first render and of a head switch.
"""
from __future__ import annotations

import statistics
import time

from browser_helpers import chart_title, nav, select, settle
from playwright.sync_api import expect

MODEL = "tiny-coref (shipped)"


def _pct(values: list[float]) -> tuple[float, float]:
    values = sorted(values)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return statistics.median(values), p95


def test_attention_explorer(page, open_page, timings) -> None:
    open_page(page, "/")
    sidebar = page.locator("[data-testid='stSidebar']")
    link = page.locator("[data-testid='stSidebarNav'] a", has_text="Attention explorer")
    t0 = time.perf_counter()
    link.click()  # cold: imports torch, loads the model, builds the task's examples, records
    chart_title(page, "layer 0 · head 0")
    cold = time.perf_counter() - t0

    # the sidebar picker: an encoder-decoder (its cross-attention), then the coref model
    select(page, sidebar, "Model", "tiny-translate (shipped)")
    expect(page.get_by_text("Source — 8 tokens")).to_be_visible()
    page.get_by_text("cross-attention", exact=True).click()
    chart_title(page, "cross-attention · layer 0 · head 0")
    select(page, sidebar, "Model", MODEL)
    chart_title(page, "self-attention (causal) · layer 0 · head 0")
    expect(page.get_by_text("Input — 17 tokens")).to_be_visible()  # mission sentence 1

    firsts = []
    for _ in range(5):  # warm first renders: Home, then back to the explorer
        nav(page, "Home")
        expect(page.get_by_role("heading", name="tfviz")).to_be_visible()
        expect(page.locator(".js-plotly-plot")).to_have_count(0)  # the explorer is gone
        settle(page)
        t0 = time.perf_counter()
        link.click()
        chart_title(page, "layer 0 · head 0")
        firsts.append(time.perf_counter() - t0)
    expect(page.get_by_role("heading", name="Attention explorer")).to_be_visible()

    switches = []
    for head in [1, 2, 3, 0, 1, 2, 3, 0, 1, 2]:  # the main control: switch heads (one recording)
        t0 = select(page, page, "Head", str(head))
        chart_title(page, f"layer 0 · head {head}")
        switches.append(time.perf_counter() - t0)
    select(page, page, "Layer", "1")
    chart_title(page, "layer 1 · head 2")

    # All heads: a click on a tile's centre selects that head (layer 0, head 3)
    page.get_by_role("tab", name="All heads").click()
    chart_title(page, "every layer × head")
    grid = page.locator(".js-plotly-plot").first
    marker = grid.locator("g.trace.scatter path.point").nth(0 * 4 + 3)  # [layer, head] order
    marker.scroll_into_view_if_needed()  # mouse clicks land only inside the viewport
    box = marker.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    chart_title(page, "layer 0 · head 3")
    expect(page.get_by_role("combobox", name="Head")).to_have_value("3")  # the selector follows
    expect(page.get_by_role("combobox", name="Layer")).to_have_value("0")

    page.get_by_role("tab", name="Step-through").click()
    settle(page)
    expect(page.get_by_text("✓ softmax = recorded hook_pattern row")).to_be_visible()
    page.get_by_role("tab", name="Pronoun probe").click()
    chart_title(page, "Where does")
    expect(page.get_by_text("'law'").first).to_be_visible()
    page.get_by_role("tab", name="Heatmap").click()
    chart_title(page, "layer 0 · head 3")

    p50, p95 = _pct(firsts)
    s50, s95 = _pct(switches)
    timings["attention_cold_first_render_s"] = round(cold, 2)
    timings["attention_first_render_p50_s"] = round(p50, 2)
    timings["attention_first_render_p95_s"] = round(p95, 2)
    timings["attention_head_switch_p50_s"] = round(s50, 2)
    timings["attention_head_switch_p95_s"] = round(s95, 2)
    print(f"\nattention first render: cold {cold:.2f} s; warm p50 {p50:.2f} s, p95 {p95:.2f} s "
          "(target <= 2 s)")
    print(f"attention head switch: p50 {s50:.2f} s, p95 {s95:.2f} s (target <= 0.5 s)")
