"""Issue 33 in a real browser at 1024 px: the Findings page's phase change (heatmaps and the one
time axis) and the Masks page's attention-sink section render, their titles uncut, their
sentences on screen. Prints how long each took to appear."""
import time

from browser_helpers import SCREENSHOTS, chart_title, click_radio, rerun, title_problems, visit
from playwright.sync_api import expect


def plots(page, text: str):
    return page.locator(".js-plotly-plot", has_text=text).first


def test_phase_change_and_sinks_render_at_1024(page, open_page, timings) -> None:
    page.set_viewport_size({"width": 1024, "height": 768})
    open_page(page, "/")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    visit(page, "Findings", shows="Where does 'its' look? (live)")
    phase_s = click_radio(page, "The phase change")
    chart_title(page, "Loss at every token index, over training")
    chart_title(page, "The phase change, on one time axis")
    expect(page.get_by_text("the two windows overlap").first).to_be_visible()
    for title in ("Loss at every token index", "The phase change, on one time axis"):
        plot = plots(page, title)
        plot.scroll_into_view_if_needed()
        assert not title_problems(plot), title_problems(plot)
    page.screenshot(path=str(SCREENSHOTS / "findings_phase_change_1024.png"), full_page=True)

    visit(page, "Masks")
    toggle = page.get_by_text("Measure it live", exact=False).first
    toggle.scroll_into_view_if_needed()
    t0 = time.perf_counter()
    rerun(page, toggle.click)
    chart_title(page, "share of attention on the first tokens (live)")
    chart_title(page, "loss per position on")
    sinks_s = time.perf_counter() - t0
    expect(page.get_by_text("the paper's signature").first).to_be_visible()
    for title in ("share of attention on the first tokens", "loss per position on"):
        plot = plots(page, title)
        plot.scroll_into_view_if_needed()
        assert not title_problems(plot), title_problems(plot)
    page.screenshot(path=str(SCREENSHOTS / "masks_sinks_1024.png"), full_page=True)
    timings["findings_phase_change_s"] = round(phase_s, 2)
    timings["masks_sinks_live_s"] = round(sinks_s, 2)
    print(f"\nphase change section {phase_s:.2f} s; sinks measured live {sinks_s:.2f} s")
