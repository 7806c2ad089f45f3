"""Cost page in a real browser: it renders (reference or analytic curves), switching the pass
re-renders quickly, and "Measure now" at tiny sizes (n = 256, 512; set with the keyboard on the
sliders) shows the measured figures and the KV-cache table. Prints p50/p95 timings."""
import re
import time

from browser_helpers import SCREENSHOTS, TRAINING_DEADLINE_MS, chart_title, first_renders, report, rerun, settle
from playwright.sync_api import expect


def slider_keys(page, label: str, *keys: str) -> None:
    """Move a (select_)slider with the keyboard; each key press (one that moves it) is one rerun."""
    thumb = page.locator("[data-testid='stSlider']").filter(has_text=label).get_by_role("slider")
    thumb.focus()
    for key in keys:
        rerun(page, lambda: thumb.press(key))


def charts(page) -> int:
    return page.locator("[data-testid='stPlotlyChart']").count()


def test_cost_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = first_renders(page, "Cost", 4)
    expect(page.get_by_text("Honest windows.")).to_be_visible()
    expect(page.locator("[data-testid='stPlotlyChart']").first).to_be_visible()
    assert charts(page) == 2  # time + memory (reference) or FLOPs + memory (analytic)

    switches = []
    for _ in range(4):  # switch the pass to the other one (the default depends on the device)
        forward = page.get_by_role("radio", name="forward", exact=True).is_checked()
        other = page.get_by_text("forward + backward" if forward else "forward", exact=True)
        t0 = rerun(page, other.click)
        chart_title(page, "(fwd+bwd" if forward else "(fwd)")  # the charts show the new pass
        switches.append(time.perf_counter() - t0)
    page.screenshot(path=str(SCREENSHOTS / "cost_before_measuring.png"))

    slider_keys(page, "largest n", "Home", "ArrowRight")  # 256 -> 512
    slider_keys(page, "repeats", "Home")  # 1
    t0 = time.perf_counter()
    page.get_by_role("button", name="Measure now").click()
    expect(page.get_by_text("Measured on this machine")).to_be_visible(timeout=TRAINING_DEADLINE_MS)
    settle(page)
    measured = time.perf_counter() - t0
    expect(page.get_by_text("n = 256, 512,")).to_be_visible()
    assert charts(page) == 4  # time, memory, KV cache, generation speed
    page.screenshot(path=str(SCREENSHOTS / "cost_measured.png"))
    page.get_by_text("Honest windows.").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "cost_measured_ratios.png"))
    kv = page.get_by_role("heading", name="KV cache: MHA vs GQA vs MQA")
    kv.scroll_into_view_if_needed()
    expect(kv).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "cost_measured_kv.png"))
    page.get_by_text("Without the cache every new token").scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "cost_measured_speed.png"))

    timings["cost_measure_tiny_s"] = round(measured, 2)
    print(report(timings, "cost", firsts, switches) + f"; measure (n 256-512) {measured:.1f} s")


def test_measure_now_says_how_long_first(page, open_page) -> None:
    """Issue 30, item 6: Measure now was 67 s without a word beforehand. Before anything is
    pressed the page says how long it will take on this server and how that was estimated."""
    page.set_viewport_size({"width": 1024, "height": 768})
    open_page(page, "/cost")
    said = page.get_by_text(re.compile(r"^Measure now takes about \d+ s on this server now"))
    expect(said).to_be_visible()
    assert "calibration just now" in said.inner_text()
    said.scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "cost_estimate_1024.png"))
