"""A bookmarked page URL on a freshly started server (nothing has run yet): /attention opens the
Attention explorer with the real sidebar — the registered pages with their titles and icons, no
"app" entry, the model picker — and not Streamlit's legacy pages/ mode, which listed the file
names and ran the page without app.py (fixed by keeping pages in app_pages/; ui.navigation)."""
from __future__ import annotations

import time

import pytest
from browser_helpers import DEADLINE_MS, IGNORED_CONSOLE_ERRORS, SIDEBAR_LINK, settle
from playwright.sync_api import expect

from scripts.load_test import StreamlitServer
from ui.navigation import PAGES


@pytest.fixture
def fresh_server(browser, tiny_zoo, tmp_path):
    with StreamlitServer({"TFVIZ_CHECKPOINT_DIR": str(next(iter(tiny_zoo.values())).parent)},
                         log=tmp_path / "server.log", timeout_s=DEADLINE_MS / 1000) as server:
        yield server


def test_a_bookmarked_page_on_a_fresh_server_has_the_real_sidebar(browser, fresh_server, timings):
    ctx = browser.new_context(base_url=fresh_server.url, viewport={"width": 1400, "height": 900})
    ctx.set_default_timeout(DEADLINE_MS)
    page = ctx.new_page()
    errors = []
    page.on("console", lambda m: errors.append(f"{m.text} ({m.location.get('url', '')})")
            if m.type == "error" else None)
    try:
        t0 = time.perf_counter()
        page.goto("/attention")
        expect(page.get_by_role("heading", name="Attention explorer")).to_be_visible()
        expect(page.locator(SIDEBAR_LINK)).to_have_count(len(PAGES))
        settle(page)
        took = time.perf_counter() - t0
        links = [" ".join(t.split()) for t in page.locator(SIDEBAR_LINK).all_inner_texts()]
        assert links == [f"{p.icon} {p.title}" for p in PAGES]  # not 'app', 'attention', …
        sidebar = page.locator("[data-testid='stSidebar']")
        expect(sidebar.get_by_role("combobox", name="Model")).to_be_visible()  # app.py ran
        expect(page.locator(".js-plotly-plot").first).to_be_visible()
        assert not [e for e in errors if not any(p.search(e) for p in IGNORED_CONSOLE_ERRORS)], errors
        assert not page.locator("[data-testid='stException']").count()
    finally:
        ctx.close()
    timings["bookmarked_page_fresh_server_s"] = round(took, 2)
    print(f"\n/attention first on a fresh server: ready with its sidebar after {took:.1f} s")
