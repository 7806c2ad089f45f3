"""The Train page in a real browser with a recurrent model: pick LSTM, its fields replace the
transformer's, a tiny run trains to completion, and it opens where a model without attention has
something to show; the Attention explorer explains in one sentence why it has nothing to draw."""
from __future__ import annotations

import re

from browser_helpers import CURRENT, TRAINING_DEADLINE_MS, nav, select, settle
from playwright.sync_api import expect


def test_train_a_tiny_lstm_from_the_page(page, open_page) -> None:
    open_page(page, "/")
    main = page.locator("[data-testid='stMain']")
    nav(page, "Train")
    expect(page.get_by_role("button", name="Start training")).to_be_visible()
    settle(page)
    select(page, main, "Task", "reverse")
    expect(page.locator(CURRENT).get_by_label("Name", exact=True)).to_have_value(re.compile(r"^reverse-"))
    select(page, main, "Model type", "LSTM")
    expect(page.locator(CURRENT).get_by_label("Name", exact=True)).to_have_value(re.compile(r"^reverse-lstm-"))
    expect(main.get_by_label("Hidden size", exact=True)).to_be_visible()
    expect(main.get_by_role("spinbutton", name="Heads")).to_have_count(0)  # transformer-only: hidden
    expect(main.get_by_role("spinbutton", name="Window (0 = full)")).to_have_count(0)
    settle(page)
    page.get_by_label("Steps", exact=True).fill("20")
    page.get_by_label("Warmup steps").fill("2")
    page.get_by_label("Hidden size", exact=True).fill("16")
    page.get_by_role("button", name="Start training").click()
    open_btn = page.get_by_role("button", name="Open in Tokens & embeddings")
    expect(open_btn).to_be_visible(timeout=TRAINING_DEADLINE_MS)
    settle(page)
    expect(page.get_by_text(re.compile(r"finished 20 steps in"))).to_be_visible()
    expect(page.get_by_role("combobox", name="Run")).to_have_value(re.compile(r"^reverse-lstm-\d+$"))
    expect(page.get_by_text("Validation accuracy").first).to_be_visible()
    expect(page.get_by_role("link", name=re.compile("Why attention: RNN and LSTM"))).to_be_visible()

    open_btn.click()
    page.wait_for_url(re.compile(r"/tokens"))
    settle(page)
    nav(page, "Attention explorer")
    expect(page.get_by_text(re.compile("has no self-attention")).first).to_be_visible()
    settle(page)
