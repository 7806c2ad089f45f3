"""Per-layer gradient norms recorded while training (against an independent recomputation), and
pairs of runs that differ in exactly one setting (same seed, same batches, same steps)."""
from __future__ import annotations

import math

import pytest
import torch

from tfviz import ModelConfig
from tfviz.analysis.gradients import group_grad_norms, group_of, layer_of
from tfviz.tasks import make_task
from tfviz.tasks.base import IGNORE
from tfviz.train import TrainConfig, model_config_for, new_model, train
from tfviz.runs.pairs import (SETTINGS, attention_kind, check_pair, differences, make_pair)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def task():
    return make_task({"name": "lm", "seed": 0, "block": 16})


def tiny(task, **kw):
    return model_config_for(task, **{**dict(arch="decoder", pos="rope", n_layers=2, n_heads=2,
                                            d_model=16), **kw})


# ------------------------------------------------------------------------------ gradient norms
@pytest.mark.parametrize("name, group", [
    ("embed.weight", "embed"), ("stack.pos.table.weight", "embed"),
    ("stack.blocks.3.ln1.weight", "L3.attn"), ("stack.blocks.3.attn.W_qkv.weight", "L3.attn"),
    ("stack.blocks.0.ln2.bias", "L0.mlp"), ("stack.blocks.0.mlp.W_out.weight", "L0.mlp"),
    ("stack.ln_final.weight", "head"), ("unembed.weight", "head"),
    ("encoder.blocks.1.attn.W_o.weight", "enc.L1.attn"), ("encoder.ln_final.bias", "enc.final"),
    ("decoder.blocks.0.cross_attn.W_kv.weight", "dec.L0.cross"),
    ("decoder.blocks.0.ln_cross.weight", "dec.L0.cross"), ("decoder.pos.bias.weight", "dec.embed"),
    ("rnn.weight_ih_l0", "rnn"),  # any other model: its top-level module
])
def test_group_of(name, group):
    assert group_of(name) == group


def test_layer_of():
    assert [layer_of(g) for g in ("embed", "L0.attn", "L11.mlp", "dec.L2.cross", "head")] == \
        [None, 0, 11, 2, None]


def test_every_parameter_of_every_arch_has_a_block_or_a_known_group():
    for arch, pos in (("decoder", "learned"), ("encoder", "t5"), ("encoder-decoder", "alibi")):
        cfg = ModelConfig(arch=arch, vocab_size=20, n_layers=2, d_model=16, n_heads=2, max_len=16, pos=pos)
        groups = {group_of(n) for n, _ in new_model(cfg, 0).named_parameters()}
        known = {"embed", "head", "enc.embed", "dec.embed", "enc.final"}
        assert all(layer_of(g) is not None or g in known for g in groups), groups


def _independent_norms(model, batch) -> dict[str, float]:
    """Gradient of the mean token loss, grouped by hand from the parameter names."""
    model.zero_grad(set_to_none=True)
    logits = model(batch.tokens)
    keep = batch.targets != IGNORE
    torch.nn.functional.cross_entropy(logits[keep], batch.targets[keep]).backward()
    sums: dict[str, float] = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        if parts[:2] == ["stack", "blocks"]:
            part = {"ln1": "attn", "attn": "attn", "ln2": "mlp", "mlp": "mlp"}[parts[3]]
            g = f"L{parts[2]}.{part}"
        elif parts[0] == "unembed" or parts[1:2] == ["ln_final"]:
            g = "head"
        else:
            g = "embed"
        sums[g] = sums.get(g, 0.0) + float((p.grad.double() ** 2).sum())
    return {g: math.sqrt(s) for g, s in sums.items()}


def test_group_grad_norms_match_a_recomputation(task):
    model = new_model(tiny(task, pos="learned"), 0)
    batch = task.batch("train", 8, torch.Generator().manual_seed(0))
    want = _independent_norms(model, batch)
    got = group_grad_norms(model)
    assert list(got) == ["embed", "L0.attn", "L0.mlp", "L1.attn", "L1.mlp", "head"]
    for g, v in want.items():
        assert got[g] == pytest.approx(v, rel=1e-3)


