"""The Attention explorer's Effects tab in AppTest (ui/effects.py): every view's chart against an
independent computation here (plain forward hooks on the same checkpoint, the model's own logits),
on the tiny zoo and on an imported GPT-2 folder."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, head_zeroed, heatmap_z, open_page, rerun, text

from tfviz.analysis import explorer
from tfviz.analysis.explorer import example_choices
from tfviz.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


zeroed = head_zeroed  # a plain forward hook (apptest_helpers)


def test_heads_off_patch_lens_and_attribution_on_a_pronoun_model(tiny_zoo):
    path = tiny_zoo["tiny-coref"]
    ck = load_checkpoint(path)
    model = ck.model.eval()
    at = open_page("attention", path, att_tab="Effects", att_layer=1, att_head=2)
    ex = example_choices(ck.build_task())[0][1]  # the page's default input
    x = torch.tensor([ex.tokens])
    q, ref = ex.meta["query_index"], ex.tokens[ex.meta["candidate_indices"][ex.meta["referent"]]]
    with torch.no_grad():
        base = model(x)[0, q].softmax(-1)[ref].item()
    z = heatmap_z(chart(at, "eff_heatmap"))
    assert z.shape == (2, 4)
    for layer, head in ((0, 1), (1, 2)):
        off = zeroed(model, x, layer, head)[0, q].softmax(-1)[ref].item()
        assert z[layer, head] == pytest.approx(off - base, abs=1e-5)
    assert "Switching **L1H2** off" in text(at)
    assert chart(at, "eff_scatter")["data"]  # pattern vs effect beside it
    rerun(at, eff_data="task", eff_metric="pairwise accuracy", eff_pattern="weight on the referent")
    fig = chart(at, "eff_heatmap")
    assert heatmap_z(fig).shape == (2, 4) and "pairwise accuracy" in fig["layout"]["title"]["text"]
    assert "weight on the referent" in chart(at, "eff_scatter")["layout"]["xaxis"]["title"]["text"]
    rerun(at, eff_data="input", eff_set="L0H1+L1H2")  # a set of heads off together
    table = next(d.value for d in at.dataframe if "heads off" in d.value.columns)
    mod = dict(model.named_modules())["stack.blocks.1.attn.hook_z"]
    h = mod.register_forward_hook(lambda m, i, z: torch.cat([z[:, :, :2], 0 * z[:, :, 2:3], z[:, :, 3:]], 2))
    try:
        both = zeroed(model, x, 0, 1)[0, q].softmax(-1)[ref].item()
    finally:
        h.remove()
    assert list(table["heads off"]) == ["none", "L0H1+L1H2"]
    assert table["P(referent)"].iloc[1] == pytest.approx(both, abs=5.1e-5)  # shown to 4 decimals

    # patching: the changed position, entering layer 0, is the only difference: it restores all
    word = ck.tokenizer.tokens_of([ex.tokens[2]])[0]
    pos = next(i for i, t in enumerate(ex.tokens) if i > 2 and t != ex.tokens[2] and i < q - 1)
    rerun(at, eff_view="Patch from another input", eff_patch_pos=pos, eff_patch_word=word)
    share = heatmap_z(chart(at, "eff_patch_pos_fig"))
    assert share.shape == (2, len(ex.tokens))
    assert share[0, pos] == pytest.approx(1.0, abs=1e-4)
    assert np.allclose(np.delete(share[0], pos), 0, atol=1e-4)

    # logit lens: the last row is the model's own prediction
    rerun(at, eff_view="Logit lens")
    lens = heatmap_z(chart(at, "eff_lens"))
    with torch.no_grad():
        top = model(x)[0].softmax(-1).max(-1).values.numpy()
    np.testing.assert_allclose(lens[:, -1], top, atol=1e-5)  # positions down, the last layer right

    # attribution: the bars add up to the model's own logit difference
    rerun(at, eff_view="Attribution & circuits")
    bars = chart(at, "eff_dla")["data"][0]
    with torch.no_grad():
        last = model(x)[0, -1]
    g, b = last.topk(2).indices.tolist()
    assert arr(bars["y"]).sum() == pytest.approx((last[g] - last[b]).item(), abs=1e-4)
    assert chart(at, "eff_qk")["data"] and chart(at, "eff_ov")["data"]


def test_induction_model_on_the_tasks_repeats(tiny_zoo):
    at = open_page("attention", tiny_zoo["tiny-induction"], att_tab="Effects", eff_data="task")
    z = heatmap_z(chart(at, "eff_heatmap"))
    assert z.shape == (2, 2) and np.isfinite(z).all()
    assert "loss on the repeat" in text(at)


def test_imported_gpt2_loss_grid(tmp_path):
    pytest.importorskip("transformers")
    import hf_folders
    from tfviz import from_pretrained

    models = tmp_path / "models"
    hf_folders.build("gpt2", models / "gpt2")
    old = {k: os.environ.get(k) for k in ("TFVIZ_MODELS_DIR", "HF_HUB_CACHE")}
    os.environ.update(TFVIZ_MODELS_DIR=str(models), HF_HUB_CACHE=str(tmp_path / "hub"))
    try:
        at = open_page("attention", models / "gpt2", att_tab="Effects", att_text="the cat sat on the mat")
        z = heatmap_z(chart(at, "eff_heatmap"))
        ck = from_pretrained(models / "gpt2")
        model, tok = ck.model.eval(), ck.tokenizer
        ids = explorer.prepare_text(tok, "the cat sat on the mat", *explorer.template_layout(tok), 64).ids
        x = torch.tensor([ids])

        def loss(logits):
            return torch.nn.functional.cross_entropy(logits[0, :-1], x[0, 1:]).item()
        with torch.no_grad():
            base = loss(model(x))
        assert z.shape == (2, 4)
        assert z[1, 3] == pytest.approx(loss(zeroed(model, x, 1, 3)) - base, abs=1e-5)
        assert "loss" in text(at)
        rerun(at, eff_view="Logit lens")
        assert heatmap_z(chart(at, "eff_lens")).shape[1] == 3  # embeddings + 2 layers, across
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_findings_page_tells_the_pronoun_story_from_heads_switched_off(monkeypatch):
    from tfviz.paths import SHIPPED
    from tfviz.zoo.causal import COREF_TEST

    monkeypatch.delenv("TFVIZ_ZOO_DIR", raising=False)
    at = open_page("findings")
    assert "layer 0 delivers the category" in text(at) and "Attention is not explanation" in text(at)
    fig = chart(at, "find_coref_effect")
    points = {n: y for t in fig["data"] for n, y in zip(t["text"], arr(t["y"]))}
    # independently: pairwise accuracy (referent's logit above the other noun's) with L0H0 off
    ck = load_checkpoint(SHIPPED / "coref.safetensors")
    model = ck.model.eval()
    exs = ck.build_task().examples("test")[:COREF_TEST]

    n = max(len(e.tokens) for e in exs)  # right padding: a causal model's earlier rows are unchanged
    x = torch.tensor([list(e.tokens) + [0] * (n - len(e.tokens)) for e in exs])
    rows = torch.arange(len(exs))
    q = torch.tensor([e.meta["query_index"] for e in exs])
    c = [e.meta["candidate_indices"] for e in exs]
    good = x[rows, torch.tensor([ci[e.meta["referent"]] for ci, e in zip(c, exs)])]
    bad = x[rows, torch.tensor([ci[1 - e.meta["referent"]] for ci, e in zip(c, exs)])]

    def pairwise(off):
        lg = (zeroed(model, x, *off) if off else model(x))[rows, q]
        return (lg[rows, good] > lg[rows, bad]).float().mean().item()
    with torch.no_grad():
        base = pairwise(None)
        assert points["L0H0"] == pytest.approx(pairwise((0, 0)) - base, abs=1e-6)
        assert points["L1H1"] == pytest.approx(pairwise((1, 1)) - base, abs=1e-6) == 0
    rerun(at, finding="Induction heads")
    assert "redundant" in text(at) and "necessary" in text(at)


@pytest.mark.parametrize("name, sites", [("tiny-translate", ("encoder self-attention", "cross-attention")),
                                         ("tiny-mlm", (None,))])
def test_encoder_decoder_and_encoder_every_view_runs(tiny_zoo, name, sites):
    at = open_page("attention", tiny_zoo[name], att_tab="Effects")
    cfg = load_checkpoint(tiny_zoo[name]).config
    for site in sites:
        if site is not None:
            rerun(at, att_site=site)
        assert heatmap_z(chart(at, "eff_heatmap")).shape == (cfg.n_layers, cfg.n_heads)
    for view in ("Patch from another input", "Logit lens", "Attribution & circuits"):
        rerun(at, eff_view=view)
    assert not at.error, [e.value for e in at.error]


def test_switched_off_head_says_what_the_model_answers_and_follows_the_metric(monkeypatch, tmp_path):
    """On the shipped agreement model (mission sentence 1): the sentence under the grid speaks of
    the chosen metric, and one line says what the model answers with the head off (top token and
    probability, recomputed here) beside the held-out average."""
    import shutil

    from tfviz.paths import SHIPPED

    path = tmp_path / "agreement.safetensors"  # the app lists the models of its folder
    shutil.copy(SHIPPED / "agreement.safetensors", path)
    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(tmp_path))
    ck = load_checkpoint(path)
    model, tok = ck.model.eval(), ck.tokenizer
    ex = ck.build_task().mission_sentences()[0]  # the page's default input
    x, q = torch.tensor([ex.tokens]), ex.meta["query_index"]
    at = open_page("attention", path, att_tab="Effects", att_layer=0, att_head=1)
    with torch.no_grad():
        before = model(x)[0, q].softmax(-1)
        after = zeroed(model, x, 0, 1)[0, q].softmax(-1)
    words = text(at)
    assert "changes P(referent) from" in words
    want = (f"With **L0H1** off the model answers **{tok.tokens_of([int(after.argmax())])[0]}** "
            f"({after.max().item():.4g}) on this input instead of **law** ({before.max().item():.4g})")
    assert want.replace("With", "with") in words
    assert "over the task's first 300 test sentences P(referent) goes from" in words
    rerun(at, eff_metric="pairwise accuracy")
    words = text(at)
    assert "Switching **L0H1** off (zero) changes pairwise accuracy from 1 to" in words
    assert "over the task's first 300 test sentences pairwise accuracy goes from 1 to 0." in words
    # a set of heads off: what the input's answer becomes, beside the set table
    rerun(at, eff_data="input", eff_set="L0H0+L0H2+L0H3")
    mod = dict(model.named_modules())["stack.blocks.0.attn.hook_z"]
    h = mod.register_forward_hook(lambda m, i, z: z * torch.tensor([0.0, 1.0, 0.0, 0.0])[None, None, :, None])
    try:
        with torch.no_grad():
            rest = model(x)[0, q].softmax(-1)
    finally:
        h.remove()
    assert (f"with **L0H0+L0H2+L0H3** off the model answers **{tok.tokens_of([int(rest.argmax())])[0]}** "
            f"({rest.max().item():.4g})") in text(at)


def test_patching_refuses_unknown_words_and_contrasts_the_other_noun(tiny_zoo):
    path = tiny_zoo["tiny-coref"]
    ck = load_checkpoint(path)
    model, tok = ck.model.eval(), ck.tokenizer
    ex = example_choices(ck.build_task())[2][1]  # a validation sentence with a deciding word
    at = open_page("attention", path, att_tab="Effects", att_example=example_choices(ck.build_task())[2][0])
    rerun(at, eff_view="Patch from another input")
    assert at.selectbox(key="eff_patch_contrast").value == "other"
    assert at.selectbox(key="eff_patch_pos").value == ex.meta["attribute_index"]
    other = ex.tokens[ex.meta["candidate_indices"][1 - ex.meta["referent"]]]
    good = ex.tokens[ex.meta["candidate_indices"][ex.meta["referent"]]]
    assert f"against **{tok.tokens_of([other])[0]}**" in text(at)
    # the changed input's metric, recomputed: logit(referent) - logit(other noun) at the query
    corrupt = list(ex.tokens)
    corrupt[ex.meta["attribute_index"]] = tok.token_to_id(at.text_input(key="eff_patch_word").value)
    with torch.no_grad():
        lg = model(torch.tensor([corrupt]))[0, -1]
    assert f"{(lg[good] - lg[other]).item():.3f} on the changed one" in text(at)
    for word in ("zebra", "🦓"):
        rerun(at, eff_patch_word=word)
        assert any("not in this model's vocabulary" in m.value and "[UNK]" in m.value for m in at.info)
        assert not at.get("plotly_chart") or "eff_patch_pos_fig" not in str(at.get("plotly_chart"))
    rerun(at, eff_patch_word=tok.tokens_of([ex.tokens[ex.meta["attribute_index"]]])[0],
          eff_patch_contrast="word", eff_patch_contrast_word="zebra")
    assert any("not in this model's vocabulary" in m.value for m in at.info)
    rerun(at, eff_patch_contrast="changed")
    assert "Answer **" in text(at)
