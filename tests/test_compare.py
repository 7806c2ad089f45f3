"""Models side by side (tfviz.analysis.compare, tfviz.viz.compare/training): every number
against an independent recomputation on tiny real checkpoints."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from tfviz import load_checkpoint
from tfviz.analysis.compare import (common_basis, cost_frame, curves_frame, grad_norm_frame,
                                    head_roles, history_summary, layer_grad_norms, loss_spikes,
                                    next_token_batch, patterns_on, position_frame, task_batch)
from tfviz.recording import record
from tfviz.tasks import make_task
from tfviz.tasks.base import IGNORE
from tfviz.train import TrainConfig, model_config_for, new_model, train
from tfviz import viz

torch.set_num_threads(1)
LM = {"name": "lm", "seed": 0, "block": 16}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Two 2-layer decoders on one task, pre- and post-norm, 6 steps each."""
    folder = tmp_path_factory.mktemp("pair")
    task = make_task(LM)
    tc = TrainConfig(steps=6, batch_size=8, warmup=0, log_every=2, eval_every=3, eval_examples=16,
                     snapshot_every=0, checkpoint_every=0, device="cpu")
    out = {}
    for norm in ("pre", "post"):
        cfg = model_config_for(task, arch="decoder", pos="rope", n_layers=2, n_heads=2, d_model=16,
                               norm=norm, n_kv_heads=1 if norm == "post" else 2)
        train(new_model(cfg, 0), task, tc, checkpoint=folder / norm)
        out[norm] = load_checkpoint(folder / f"{norm}.safetensors")
    return out


def one_step_checkpoint(task, path):
    """A 1-layer decoder on ``task`` trained one step, saved at ``path`` and loaded back."""
    cfg = model_config_for(task, arch="decoder", pos="rope", n_layers=1, n_heads=2, d_model=16)
    train(new_model(cfg, 0), task, TrainConfig(steps=1, batch_size=4, warmup=0, eval_every=0,
                                               eval_examples=4, snapshot_every=0,
                                               checkpoint_every=0, device="cpu"),
          checkpoint=path)
    return load_checkpoint(path.with_name(path.name + ".safetensors"))


def test_common_basis_is_the_task_or_the_tokenizer_else_a_message(pair, tmp_path):
    a, b = pair["pre"], pair["post"]
    basis = common_basis([("a", a), ("b", b)])
    assert basis.kind == "task" and basis.task["name"] == "lm" and "task lm" in basis.sentence()
    assert "None" not in basis.sentence() and "=," not in basis.sentence()  # unset fields left out
    c = one_step_checkpoint(make_task({**LM, "block": 8}), tmp_path / "c")  # another task spec,
    assert common_basis([("a", a), ("c", c)]).kind == "tokenizer"      # same corpus and tokenizer
    d = one_step_checkpoint(make_task({"name": "coref", "seed": 0}), tmp_path / "d")
    with pytest.raises(ValueError, match="share neither a task nor a tokenizer"):
        common_basis([("a", a), ("d", d)])
    with pytest.raises(ValueError, match="2 to 4 models"):
        common_basis([("a", a)])
    with pytest.raises(ValueError, match="each model once"):
        common_basis([("a", a), ("a", b)])


def test_curves_and_summary_read_the_history(pair):
    h = pair["pre"].history
    df = curves_frame({"pre": h})
    assert df[df.metric == "train_loss"]["step"].tolist() == [h_["step"] for h_ in h]
    assert df[df.metric == "val_loss"]["step"].tolist() == [3, 6]
    s = history_summary(h)
    assert s["steps"] == 6 and s["last_val_loss"] == pytest.approx(h[-1]["val_loss"])


