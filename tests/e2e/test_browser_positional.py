"""Positional encodings in a real browser: open it from the sidebar (a RoPE model: the RoPE view
with a real recorded query), switch schemes and heads, play the rotation. Prints p50/p95."""
import time

from browser_helpers import SCREENSHOTS, chart_title, report, settle, switch, visit
from playwright.sync_api import expect


def test_positional_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = []
    for _ in range(2):
        firsts.append(visit(page, "Positional encodings", "Positional encodings"))
        chart_title(page, "q·k over (m, n), real q/k")  # tiny-coref uses RoPE: real vectors
        visit(page, "Home", "tfviz")
    firsts.append(visit(page, "Positional encodings", "Positional encodings"))
    chart_title(page, "RoPE frequencies per pair")
    page.screenshot(path=str(SCREENSHOTS / "positional_rope.png"))

    # play the rotation animation: Plotly runs it in the browser (each frame retitles the chart
    # with its position m), no console errors expected
    play = page.get_by_text("▶ play").first
    title = page.locator(".js-plotly-plot").filter(has=play).locator(".gtitle").first
    before = title.text_content()
    play.click()
    expect(title).not_to_have_text(before)

    switches = []
    for section, title in (("Sinusoidal", "Sinusoidal table"), ("ALiBi", "ALiBi bias per head"),
                           ("Learned", None), ("RoPE", "q·k over (m, n), real q/k")):
        radio = page.locator("[data-testid='stRadio']").filter(has_text="Scheme")
        t0 = time.perf_counter()
        radio.get_by_text(section, exact=True).click()
        if title:
            chart_title(page, title)
        else:
            expect(page.get_by_text("has no learned position table")).to_be_visible()
            settle(page)
        switches.append(time.perf_counter() - t0)
        if section == "Sinusoidal":
            page.screenshot(path=str(SCREENSHOTS / "positional_sinusoidal.png"))
    for head in ("1", "3"):
        switches.append(switch(page, "Head", head, f"head {head}, before rotation"))

    print(report(timings, "positional", firsts, switches))
