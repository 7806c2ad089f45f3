"""Findings page in a real browser: every section renders from the shipped zoo without errors;
prints p50/p95 of the first render and of switching sections / controls."""
import time

from browser_helpers import SCREENSHOTS, click_radio, first_renders, report, rerun
from playwright.sync_api import expect

SECTIONS = ["Induction heads", "Positional extrapolation", "Cross-attention", "All models",
            "“It”: pattern or choice?", "The \"it\" heads"]


def test_findings_page(page, open_page, timings) -> None:
    open_page(page, "/")
    # the first one loads the zoo models and builds the coref task
    firsts = first_renders(page, "Findings", 5, shows="Where does 'its' look? (live)")
    expect(page.locator("[data-testid='stMetricValue']").first).to_be_visible()

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "findings_0.png"))
    switches = []
    for i, section in enumerate(SECTIONS, 1):
        switches.append(click_radio(page, section))
        expect(page.locator("[data-testid='stPlotlyChart'], [data-testid='stDataFrame']").first
               ).to_be_visible()
        page.locator("[data-testid='stPlotlyChart'], [data-testid='stDataFrame']").first.scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / f"findings_{i}.png"))
    expect(page.get_by_text("(live)").first).to_be_visible()
    switches.append(click_radio(page, "“… because it is too complex.”"))
    switches.append(click_radio(page, "in the sentence"))
    expect(page.get_by_text("Where does 'it' look? (live)")).to_be_visible()

    click_radio(page, "Positional extrapolation")
    t0 = rerun(page, page.get_by_role("button", name="Re-measure live").click)
    live = time.perf_counter() - t0
    expect(page.get_by_text("Loss vs evaluation length (live)")).to_be_visible()

    timings["findings_extrapolation_live_s"] = round(live, 2)
    print(report(timings, "findings", firsts, switches) + f"; live extrapolation {live:.2f} s")
