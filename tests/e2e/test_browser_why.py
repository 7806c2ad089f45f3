"""Why attention in a real browser: open it from the sidebar (every section's heading), train
word2vec on the built-in corpus with its progress bar and see the analogy, then give two sentences
that are not rearrangements of each other and read the message. Prints p50/p95."""
import time

from browser_helpers import SCREENSHOTS, chart_title, first_renders, report, rerun, settle, title_problems
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

