"""The Effects tab's issue-36 additions in a real browser: each head's change with its interval
(error bars, exact numbers in the hover), and the chosen head's weights (singular values,
composition heatmaps), readable at 1024 px."""
from __future__ import annotations

from browser_helpers import chart_title, click_radio, nav, select, settle, title_problems
from playwright.sync_api import expect

MODEL = "tiny-coref (shipped)"


def test_intervals_and_weights(page, open_page) -> None:
    page.set_viewport_size({"width": 1024, "height": 900})
    open_page(page, "/")
    sidebar = page.locator("[data-testid='stSidebar']")
    nav(page, "Attention explorer")
    chart_title(page, "layer 0 · head 0")
    select(page, sidebar, "Model", MODEL)
    chart_title(page, "layer 0 · head 0")
    page.get_by_role("tab", name="Effects").click()
    chart_title(page, "each head off")
    click_radio(page, "the task's first 300 test sentences")
    chart_title(page, "with its 95% interval")
    plot = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text="with its 95% interval")).first
    plot.scroll_into_view_if_needed()
    assert plot.locator("g.errorbar").count() > 0  # the intervals are drawn
    assert not title_problems(plot), title_problems(plot)
    box = plot.locator("g.points path").first.bounding_box()  # the plot's drag layer lies on top:
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # hover its pixels
    expect(plot.locator(".hoverlayer").get_by_text("95% bootstrap interval").first).to_be_visible()
    expect(page.get_by_text("n = 300").first).to_be_attached()

    click_radio(page, "Weights & composition")
    chart_title(page, "singular values of QK and OV")
    expect(page.get_by_text("L0 heads read only the embeddings").first).to_be_visible()
    click_radio(page, "this one into later heads")
    chart_title(page, "into later keys (K)")
    for title in ("singular values", "(Q)", "(K)", "(V)"):
        plot = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=title)).first
        plot.scroll_into_view_if_needed()
        assert not title_problems(plot), title_problems(plot)
        box = plot.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 1024 + 1, (title, box)
    settle(page)


def test_gradients_and_paths_titles_fit(page, open_page) -> None:
    page.set_viewport_size({"width": 1024, "height": 900})
    open_page(page, "/")
    sidebar = page.locator("[data-testid='stSidebar']")
    nav(page, "Attention explorer")
    chart_title(page, "layer 0 · head 0")
    select(page, sidebar, "Model", MODEL)
    chart_title(page, "layer 0 · head 0")
    select(page, page, "Layer", "1")
    page.get_by_role("tab", name="Effects").click()
    chart_title(page, "each head off")
    click_radio(page, "Gradients & paths")
    box = page.get_by_role("textbox", name="Replace it by")
    box.fill("the")
    box.press("Enter")
    chart_title(page, "Into L1H0's keys")
    for title in ("Heads: estimate vs real", "Residual stream: estimate vs real", "queries", "keys", "values"):
        plot = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=title)).first
        plot.scroll_into_view_if_needed()
        assert not title_problems(plot), title_problems(plot)
