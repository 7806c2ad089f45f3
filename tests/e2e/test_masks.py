"""Masks page in a real browser: renders for a decoder, switching the mask and the head re-renders
quickly, and the "no peeking" numbers show an exact 0. Prints p50/p95 timings."""
import statistics
import time
from pathlib import Path

from browser_helpers import pct, select, settle, visit
from playwright.sync_api import expect

SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


def test_masks_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = []
    for _ in range(2):
        firsts.append(visit(page, "Masks", "Masks"))
        visit(page, "Home", "tfviz")
    firsts.append(visit(page, "Masks", "Masks"))
    expect(page.get_by_text("causal / full mask —")).to_be_visible()
    expect(page.locator("[data-testid='stMetricValue']").first).to_have_text("0")

    switches = []
    for kind in ("sliding window", "global + local", "padding"):
        t0 = select(page, page, "Mask", kind)
        expect(page.get_by_text(f"{kind} mask —")).to_be_visible()
        settle(page)
        switches.append(time.perf_counter() - t0)
        if kind == "sliding window":
            page.screenshot(path=str(SCREENSHOTS / "masks_sliding_window.png"))
    for head in ("1", "3"):
        t0 = select(page, page, "head", head)
        expect(page.get_by_text(f"Layer 0 head {head} under this mask")).to_be_visible()
        settle(page)
        switches.append(time.perf_counter() - t0)
    page.get_by_text("No peeking: edit a later token").scroll_into_view_if_needed()
    expect(page.get_by_text("before p (positions 0–")).to_be_visible()

    timings["masks_first_render_p50_s"] = pct(firsts, 50)
    timings["masks_first_render_p95_s"] = pct(firsts, 95)
    timings["masks_switch_p50_s"] = pct(switches, 50)
    timings["masks_switch_p95_s"] = pct(switches, 95)
    print(f"\nmasks first render p50 {pct(firsts, 50)} s p95 {pct(firsts, 95)} s; "
          f"switch mask/head p50 {pct(switches, 50)} s p95 {pct(switches, 95)} s "
          f"(mean {statistics.mean(switches):.2f} s)")
