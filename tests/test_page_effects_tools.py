"""The Effects tab's additions of issue 36 in AppTest (ui/effects.py spreads, ui/effects_tools.py):
every chart against an independent computation here — plain forward hooks, plain autograd, a hand
bootstrap, weights sliced by hand — on the tiny pronoun model."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, heatmap_z, open_page, rerun, text

from tfviz.analysis import paths as pp
from tfviz.analysis import spread as sp
from tfviz.analysis.explorer import example_choices
from tfviz.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


def hooked(model, x, edits):
    mods = dict(model.named_modules())
    hs = [mods[f"stack.{n}"].register_forward_hook(lambda m, i, o, fn=fn: fn(o)) for n, fn in edits]
    try:
        with torch.no_grad():
            return model(x)
    finally:
        for h in hs:
            h.remove()


def zero(h):
    def fn(z):
        z = z.clone()
        z[:, :, h] = 0
        return z
    return fn


def test_spreads_gradients_paths_and_weights_on_a_pronoun_model(tiny_zoo):
    path = tiny_zoo["tiny-coref"]
    ck = load_checkpoint(path)
    model, task = ck.model.eval(), ck.build_task()
    at = open_page("attention", path, att_tab="Effects", att_layer=1, att_head=2)
    rerun(at, eff_data="task")
    # ---- spreads: each head's mean change with its bootstrap interval over the 300 sentences
    exs = task.examples("test")[:300]
    n = max(len(e.tokens) for e in exs)
    x = torch.tensor([list(e.tokens) + [0] * (n - len(e.tokens)) for e in exs])
    rows = torch.arange(len(exs))
    q = torch.tensor([e.meta["query_index"] for e in exs])
    ref = x[rows, torch.tensor([e.meta["candidate_indices"][e.meta["referent"]] for e in exs])]

    def p_ref(logits):
        return logits[rows, q].softmax(-1)[rows, ref].double().numpy()
    with torch.no_grad():
        base = p_ref(model(x))
    fig = chart(at, "eff_intervals")
    points = {name: (y, up, down) for t in fig["data"] for name, y, up, down in
              zip(t["x"], arr(t["y"]), arr(t["error_y"]["array"]), arr(t["error_y"]["arrayminus"]))}
    d = p_ref(hooked(model, x, [("blocks.1.attn.hook_z", zero(2))])) - base
    w = np.random.default_rng(0).multinomial(300, np.full(300, 1 / 300), size=sp.N_BOOT)
    boot = np.array([(d * c).sum() / 300 for c in w])
    y, up, down = points["L1H2"]
    assert y == pytest.approx(d.mean(), abs=1e-5)
    assert y + up == pytest.approx(np.percentile(boot, 97.5), abs=1e-5)
    assert y - down == pytest.approx(np.percentile(boot, 2.5), abs=1e-5)
    assert "95% bootstrap interval" in text(at) and "n = 300" in text(at)
    assert "±" in str([m.value for m in at.metric])

    # ---- gradients: the estimate (x) from plain autograd, the real patch (y) from plain hooks
    ex = example_choices(task)[0][1]  # the page's default input
    new = ex.tokens[2]
    pos = next(i for i, t in enumerate(ex.tokens) if i > 2 and t != new and i < ex.meta["query_index"] - 1)
    rerun(at, eff_data="input", eff_view="Gradients & paths", eff_grad_pos=pos,
          eff_grad_word=ck.tokenizer.tokens_of([new])[0])
    clean = torch.tensor([ex.tokens])
    corrupt = clean.clone()
    corrupt[0, pos] = new
    with torch.no_grad():
        good = int(model(clean)[0, -1].argmax())
        ranked = model(corrupt)[0, -1].argsort(descending=True).tolist()
    bad = ranked[0] if ranked[0] != good else ranked[1]

    def ld(logits):
        return (logits[0, -1, good] - logits[0, -1, bad]).float()
    fig = chart(at, "eff_grad_head")
    pts = {lab: (xv, yv) for t in fig["data"] if t.get("text") for lab, xv, yv in zip(t["text"], arr(t["x"]), arr(t["y"]))}
    zc = {}
    hooked(model, clean, [("blocks.0.attn.hook_z", lambda z: zc.setdefault("z", z.clone()))])
    kept = {}

    def keep(z):
        z.retain_grad()
        kept["z"] = z
    mods = dict(model.named_modules())
    h = mods["stack.blocks.0.attn.hook_z"].register_forward_hook(lambda m, i, o: keep(o))
    try:
        out = model(corrupt)
        ld(out).backward()
    finally:
        h.remove()
        model.zero_grad(set_to_none=True)
    z = kept["z"]
    want_est = float(((zc["z"] - z.detach()) * z.grad)[:, :, 1].sum())

    def put(zz):
        zz = zz.clone()
        zz[:, :, 1] = zc["z"][:, :, 1]
        return zz
    with torch.no_grad():
        want_real = float(ld(hooked(model, corrupt, [("blocks.0.attn.hook_z", put)])) - ld(model(corrupt)))
    assert pts["L0H1"][0] == pytest.approx(want_est, abs=1e-4)
    assert pts["L0H1"][1] == pytest.approx(want_real, abs=1e-4)
    assert "correlation r =" in text(at)
    # path patching into L1H2's keys: the page's grid is the library's (tested by hand in test_tl_tools)
    from tfviz.analysis import interventions as iv
    e = pp.path_sweep(model, corrupt, [pp.Receiver(1, 2, "k")], iv.logit_diff(good, bad), reference=clean)
    with torch.no_grad():
        span = float(ld(model(clean)) - ld(model(corrupt)))
    zk = heatmap_z(chart(at, "eff_path_k"))
    assert np.isnan(zk[1]).all()
    np.testing.assert_allclose(zk[0], (e.values[0] - e.baseline) / span, atol=1e-4)

    # ---- weights: singular values and composition from the weights sliced by hand
    rerun(at, eff_view="Weights & composition", eff_comp_role="earlier heads into this one")
    attn1, attn0 = model.stack.blocks[1].attn, model.stack.blocks[0].attn
    W1, W0 = attn1.W_qkv.weight.detach().double(), attn0.W_qkv.weight.detach().double()
    Wq, Wk = W1[16:24].T, W1[32 + 16:32 + 24].T  # head 2: d_head 8, 4 heads
    bars = {t["name"]: arr(t["y"]) for t in chart(at, "eff_svd")["data"]}
    np.testing.assert_allclose(bars["QK"], torch.linalg.svdvals(Wq @ Wk.T)[:8].numpy(), rtol=1e-4, atol=1e-6)
    ov0 = W0[64 + 0:64 + 8].T @ attn0.W_o.weight.detach().double()[:, 0:8].T  # L0H0's OV
    qk1 = Wq @ Wk.T
    k_comp = torch.linalg.norm(ov0 @ qk1.T) / (torch.linalg.norm(ov0) * torch.linalg.norm(qk1))
    zc_ = heatmap_z(chart(at, "eff_comp_K"))
    assert zc_[0, 0] == pytest.approx(float(k_comp), rel=1e-4) and np.isnan(zc_[1]).all()
    # what L1H2 writes at each position: direct logit attribution at that position
    from tfviz.analysis import attribution as at_
    bars = arr(chart(at, "eff_writes")["data"][0]["y"])
    with torch.no_grad():
        lg = model(clean)[0]
    for p in (3, len(ex.tokens) - 1):
        a, b = lg[p].topk(2).indices.tolist()
        dla = at_.direct_logit_attribution(model, clean, a, b, pos=p)
        assert bars[p] == pytest.approx(float(dla.parts["L1H2"][0]), abs=1e-4)
    assert not at.error, [e_.value for e_ in at.error]


def test_the_new_views_say_why_not_on_other_models(tiny_zoo):
    at = open_page("attention", tiny_zoo["tiny-translate"], att_tab="Effects")
    rerun(at, eff_view="Gradients & paths")
    assert "one-stack models" in text(at)
    rerun(at, att_site="cross-attention", eff_view="Weights & composition")
    assert "self-attention heads" in text(at)
    at = open_page("attention", tiny_zoo["tiny-coref"], att_tab="Effects", att_layer=0, att_head=1)
    rerun(at, eff_view="Gradients & paths")
    assert "Type a word that is one token" in text(at)  # the mission sentence has no counterfactual
    rerun(at, eff_grad_pos=2, eff_grad_word="the")
    assert "L0 heads read only the embeddings" in text(at) and "correlation r =" in text(at)
    rerun(at, eff_view="Weights & composition", eff_comp_role="earlier heads into this one")
    assert "no earlier head composes into them" in text(at)
    rerun(at, eff_comp_role="this one into later heads")
    z = heatmap_z(chart(at, "eff_comp_V"))
    assert z.shape == (2, 4) and np.isnan(z[0]).all() and np.isfinite(z[1]).all()
    assert not at.error