def test_the_loop_records_each_logged_steps_norms_before_clipping(task):
    cfg = tiny(task)
    tc = TrainConfig(steps=4, batch_size=8, lr=1e-3, warmup=0, grad_clip=1e-3, log_every=2,
                     eval_every=0, eval_examples=8, snapshot_every=0, checkpoint_every=0, device="cpu")
    result = train(new_model(cfg, 0), task, tc)
    logged = [h["step"] for h in result.history]
    assert logged == [1, 2, 4] and all("grad_norms" in h for h in result.history)  # first step at once
    # replay: the same initial weights and batches, stepping by hand up to step 2
    model = new_model(cfg, 0)
    gen = torch.Generator().manual_seed(tc.seed)
    from tfviz.train.optim import lr_at, make_optimizer
    opt = make_optimizer(model, tc)
    model.train()
    for step in (1, 2):
        batch = task.batch("train", tc.batch_size, gen)
        want = _independent_norms(model, batch)
        total = float(torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        opt.step()
    at2 = result.history[1]
    got = at2["grad_norms"]
    for g, v in want.items():
        assert got[g] == pytest.approx(v, rel=2e-3), g
    assert math.sqrt(sum(v * v for v in got.values())) == pytest.approx(total, rel=2e-3)
    assert at2["grad_norm"] == pytest.approx(total, rel=1e-4)
    assert max(got.values()) > 10 * tc.grad_clip  # the raw gradient, not the clipped one


def test_grad_norms_survive_a_checkpoint(task, tmp_path):
    from tfviz import load_checkpoint

    tc = TrainConfig(steps=2, batch_size=4, warmup=0, log_every=1, eval_every=0, eval_examples=4,
                     snapshot_every=0, checkpoint_every=0, device="cpu")
    train(new_model(tiny(task), 0), task, tc, checkpoint=tmp_path / "run")
    ck = load_checkpoint(tmp_path / "run.safetensors")
    assert set(ck.history[0]["grad_norms"]) == {"embed", "L0.attn", "L0.mlp", "L1.attn", "L1.mlp", "head"}


# ------------------------------------------------------------------------------ pairs
def test_make_pair_changes_one_setting_and_names_runs_after_it(task):
    base, tc = tiny(task, n_heads=4), TrainConfig(steps=3, warmup=0)
    runs = make_pair(base, tc, "norm", ["pre", "post"], stem="lm")
    assert [r.name for r in runs] == ["lm-pre-norm", "lm-post-norm"]
    assert [r.model_config.norm for r in runs] == ["pre", "post"]
    assert runs[0].model_config.replace(norm="post") == runs[1].model_config
    kinds = make_pair(base, tc, "attention", ["MHA", "GQA", "MQA"])
    assert [r.model_config.n_kv_heads for r in kinds] == [4, 2, 1]
    assert [attention_kind(r.model_config) for r in kinds] == ["MHA", "GQA", "MQA"]
    heads = make_pair(base.replace(n_kv_heads=1), tc, "n_heads", [2, 4])  # MQA stays MQA
    assert [(r.model_config.n_heads, r.model_config.n_kv_heads) for r in heads] == [(2, 1), (4, 1)]
    wide = make_pair(base, tc, "d_model", [16, 32])  # d_ff follows at the same ratio
    assert [r.model_config.d_ff for r in wide] == [64, 128]
    assert [r.label for r in make_pair(base, tc, "window", [None, 4])] == ["full", "window-4"]
    assert [r.label for r in make_pair(base, tc, "n_layers", [1, 2])] == ["1-layer", "2-layers"]
    assert [r.label for r in make_pair(base, tc, "pos", ["rope", "alibi"])] == ["rope", "alibi"]
    for r in runs + kinds + heads + wide:
        assert r.train_config == tc


def test_check_pair_refuses_anything_but_exactly_one_difference(task):
    base, tc = tiny(task, n_heads=4), TrainConfig(steps=3, warmup=0)
    assert check_pair([(base, tc), (base.replace(norm="post"), tc)]) == "norm"
    with pytest.raises(ValueError, match="identical"):
        check_pair([(base, tc), (base, tc)])
    with pytest.raises(ValueError, match="these differ: pos, norm"):
        check_pair([(base, tc), (base.replace(norm="post", pos="alibi"), tc)])
    with pytest.raises(ValueError, match="train the same way; these differ: seed"):
        check_pair([(base, tc), (base.replace(norm="post"), tc.replace(seed=1))])
    with pytest.raises(ValueError, match="field d_ff"):
        check_pair([(base, tc), (base.replace(d_ff=32), tc)])
    with pytest.raises(ValueError, match="attention, n_heads"):  # GQA x2 -> GQA x4 is two changes
        check_pair([(base.replace(n_kv_heads=2), tc), (base.replace(n_heads=8, n_kv_heads=2), tc)])
    with pytest.raises(ValueError, match="2 to 4 runs"):
        check_pair([(base, tc)])
    with pytest.raises(ValueError, match="2 to 4 runs"):
        make_pair(base, tc, "pos", ["none", "rope", "alibi", "t5", "learned"])
    with pytest.raises(ValueError, match="unknown setting"):
        make_pair(base, tc, "dropout", [0.0, 0.1])
    with pytest.raises(ValueError, match="not one of"):
        make_pair(base, tc, "norm", ["pre", "middle"])
    with pytest.raises(ValueError, match="heads = 3"):
        make_pair(base, tc, "n_heads", [4, 3])
    assert differences([base, base.replace(window=4)]) == ["window"]
    assert set(SETTINGS) == {"pos", "attention", "norm", "window", "n_layers", "n_heads", "d_model"}


class _Spy:
    """A task that remembers every training batch it hands out."""

    def __init__(self, task):
        self.task, self.batches = task, []

    def __getattr__(self, name):
        return getattr(self.task, name)

    def batch(self, split, batch_size, generator):
        b = self.task.batch(split, batch_size, generator)
        if split == "train":
            self.batches.append(b.tokens.clone())
        return b


def test_the_runs_of_a_pair_see_identical_batches_in_the_same_order(task):
    runs = make_pair(tiny(task), TrainConfig(steps=5, batch_size=4, warmup=0, log_every=5,
                                             eval_every=0, eval_examples=4, snapshot_every=0,
                                             checkpoint_every=0, device="cpu", seed=3),
                     "norm", ["pre", "post"])
    seen = []
    for r in runs:
        spy = _Spy(task)
        result = train(new_model(r.model_config, r.train_config.seed), spy, r.train_config)
        assert result.step == 5
        seen.append(spy.batches)
    assert len(seen[0]) == 5
    assert all(torch.equal(a, b) for a, b in zip(*seen))
    assert not torch.equal(seen[0][0], seen[0][1])  # the batches themselves change step to step
    # same seed: the same initial weights (post-norm has no final norm: blocks already end in one)
    a, b = (new_model(r.model_config, r.train_config.seed).state_dict() for r in runs)
    assert set(a) - set(b) == {"stack.ln_final.weight", "stack.ln_final.bias"}
    assert all(torch.equal(a[k], b[k]) for k in b)


# ------------------------------------------------------------------------------ through the job manager
def test_a_pair_queues_all_or_none_and_counts_against_the_session_limit(task, tmp_path):
    from tfviz.analysis.compare import curves_frame
    from tfviz.runs.jobs import JobLimitError, JobManager
    from tfviz.runs.pairs import submit_pair

    tc = TrainConfig(steps=3, batch_size=4, warmup=0, log_every=1, eval_every=0, eval_examples=4,
                     snapshot_every=0, checkpoint_every=0, device="cpu")
    runs = make_pair(tiny(task), tc, "n_layers", [1, 2], stem="p")
    jobs = JobManager(max_concurrent=1, torch_threads=1, per_owner=3)
    other = jobs.submit(tiny(task), task, tc, owner="bob", name="bob-run")
    with pytest.raises(JobLimitError, match="4 runs at once is more than the 3"):
        submit_pair(jobs, make_pair(tiny(task), tc, "n_layers", [1, 2, 3, 4]), task, owner="amy")
    ids = submit_pair(jobs, runs, task, owner="amy", directory=tmp_path)
    assert jobs.free_slots("amy") == 1
    with pytest.raises(JobLimitError, match="already have 2 trainings running or queued and asked "
                                            "for 2 more"):
        submit_pair(jobs, runs, task, owner="amy", names=["x", "y"])
    assert len(jobs.jobs(owner="amy")) == 2  # nothing of the refused pair was queued
    assert jobs.wait_all(timeout=300)
    snaps = [jobs.snapshot(i) for i in ids]
    assert [s.state for s in snaps] == ["done", "done"] and jobs.snapshot(other).state == "done"
    assert [s.name for s in snaps] == ["p-1-layer", "p-2-layers"]
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["p-1-layer.safetensors",
                                                                      "p-2-layers.safetensors"]
    df = curves_frame({s.name: s.history for s in snaps}, ["train_loss"])
    assert sorted(df.groupby("model")["step"].apply(list).tolist()) == [[1, 2, 3], [1, 2, 3]]
    with pytest.raises(ValueError, match="identical"):
        submit_pair(jobs, [runs[0], runs[0]], task, owner="amy", names=["a", "b"])


def test_preset_pair_is_the_tasks_quick_preset_made_quick(task):
    from tfviz.runs.pairs import QUICK_STEPS, preset_pair
    from tfviz.train.presets import CPU, presets_for

    runs = preset_pair(task, "pos", ["rope", "alibi"], lr=1e-2, warmup=0)
    pre = presets_for("lm")[CPU]
    assert [r.name for r in runs] == ["lm-rope", "lm-alibi"]
    tc = runs[0].train_config
    assert (tc.steps, tc.lr, tc.warmup, tc.batch_size) == (QUICK_STEPS, 1e-2, 0, pre.train.batch_size)
    assert runs[0].model_config.d_model == 32 and runs[0].model_config.n_layers == pre.model["n_layers"]
    assert preset_pair(task, "norm", ["pre", "post"], steps=3)[0].train_config.warmup <= 2
    with pytest.raises(ValueError, match="steps"):
        preset_pair(task, "norm", ["pre", "post"], steps=0)


def test_parse_values_reads_what_a_form_types(task):
    from tfviz.runs.pairs import DEFAULT_VALUES, parse_values

    assert parse_values("norm", "Pre, post") == ["pre", "post"]
    assert parse_values("attention", "mha,GQA , MQA") == ["MHA", "GQA", "MQA"]
    assert parse_values("window", "full, 4") == [None, 4]
    assert parse_values("n_layers", "1, 2, 3") == [1, 2, 3]
    with pytest.raises(ValueError, match="not one of"):
        parse_values("pos", "rope, spiral")
    with pytest.raises(ValueError, match="not a whole number"):
        parse_values("d_model", "32, wide")
    with pytest.raises(ValueError, match="separated by commas"):
        parse_values("norm", " , ")
    base = tiny(task, n_heads=4)
    for setting, text in DEFAULT_VALUES.items():  # every default makes a valid pair
        assert len(make_pair(base, TrainConfig(steps=3, warmup=0), setting, parse_values(setting, text))) >= 2
