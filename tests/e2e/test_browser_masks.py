"""Masks page in a real browser: renders for a decoder, switching the mask and the head re-renders
quickly, and the "no peeking" numbers show an exact 0. Prints p50/p95 timings."""
from browser_helpers import SCREENSHOTS, assert_ticks_apart, first_renders, report, settle, switch
from playwright.sync_api import expect


def test_masks_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = first_renders(page, "Masks", 3)
    expect(page.get_by_text("causal / full mask —")).to_be_visible()
    expect(page.locator("[data-testid='stMetricValue']").first).to_have_text("0")

    switches = []
    for kind in ("sliding window", "global + local", "padding"):
        switches.append(switch(page, "Mask", kind, f"{kind} mask —"))
        if kind == "sliding window":
            page.screenshot(path=str(SCREENSHOTS / "masks_sliding_window.png"))
    for head in ("1", "3"):
        switches.append(switch(page, "Head", head, f"Layer 0 head {head} under this mask"))
    page.get_by_text("No peeking: edit a later token").scroll_into_view_if_needed()
    expect(page.get_by_text("before p (positions 0–")).to_be_visible()

    # Issue 11: with 33 tokens the overview's token labels overlapped (7 px rows)
    page.set_viewport_size({"width": 1024, "height": 768})
    box = page.get_by_label("Text", exact=True)
    box.fill(" ".join(["the law and the dog"] * 6) + " it is")  # 32 words: 33 tokens with [BOS]
    box.press("Control+Enter")
    overview = page.locator(".js-plotly-plot", has_text="Three masks on the input").first
    expect(page.get_by_text("Input — 33 tokens")).to_be_visible()
    settle(page)
    overview.scroll_into_view_if_needed()
    assert assert_ticks_apart(overview, "y") >= 33  # every token named, none overlapping
    page.screenshot(path=str(SCREENSHOTS / "masks_33_tokens_1024.png"))
    page.set_viewport_size({"width": 1400, "height": 900})

    print(report(timings, "masks", firsts, switches))
