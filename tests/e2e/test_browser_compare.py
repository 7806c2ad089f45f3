"""The Compare page in a real browser: train a pair (pre- vs post-norm, a few steps) from the
"Train a pair" tab, watch both curves on one chart, open them side by side, switch the shown head.
Prints p50/p95 of first render and of switching the head, and the pair's training time."""
from __future__ import annotations

import time

from browser_helpers import (SCREENSHOTS, TRAINING_DEADLINE_MS, chart_title, cut_off, report, select,
                             settle, visit)
from playwright.sync_api import expect


def test_train_a_pair_then_compare(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = [visit(page, "Compare", "Compare"), visit(page, "Home", "tfviz"),
              visit(page, "Compare", "Compare")]
    main = page.locator("[data-testid='stMain']")
    page.get_by_role("tab", name="Train a pair").click()
    expect(page.get_by_label("Values (comma-separated)")).to_have_value("pre, post")  # norm by default
    page.get_by_label("Steps", exact=True).fill("12")
    settle(page)
    t0 = time.perf_counter()
    page.get_by_role("button", name="Train the pair").click()
    chart_title(page, "The pair, live: same axes")
    open_btn = page.get_by_role("button", name="Compare them side by side")
    expect(open_btn).to_be_visible(timeout=TRAINING_DEADLINE_MS)
    trained_s = time.perf_counter() - t0
    expect(page.get_by_text("lm-post-norm").first).to_be_visible()
    open_btn.click()
    settle(page)
    expect(page.get_by_role("tab", name="Side by side")).to_have_attribute(  # opened there
        "aria-selected", "true", timeout=TRAINING_DEADLINE_MS)
    chart_title(page, "Training curves, same axes")
    chart_title(page, "lm-pre-norm: L0 H0")
    chart_title(page, "lm-post-norm: L0 H0")
    switches = []
    for head in ("1", "0", "1"):
        t0 = select(page, main, "Head", head)
        chart_title(page, f"lm-post-norm: L0 H{head}")
        switches.append(time.perf_counter() - t0)
    page.screenshot(path=str(SCREENSHOTS / "compare_pair.png"), full_page=True)
    print(report(timings, "compare", firsts, switches) + f"; pair of 12 steps trained in {trained_s:.1f} s")


def test_pair_form_values_are_not_cut(page, open_page) -> None:
    """Issue 25, item 8: four fields in a row cut the setting's name ("normalisation placement
    (pre /"). At 1024 and 1440 px every select of the pair form shows its whole value."""
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        open_page(page, "/compare")
        page.get_by_role("tab", name="Train a pair").click()
        expect(page.get_by_label("Values (comma-separated)")).to_have_value("pre, post")
        settle(page)
        cut = cut_off(page, "[data-testid='stMain'] [data-testid='stSelectbox']")
        page.screenshot(path=str(SCREENSHOTS / f"compare_pair_form_{width}.png"))
        assert not cut, (width, cut)

