"""Tokens & embeddings in a real browser: open it from the sidebar, type a new text and see the
three tokenizations and the model's update. Prints p50/p95 of first render and of an edit."""
import time

from browser_helpers import SCREENSHOTS, report, settle, visit
from playwright.sync_api import expect

TEXTS = ["the cat sees a dog.", "zebras 🦓 sing ünïcode!", "", "the dogs that the cat chases run."]


def test_tokens_page(page, open_page, timings) -> None:
    open_page(page, "/")
    firsts = []
    for _ in range(2):
        firsts.append(visit(page, "Tokens & embeddings", "Tokens & embeddings"))
        expect(page.get_by_text("Learned embed.weight: cosine")).to_be_visible()
        visit(page, "Home", "tfviz")
    firsts.append(visit(page, "Tokens & embeddings", "Tokens & embeddings"))
    expect(page.get_by_text("One-hot vectors: cosine")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "tokens_top.png"))

    edits = []
    box = page.get_by_role("textbox", name="Text to tokenize")
    for text in TEXTS:
        box.fill(text)
        t0 = time.perf_counter()
        box.press("Control+Enter")
        if text:
            expect(page.get_by_text(f"char — {len(text)} tokens")).to_be_visible()
        else:
            expect(page.get_by_text("Type some text above")).to_be_visible()
        settle(page)
        edits.append(time.perf_counter() - t0)
    spans = page.locator(".tfviz-tokens").first.locator("span")
    assert spans.count() == len(TEXTS[-1])  # one span per character
    page.get_by_text("Nearest neighbours in the trained embedding").scroll_into_view_if_needed()

    print(report(timings, "tokens", firsts, edits))