def test_grad_norm_frame_and_per_layer_norms(pair):
    h = pair["post"].history
    df = grad_norm_frame(h)
    assert set(df["group"]) == {"embed", "L0.attn", "L0.mlp", "L1.attn", "L1.mlp", "head"}
    per = layer_grad_norms(h)
    for layer in (0, 1):
        want = np.mean([math.sqrt(x["grad_norms"][f"L{layer}.attn"] ** 2 + x["grad_norms"][f"L{layer}.mlp"] ** 2)
                        for x in h])
        assert per.loc[per.layer == layer, "norm"].item() == pytest.approx(want)
    assert per["steps"].tolist() == [len(h), len(h)]
    assert layer_grad_norms(h, until=2)["steps"].tolist() == [2, 2]  # steps 1 and 2


def test_loss_spikes():
    hist = [{"step": s, "train_loss": v} for s, v in
            enumerate([5.0, 3.0, 2.0, 2.1, 3.0, 2.2, 2.05, 2.7, 1.5, math.nan], 1)]
    spikes = loss_spikes(hist)
    assert spikes["step"].tolist() == [5, 8] and spikes["rise"].tolist() == pytest.approx([1.0, 0.7])
    # not re-armed: 2.7 after 3.0 without settling back within 0.25 would not count twice
    assert loss_spikes([{"step": i, "train_loss": v} for i, v in enumerate([2, 3, 2.9, 3.1])])["step"].tolist() == [1]


def test_position_frame_matches_a_per_example_recomputation(pair):
    task = pair["pre"].shared_task()
    batch = task_batch(task, n_examples=12)
    models = {k: ck.model for k, ck in pair.items()}
    df = position_frame(models, batch, batch_size=5)
    for name, model in models.items():
        model.eval()
        losses, rights = {}, {}
        with torch.no_grad():
            for i in range(batch.tokens.shape[0]):
                logits = model(batch.tokens[i:i + 1])[0]
                for p in range(batch.tokens.shape[1]):
                    y = int(batch.targets[i, p])
                    if y == IGNORE:
                        continue
                    losses.setdefault(p, []).append(float(torch.nn.functional.cross_entropy(logits[p], torch.tensor(y))))
                    rights.setdefault(p, []).append(int(logits[p].argmax()) == y)
        got = df[df.model == name].set_index("position")
        assert sorted(got.index) == sorted(losses)
        for p in losses:
            assert got.loc[p, "loss"] == pytest.approx(np.mean(losses[p]), rel=1e-4)
            assert got.loc[p, "accuracy"] == pytest.approx(np.mean(rights[p]))
            assert got.loc[p, "tokens"] == len(losses[p])
    one = next_token_batch([3, 4, 5])
    assert one.targets.tolist() == [[4, 5, IGNORE]]


def test_patterns_on_one_input_are_what_record_gives(pair):
    ids = pair["pre"].tokenizer.encode_ids("the cat sees the dog")
    pats = patterns_on({k: ck.model for k, ck in pair.items()}, ids)
    for k, ck in pair.items():
        rec = record(ck.model, torch.tensor([ids]), names=["blocks.1.attn.hook_pattern"])
        assert pats[k].shape == (2, 2, len(ids), len(ids))
        assert np.allclose(pats[k][1], rec["blocks.1.attn.hook_pattern"][0].numpy())


def test_head_roles_mark_differences(pair):
    models = {k: ck.model for k, ck in pair.items()}
    wide, long = head_roles(models, pair["pre"].shared_task(), n_examples=16)
    assert list(wide.columns) == ["layer", "head", "pre", "post", "differs"]
    assert len(wide) == 4 and set(long["model"]) == {"pre", "post"}
    same = wide["pre"] == wide["post"]
    assert (wide["differs"] == ~same).all()
    fig = viz.head_role_grid(wide, ["pre", "post"])
    assert fig.data[0].z.shape == (2, 5)


def test_cost_frame_kv_bytes_equal_a_real_cache(pair):
    from tfviz.zoo.measure import kv_bytes_per_token

    models = {k: ck.model for k, ck in pair.items()}
    df = cost_frame(models).set_index("model")
    for k, m in models.items():
        assert df.loc[k, "parameters"] == sum(p.numel() for p in m.parameters())
        assert df.loc[k, "kv_bytes_per_token"] == kv_bytes_per_token(m, torch.tensor([[1, 2, 3, 4]]))
    assert df.loc["post", "kv_bytes_per_token"] * 2 == df.loc["pre", "kv_bytes_per_token"]  # MQA


