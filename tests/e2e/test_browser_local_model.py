"""A local Hugging Face folder in a real browser (issue 12 item 4): the sidebar picker lists it as
*local* with its family and size; picking it loads it (a progress bar while the weights are read)
and the Attention explorer draws its heatmap on the model's own tokens."""
from __future__ import annotations

import pytest
from browser_helpers import chart_title, nav, select
from playwright.sync_api import expect


def test_pick_a_local_model_and_see_its_heatmap(page, open_page, local_models) -> None:
    if local_models is None:
        pytest.skip("transformers is not installed: no local folder to build")
    import tfviz
    from tfviz.interop import inspect
    from ui.models import local_label

    label = local_label(inspect(local_models, "models"))  # "gpt2-tiny (local · GPT-2 · …)"
    tokens = tfviz.from_pretrained(local_models).tokenizer.encode("the cat sat on the mat .").tokens
    open_page(page, "/")
    nav(page, "Attention explorer")
    chart_title(page, "layer 0 · head 0")
    select(page, page.locator("[data-testid='stSidebar']"), "Model", label)
    expect(page.get_by_text(f"Input — {len(tokens)} tokens")).to_be_visible()
    chart_title(page, "self-attention (causal) · layer 0 · head 0")
    heatmap = page.locator(".js-plotly-plot").first
    expect(heatmap.locator("g.heatmaplayer")).to_have_count(1)
    expect(heatmap.locator(".xtick text").first).to_be_visible()
