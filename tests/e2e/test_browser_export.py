"""Views into slides in a real browser (issue 25, item 11): on the Attention explorer, the sidebar's
"Export this page (HTML)" and a figure's "HTML" button download real files (built by the
server on click), and the page's file then opens from disk in Chromium with the network off —
plotly.js inlined, the heatmap drawn, nothing requested from anywhere."""
from __future__ import annotations

import re

from browser_helpers import DEADLINE_MS, SCREENSHOTS, chart_title, nav
from playwright.sync_api import expect


def _download(page, button, folder):
    with page.expect_download(timeout=DEADLINE_MS) as info:
        button.click()
    path = folder / info.value.suggested_filename
    info.value.save_as(path)
    return path


def test_exported_page_opens_offline(page, open_page, browser, tmp_path) -> None:
    open_page(page, "/")
    nav(page, "Attention explorer")
    chart_title(page, "layer 0 · head 0")
    sidebar = page.locator("[data-testid='stSidebar']")
    export = sidebar.get_by_role("button", name="Export this page (HTML)")
    expect(export).to_be_visible()
    exported = _download(page, export, tmp_path)
    one = _download(page, page.get_by_role("button", name="HTML", exact=True).first, tmp_path)
    assert exported.name == "tfviz-attention-explorer.html" and one.suffix == ".html"
    for f in (exported, one):
        text = f.read_text(encoding="utf-8")
        assert f.stat().st_size > 3_000_000 and not re.search(r"<script[^>]*\bsrc=", text), f.name

    offline = browser.new_context(offline=True, viewport={"width": 1024, "height": 768})
    asked, errors = [], []

    def only_the_file(route):
        if route.request.url.startswith("file:"):
            return route.continue_()
        asked.append(route.request.url)
        return route.abort()

    offline.route("**/*", only_the_file)
    try:
        pg = offline.new_page()
        pg.on("console", lambda m: m.type == "error" and errors.append(m.text))
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(exported.as_uri())
        pg.locator("#tfviz-figure-1 .main-svg").first.wait_for(timeout=DEADLINE_MS)
        expect(pg.locator(".js-plotly-plot")).to_have_count(1)
        expect(pg.locator(".js-plotly-plot .gtitle")).to_contain_text("layer 0 · head 0")
        assert pg.locator(".js-plotly-plot .hm, .js-plotly-plot .heatmaplayer image").count() >= 1
        assert pg.evaluate("typeof window.Plotly") == "object"
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        pg.screenshot(path=str(SCREENSHOTS / "test_browser_export__offline_file.png"), full_page=True)
    finally:
        offline.close()
    assert asked == [] and errors == [], (asked, errors)