def test_step_seconds_times_a_real_step_and_cleans_up(pair):
    from tfviz.bench.measure import step_seconds

    m = pair["pre"].model
    b = task_batch(pair["pre"].shared_task(), n_examples=4)
    m.eval()
    t = step_seconds(m, b.inputs, b.targets, repeats=2)
    assert t > 0 and not m.training and all(p.grad is None for p in m.parameters())


def test_figures_build_from_the_frames(pair):
    hist = {k: ck.history for k, ck in pair.items()}
    fig = viz.compare_curves(curves_frame(hist))
    assert {t.name for t in fig.data} >= {"pre: train loss", "post: validation loss"}
    fig = viz.grad_norm_heatmap({k: grad_norm_frame(h) for k, h in hist.items()})
    assert len(fig.data) == 2
    bars = pd.concat([layer_grad_norms(h).assign(model=k) for k, h in hist.items()])
    assert len(viz.layer_grad_norm_bars(bars).data) == 2
    df = position_frame({k: ck.model for k, ck in pair.items()},
                        task_batch(pair["pre"].shared_task(), n_examples=4))
    fig = viz.position_curves(df, value="accuracy", train_length=16)
    assert [t.name for t in fig.data] == ["pre", "post"]
    with pytest.raises(ValueError, match="no gradient norms"):
        viz.grad_norm_heatmap({"x": grad_norm_frame([{"step": 1, "train_loss": 1.0}])})


def test_suggest_family_then_same_task_then_the_norm_pair():
    from tfviz.analysis.compare import suggest

    def card(pos, task="lm", family=None, tok="w"):
        return {"model_config": {"pos": pos, "arch": "decoder"}, "task": {"name": task},
                "tokenizer": tok, "extra": {"family": family} if family else {}}

    cards = {"alibi": card("alibi", family="positional"), "rope": card("rope", family="positional"),
             "learned": card("learned", family="positional"), "none": card("none", family="positional"),
             "sin": card("sinusoidal", family="positional"), "t5": card("t5", family="positional"),
             "mine": card("rope"), "other": card("rope", tok="x"), "coref": card("rope", task="coref"),
             "pre": card("rope", task="lm2", family="norm"), "post": card("rope", task="lm2", family="norm")}
    assert suggest(cards, "rope") == ["sin", "learned", "rope", "alibi"]
    assert suggest(cards, "mine")[:1] == ["mine"] and "other" not in suggest(cards, "mine")
    assert suggest(cards, "coref") == ["pre", "post"] == suggest(cards, None)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_cost_frame_recurrent_state_bytes_equal_a_real_cache(cell):
    """A recurrent network carries its state instead of a KV cache: the table's bytes are those of
    the real cache after a forward, the same at 4 and at 40 positions (0 per token, no heads)."""
    from tfviz.model.recurrent import RecurrentConfig, RecurrentModel

    torch.manual_seed(0)
    model = RecurrentModel(RecurrentConfig(vocab_size=20, d_model=8, d_hidden=12, n_layers=2, cell=cell))
    row = cost_frame({"r": model}, pos=40).set_index("model").loc["r"]
    for n in (4, 40):
        cache = model.new_cache()
        with torch.no_grad():
            model(torch.randint(1, 20, (1, n)), cache=cache)
        assert row["kv_bytes"] == cache.nbytes
    assert row["kv_bytes_per_token"] == 0 and row["heads"] == 0 and row["layers"] == 2


