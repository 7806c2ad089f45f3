"""A trained model leaves the app from the browser (issue 30, item 4): on the Attention explorer,
the sidebar's "Export as a Hugging Face folder" downloads a real zip (built by the server on the
click), whose folder tfviz opens again with its task and transformers (where installed) opens as
the GPT-2 it is, with the model's logits."""
from __future__ import annotations

import zipfile

import torch
from browser_helpers import DEADLINE_MS, nav, select, settle
from playwright.sync_api import expect

import tfviz
from tfviz.interop import from_pretrained


def test_the_sidebar_downloads_the_model_as_a_folder(page, open_page, tiny_zoo, tmp_path) -> None:
    open_page(page, "/")
    nav(page, "Attention explorer")
    sidebar = page.locator("[data-testid='stSidebar']")
    select(page, sidebar, "Model", "tiny-induction (shipped)")
    settle(page)
    sidebar.get_by_text("Export as a Hugging Face folder").click()
    button = sidebar.get_by_role("button", name="Download the folder (zip)")
    expect(button).to_be_visible()
    expect(sidebar.get_by_text("Written as GPT-2")).to_be_visible()
    with page.expect_download(timeout=DEADLINE_MS) as info:
        button.click()
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    assert path.name == "tiny-induction.zip"
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        z.extractall(tmp_path / "out")
    assert {"tiny-induction/config.json", "tiny-induction/model.safetensors",
            "tiny-induction/tokenizer.json", "tiny-induction/tfviz_task.json"} <= names
    folder = tmp_path / "out" / "tiny-induction"
    ck, back = tfviz.load_checkpoint(tiny_zoo["tiny-induction"]), from_pretrained(folder)
    assert back.task == ck.task and back.config.attn_only
    x = torch.tensor([back.shared_task().examples("validation")[0].tokens])
    with torch.no_grad():
        want = ck.model.eval()(x)
        torch.testing.assert_close(back.model(x), want, atol=1e-5, rtol=1e-5)
    try:
        import transformers
    except ImportError:
        return
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, want, atol=1e-5, rtol=1e-5)
