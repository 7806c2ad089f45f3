"""The Generate page in a real browser: generate tokens from a decoder (greedy, then sampled), switch
heads, and from an encoder-decoder (self- and cross-attention). Prints p50/p95 of first render and
of a head switch.
"""
from __future__ import annotations

import time

from browser_helpers import chart_title, nav, report, rerun, select, settle
from playwright.sync_api import expect


def test_generate(page, open_page, timings) -> None:
    open_page(page, "/")
    sidebar = page.locator("[data-testid='stSidebar']")
    firsts = []
    for i in range(4):
        if i:
            nav(page, "Home")
            expect(page.locator(".js-plotly-plot")).to_have_count(0)
            settle(page)
        t0 = time.perf_counter()
        nav(page, "Generate")
        chart_title(page, "attention over the past")
        firsts.append(time.perf_counter() - t0)
        if i == 0:
            select(page, sidebar, "Model", "tiny-coref (shipped)")
            settle(page)
    expect(page.get_by_role("heading", name="Generate")).to_be_visible()
    chips = page.locator(".tfviz-generated span")
    expect(chips).to_have_count(18 + 16)  # the coref prompt (18 tokens) + 16 new tokens
    expect(page.get_by_text("KV cache now")).to_be_visible()

    switches = []
    for head in ["1", "2", "3", "average", "1", "2", "3", "average"]:
        t0 = select(page, page.locator("[data-testid='stMain']"), "Head", head)
        chart_title(page, "mean over heads" if head == "average" else f"(head {head})")
        switches.append(time.perf_counter() - t0)

    # sampled: temperature 1, top-k 5, fewer tokens
    page.get_by_label("Top-k (0 = off)").fill("5")
    page.get_by_label("Seed", exact=True).fill("3")
    temp_box = page.locator("[data-testid='stSlider']").filter(has_text="Temperature")
    temp = temp_box.get_by_role("slider")
    temp.focus()
    for _ in range(20):  # 0.00 -> 1.00 in steps of 0.05
        page.keyboard.press("ArrowRight")
    expect(temp_box).to_contain_text("1.00")
    settle(page)
    rerun(page, page.get_by_role("button", name="New sample").click)
    expect(page.get_by_label("Seed", exact=True)).to_have_value("4")
    expect(temp_box).to_contain_text("1.00")
    assert chips.count() > 18  # sampling may hit [EOS] early, but generates at least one token

    # an encoder-decoder: a source box, and cross-attention over it
    select(page, sidebar, "Model", "tiny-translate (shipped)")
    chart_title(page, "attention over the past")
    source = page.get_by_label("Source text (encoder input)")
    expect(source).to_have_value("a green house follows a blue car .")  # the task's example
    page.locator("[data-testid='stRadio']").filter(has_text="Attention").get_by_text("cross").click()
    chart_title(page, "cross-attention over the source")
    page.set_viewport_size({"width": 1400, "height": 1900})  # the whole page in the screenshot

    print(report(timings, "generate", firsts, switches) + " (targets: first render <= 2 s, head "
          "switch <= 0.5 s)")