def test_an_encoder_decoders_three_kinds_of_attention_on_one_input():
    """Encoder-decoders compare on each kind of attention (recorded names from ``hook_name``),
    a set mixing them with a decoder-only model on the one kind they share; head roles are
    scored on the chosen stack's self-attention and refused with a reason for cross-attention."""
    from tfviz.analysis.compare import attention_views, view_site
    from tfviz.model.hooks import hook_name

    task = make_task({"name": "copy", "seed": 0})
    models = {n: new_model(model_config_for(task, arch="encoder-decoder", n_layers=1, n_heads=2,
                                            d_model=16, norm=n), 0) for n in ("pre", "post")}
    e = task.examples("validation")[0]
    ids, src = list(e.tokens), list(e.src)
    views, note = attention_views({n: m.config for n, m in models.items()})
    assert views == ["encoder self-attention", "decoder self-attention", "cross-attention"] and note == ""
    for view, stack, attention, shape in (("encoder self-attention", "encoder", "attn", (len(src),) * 2),
                                          ("decoder self-attention", "decoder", "attn", (len(ids),) * 2),
                                          ("cross-attention", "decoder", "cross_attn", (len(ids), len(src)))):
        pats = patterns_on(models, ids, view, src)
        name = hook_name(0, f"{attention}.hook_pattern", stack)
        for n, m in models.items():
            rec = record(m, torch.tensor([src]), torch.tensor([ids]), names=[name])
            assert pats[n].shape == (1, 2, *shape)
            np.testing.assert_allclose(pats[n][0], rec[name][0].numpy(), atol=1e-6)
    wide, long = head_roles(models, task, "encoder self-attention", n_examples=8)
    assert list(wide.columns) == ["layer", "head", "pre", "post", "differs"] and len(wide) == 2
    with pytest.raises(ValueError, match="scored on self-attention"):
        head_roles(models, task, "cross-attention")
    with pytest.raises(ValueError, match="share none"):
        head_roles(models, None, "decoder self-attention")
    with pytest.raises(ValueError, match="needs a source"):
        patterns_on(models, ids, "decoder self-attention")
    dtask = make_task({"name": "copy", "seed": 0, "arch": "decoder"})
    dec = new_model(model_config_for(dtask, arch="decoder", n_layers=1, n_heads=2, d_model=16), 0)
    views, note = attention_views({"dec": dec.config, "pre": models["pre"].config})
    assert views == ["decoder self-attention"] and "share is decoder self-attention" in note
    assert view_site(dec.config, views[0]).name(0, "hook_pattern") == hook_name(0, "attn.hook_pattern")
    pats = patterns_on({"dec": dec, "pre": models["pre"]}, ids, views[0], src)
    want = record(dec, torch.tensor([ids]), names=[hook_name(0, "attn.hook_pattern")])
    np.testing.assert_allclose(pats["dec"][0], want[hook_name(0, "attn.hook_pattern")][0].numpy(), atol=1e-6)


def test_step_times_warm_every_model_up_then_take_turns(pair, monkeypatch):
    """Issue 30: the first model's step time included the process's warm-up (1,328 ms beside
    ~310 ms). Every model takes its untimed warm-up steps before any step is timed, and the timed
    steps go round the models in turn. (The order of calls is checked, not their speed.)"""
    from tfviz.bench import measure

    calls: list[tuple[str, bool]] = []
    timing = [False]
    models = {k: ck.model for k, ck in pair.items()}
    hooks = [m.register_forward_hook(lambda mod, i, o, name=name: calls.append((name, timing[0])))
             for name, m in models.items()]

    def timed_once(fn, device="cpu"):
        timing[0] = True
        try:
            fn()
        finally:
            timing[0] = False
        return 0.001 * (len(calls) % 7 + 1)  # any positive number

    monkeypatch.setattr(measure, "time_once", timed_once)
    b = task_batch(pair["pre"].shared_task(), n_examples=4)
    try:
        out = measure.step_times([(m, b.inputs, b.targets) for m in models.values()], repeats=3, warmup=2)
    finally:
        for h in hooks:
            h.remove()
    assert len(out) == 2 and all(t > 0 for t in out)
    names = list(models)
    assert calls[:4] == [(names[0], False)] * 2 + [(names[1], False)] * 2  # warm-up, untimed
    assert calls[4:] == [(n, True) for _ in range(3) for n in names]  # then in turn, timed
    assert all(p.grad is None for m in models.values() for p in m.parameters())
