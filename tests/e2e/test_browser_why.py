"""Why attention in a real browser: open it from the sidebar (every section's heading), train
word2vec on the built-in corpus with its progress bar and see the analogy, then give two sentences
that are not rearrangements of each other and read the message. Prints p50/p95."""
import time

from browser_helpers import (SCREENSHOTS, assert_ticks_apart, chart_title, first_renders, report, rerun, settle,
                             title_problems)
from playwright.sync_api import expect

HEADINGS = ["1. Words as vectors", "2. Word order", "3. Reading in order", "4. The encoder–decoder",
            "5. Attention: a direct path"]


def test_why_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = first_renders(page, "Why attention", 2, shows="Bag-of-words vectors identical")
    for h in HEADINGS:
        expect(page.get_by_role("heading", name=h).first).to_be_visible()
    chart_title(page, "A bag of words")

    button = page.get_by_role("button", name="Train word2vec")
    t0 = time.perf_counter()
    if button.count():  # another test in this server may have trained it already
        rerun(page, button.click)
    chart_title(page, "king − man + woman")
    expect(page.get_by_text("king − man + woman ≈ 'queen'")).to_be_visible()
    trained = time.perf_counter() - t0
    page.screenshot(path=str(SCREENSHOTS / "why_word2vec.png"))

    box = page.get_by_label("sentence B (the same words, rearranged)")
    box.fill("the cat chases the bird")
    t0 = rerun(page, lambda: box.press("Enter"))
    expect(page.get_by_text("exactly the tokens of the first").first).to_be_visible()
    settle(page)
    print(report(timings, "why", firsts, [trained, time.perf_counter() - t0]))


def test_why_titles_clear_at_1024(page, open_page) -> None:
    """Issue 25, item 7: at 1024 px the charts side by side had their titles cut and an axis
    title running into the chart title. Every chart's title now lies inside it, clear of its axis
    titles, and no two annotations overlap."""
    page.set_viewport_size({"width": 1024, "height": 768})
    open_page(page, "/why")
    expect(page.get_by_role("heading", name=HEADINGS[-1]).first).to_be_visible()
    plots = page.locator(".js-plotly-plot")
    expect(plots.first).to_be_visible()
    settle(page)
    problems = []
    for i in range(plots.count()):
        plots.nth(i).scroll_into_view_if_needed()
        problems += title_problems(plots.nth(i))
    page.screenshot(path=str(SCREENSHOTS / "why_1024.png"))
    assert plots.count() >= 8 and not problems, problems



def test_why_lines_ticks_and_tiles_at_1024_and_1440(page, open_page) -> None:
    """Issue 30, item 6: §3's LSTM line lay hidden under the transformer's and the path-length
    lines on top of each other; the log distance axis read "5 6 7 8 9 1 2 3"; §5's tiles had no
    token labels. At both widths: the distance axis is labelled at the measured distances, a line
    drawn on another's says so in the legend, every tile row and column is labelled with tokens
    that do not overlap, and every chart's title is clear."""
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        open_page(page, "/why")
        chart_title(page, "Where each position's information comes from")
        problems = []
        for plot in page.locator(".js-plotly-plot").all():
            plot.scroll_into_view_if_needed()
            problems += title_problems(plot)
        assert not problems, (width, problems)

        def chart(title):
            plot = page.locator(".js-plotly-plot", has=page.locator(".gtitle", has_text=title)).first
            plot.scroll_into_view_if_needed()
            return plot

        gap = chart("Remembering across a gap")
        ticks = gap.evaluate("(el) => [...el.querySelectorAll('.xtick text')].map(e => e.textContent)")
        assert ticks and all(float(t) >= 1 for t in ticks), ticks  # the distances, not 5 6 7 8 9 1 2
        assert ticks == sorted(ticks, key=float), ticks
        assert_ticks_apart(gap, "x")
        gap.screenshot(path=str(SCREENSHOTS / f"why_distance_{width}.png"))
        paths = chart("Longest path")
        legend = paths.evaluate("(el) => [...el.querySelectorAll('.legendtext')].map(e => e.textContent)")
        assert any("on rnn's line" in t for t in legend), legend  # the LSTM's path is the RNN's: n - 1
        paths.screenshot(path=str(SCREENSHOTS / f"why_paths_{width}.png"))

        tiles = chart("Where each position's information comes from")
        rows = tiles.evaluate("(el) => [...el.querySelectorAll('.ytick text')].map(e => e.textContent)")
        words = page.get_by_label("text (the shipped lm reads it)").input_value().split()
        assert f"1 {words[1]}" in rows and len(rows) >= 2 * len(words), rows
        assert assert_ticks_apart(tiles, "x") > 0 and assert_ticks_apart(tiles, "y") > 0
        tiles.screenshot(path=str(SCREENSHOTS / f"why_tiles_{width}.png"))
