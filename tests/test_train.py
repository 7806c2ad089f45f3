"""The training loop: config validation, schedules, learning, stop/resume, NaN and OOM handling."""
from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

import tfviz.train.loop as loop
from tfviz.train.checkpoint import load_checkpoint
from tfviz.model import Transformer
from tfviz.tasks import make_task
from tfviz.train import TrainConfig, lr_at, train
from tfviz.device import resolve_device
from tfviz.train.optim import param_groups
from tfviz.train.setup import model_config_for


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def copy_task(**kw):
    return make_task("copy", **{**dict(arch="decoder", n_symbols=8, min_len=3, max_len=6,
                                       n_train=2000, n_val=100, n_test=100), **kw})


def build(task, seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(model_config_for(task, **{**dict(d_model=32, n_heads=2, n_layers=2, pos="rope"), **kw}))


def quick(**kw) -> TrainConfig:
    base = dict(steps=12, batch_size=8, lr=3e-3, warmup=2, log_every=1, eval_every=6, eval_examples=20,
                snapshot_every=6, checkpoint_every=0)
    return TrainConfig(**{**base, **kw})


# ------------------------------------------------------------------------------ config
@pytest.mark.parametrize("field, value, message", [
    ("lr", 0, "lr=0 must be above 0"), ("lr", 5.0, "absurdly large"), ("lr", float("nan"), "finite"),
    ("steps", 0, "steps=0 must be between 1"), ("batch_size", 1.5, "whole number"),
    ("warmup", 50, "warmup=50 must be below steps=10"), ("schedule", "linear", "not one of 'cosine'"),
    ("weight_decay", -0.1, "weight_decay"), ("label_smoothing", 1.0, "label_smoothing"),
    ("grad_clip", -1.0, "grad_clip"), ("device", "tpu", "device='tpu'"), ("bf16", "yes", "bf16"),
    ("num_threads", 0, "num_threads"), ("eval_every", -1, "eval_every"), ("seed", -1, "seed"),
])
def test_config_rejects_bad_fields(field, value, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{"steps": 10, "warmup": 1, field: value})


def test_config_round_trip_and_unknown_fields():
    cfg = TrainConfig(steps=50, warmup=5, schedule="inverse_sqrt", bf16=False, grad_clip=None)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown train config field"):
        TrainConfig.from_dict({**cfg.to_dict(), "momentum": 0.9})
    with pytest.raises(ValueError, match="format_version"):
        TrainConfig.from_dict({**cfg.to_dict(), "format_version": 9})


def test_schedules():
    cos = TrainConfig(steps=100, warmup=10, lr=1e-3)
    assert lr_at(5, cos) == pytest.approx(5e-4) and lr_at(10, cos) == pytest.approx(1e-3)
    assert lr_at(100, cos) == pytest.approx(1e-4)  # ends at lr / 10
    assert all(lr_at(s, cos) >= lr_at(s + 1, cos) for s in range(10, 100))
    inv = TrainConfig(steps=1000, warmup=100, lr=2e-3, schedule="inverse_sqrt")
    d_model = 512  # Vaswani: d^-0.5 * min(s^-0.5, s * w^-1.5), peak rescaled to lr
    vaswani = [d_model ** -0.5 * min(s ** -0.5, s * 100 ** -1.5) for s in range(1, 1001)]
    ours = [lr_at(s, inv) for s in range(1, 1001)]
    assert max(ours) == pytest.approx(2e-3) and ours.index(max(ours)) == 99
    assert np.allclose(np.array(ours) / max(ours), np.array(vaswani) / max(vaswani))
    const = TrainConfig(steps=100, warmup=10, schedule="constant")
    assert lr_at(50, const) == lr_at(100, const) == const.lr


def test_weight_decay_only_on_linear_matrices():
    task = copy_task()
    model = build(task, tie_embeddings=True)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decayed and all(n.endswith("weight") and "ln" not in n and "embed" not in n for n in decayed)
    assert "embed.weight" in {names[id(p)] for p in no_decay["params"]}
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_device_selection_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("cpu").type == "cpu" and resolve_device("auto").type == "cpu"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_device("cuda")


@pytest.mark.gpu
def test_device_selection_with_a_gpu():
    assert resolve_device("auto").type == "cuda" and resolve_device("cuda").type == "cuda"
    assert resolve_device("cpu").type == "cpu"


# ------------------------------------------------------------------------------ learning
def test_copy_loss_falls_well_below_chance():
    task = copy_task()
    model = build(task)
    result = train(model, task, TrainConfig(steps=200, batch_size=32, lr=3e-3, warmup=20, eval_every=200,
                                            log_every=50, eval_examples=100, snapshot_every=0))
    chance = math.log(task.tokenizer.vocab_size)
    assert result.status == "done", result.message
    assert result.final["val_loss"] < 0.5 * chance, (result.final, chance)
    assert result.history[-1]["train_loss"] < 0.5 * chance


def test_induction_attention_only_learns_in_context():
    task = make_task("induction", n_symbols=20, half=8, loss_on="repeat",
                     n_train=3000, n_val=100, n_test=100)
    model = build(task, attn_only=True, d_model=32, n_heads=2, pos="rope")
    result = train(model, task, TrainConfig(steps=300, batch_size=32, lr=3e-3, warmup=20, eval_every=300,
                                            log_every=100, eval_examples=100, snapshot_every=0))
    chance = math.log(task.tokenizer.vocab_size)
    assert result.final["val_loss"] < 0.5 * chance, (result.final, chance)
    assert result.final["test_accuracy"] > 0.5


def test_metrics_and_attention_snapshots():
    task = copy_task()
    events = []
    result = train(build(task), task, quick(), [events.append])
    metrics = [e.metrics for e in events if e.kind == "metrics"]
    assert [m["step"] for m in metrics] == list(range(1, 13)) and result.history == metrics
    assert {"step", "train_loss", "lr", "grad_norm", "tokens_per_s", "elapsed", "eta"} <= set(metrics[0])
    assert "val_accuracy" in metrics[5] and "val_loss" in metrics[11] and "val_loss" not in metrics[0]
    assert metrics[-1]["eta"] == 0 and all(m["tokens_per_s"] > 0 for m in metrics)
    snaps = [e.snapshot for e in events if e.kind == "snapshot"]
    assert [s.step for s in snaps] == [0, 6, 12] and result.snapshots == snaps
    probe = task.probe()
    pattern = snaps[-1].patterns["blocks.1.attn.hook_pattern"]
    assert pattern.dtype == np.float16 and pattern.shape == (2, len(probe.tokens), len(probe.tokens))
    assert np.allclose(pattern.astype(np.float32).sum(-1), 1, atol=1e-2)
    assert snaps[0].tokens == task.tokenizer.tokens_of(probe.tokens) and snaps[0].layers().shape[:2] == (2, 2)
    assert not np.array_equal(snaps[0].patterns["blocks.0.attn.hook_pattern"],
                              snaps[-1].patterns["blocks.0.attn.hook_pattern"])  # training moved it
    assert set(result.final) >= {"val_loss", "val_accuracy", "test_loss", "test_accuracy"}


def test_checkpoint_keeps_the_attention_replay(tmp_path):
    task = copy_task()
    result = train(build(task), task, quick(), checkpoint=tmp_path / "replay")
    ck = load_checkpoint(result.checkpoint)
    assert [s.step for s in ck.snapshots] == [0, 6, 12]
    for mine, saved in zip(result.snapshots, ck.snapshots):
        assert mine.tokens == saved.tokens
        assert all(np.array_equal(mine.patterns[k], saved.patterns[k]) for k in mine.patterns)


def test_encoder_decoder_and_encoder_tasks_train():
    ed = make_task("reverse", n_symbols=6, min_len=2, max_len=4, n_train=200, n_val=20, n_test=20)
    r = train(build(ed, pos="t5"), ed, quick(steps=4, eval_every=4))
    assert r.status == "done" and "encoder.blocks.0.attn.hook_pattern" in r.snapshots[0].patterns
    assert "decoder.blocks.1.cross_attn.hook_pattern" in r.snapshots[0].patterns
    assert r.snapshots[0].src_tokens is not None
    enc = make_task("coref", arch="encoder", n_train=100, n_val=20, n_test=20)
    r = train(build(enc, arch="encoder", pos="learned"), enc, quick(steps=3, eval_every=3))
    assert r.status == "done" and math.isfinite(r.final["test_loss"])


# ------------------------------------------------------------------------------ stop / resume
def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_stop_and_resume_equals_straight_run(tmp_path):
    task = copy_task()
    cfg = quick(steps=20, warmup=3, eval_every=0, snapshot_every=0)
    straight = build(task)
    full = train(straight, task, cfg)
    assert full.status == "done"

    part = build(task)
    stopped = train(part, task, cfg, [lambda e: e.kind == "metrics" and e.step == 8], checkpoint=tmp_path / "run")
    assert stopped.status == "stopped" and stopped.step == 8 and "step 8 of 20" in stopped.message
    ck = load_checkpoint(tmp_path / "run")
    assert ck.train_state.step == 8 and len(ck.history) == 8
    resumed = train(ck.model, ck.build_task(), ck.train_config, resume=ck, checkpoint=tmp_path / "run")
    assert resumed.status == "done" and resumed.step == 20
    for k, v in _weights(straight).items():
        assert torch.allclose(ck.model.state_dict()[k], v, atol=1e-6), k
    assert [h["train_loss"] for h in resumed.history] == pytest.approx([h["train_loss"] for h in full.history])
    final = load_checkpoint(tmp_path / "run")
    assert final.step == 20 and [s.step for s in final.snapshots] == [0, 8, 20]  # the replay continues


def test_stop_flag_stops_at_a_step(tmp_path):
    task = copy_task()
    flag = threading.Event()
    result = train(build(task), task, quick(steps=50), [lambda e: e.step == 3 and flag.set()],
                   checkpoint=tmp_path / "s", stop=flag)
    assert result.status == "stopped" and result.step == 3 and result.checkpoint.exists()
    assert load_checkpoint(result.checkpoint).train_state.step == 3


def test_resume_needs_a_train_state(tmp_path):
    from tfviz.train.checkpoint import save_checkpoint
    task = copy_task()
    model = build(task)
    ck = load_checkpoint(save_checkpoint(tmp_path / "plain", model, task=task))
    with pytest.raises(ValueError, match="cannot be resumed"):
        train(ck.model, task, quick(), resume=ck)


# ------------------------------------------------------------------------------ failures
def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, monkeypatch):
    task = copy_task()
    real, calls = loop.token_loss, []

    def poisoned(*args):
        calls.append(1)
        loss = real(*args)
        return loss * float("nan") if len(calls) == 7 else loss

    monkeypatch.setattr(loop, "token_loss", poisoned)
    result = train(build(task), task, quick(steps=20, checkpoint_every=3), checkpoint=tmp_path / "nan")
    assert result.status == "diverged" and not result.ok and result.step == 6
    assert "step 7: loss became nan" in result.message and "last good checkpoint (step 6)" in result.message
    assert "smaller lr" in result.message
    ck = load_checkpoint(tmp_path / "nan")
    assert ck.train_state.step == 6
    assert all(torch.isfinite(p).all() for p in ck.model.parameters())


def test_out_of_memory_is_reported_not_raised(tmp_path):
    task = copy_task()

    def oom(event):
        if event.step == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    result = train(build(task), task, quick(batch_size=16), [oom], checkpoint=tmp_path / "o")
    assert result.status == "out_of_memory" and not result.ok
    assert "out of memory" in result.message and "smaller batch size (e.g. 8)" in result.message
    assert "shorter sequences" in result.message


def test_other_errors_propagate():
    task = copy_task()

    def boom(event):
        raise RuntimeError("callback bug")

    with pytest.raises(RuntimeError, match="callback bug"):
        train(build(task), task, quick(), [boom])


def test_infinite_gradient_norm_stops_before_the_update(monkeypatch):
    task = copy_task()
    model = build(task)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: torch.tensor(float("inf")))
    before = _weights(model)
    result = train(model, task, quick())
    assert result.status == "diverged" and "step 1: the gradient norm became inf" in result.message
    assert all(torch.equal(v, model.state_dict()[k].cpu()) for k, v in before.items())  # untouched (on any device)


def test_compiled_training_has_no_graph_break(monkeypatch):
    """TrainConfig(compile=True): the loop compiles the forward; with fullgraph=True any graph
    break would raise. The eager backend traces with dynamo but skips code generation (fast)."""
    real = torch.compile
    calls = []

    def fullgraph(model, **kw):
        calls.append(model)
        return real(model, backend="eager", fullgraph=True)

    monkeypatch.setattr(torch, "compile", fullgraph)
    torch._dynamo.reset()
    task = copy_task()
    result = train(build(task, pad_id=task.tokenizer.pad_id), task, quick(compile=True, device="cpu"))
    assert calls and result.status == "done", result.message
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]


def test_early_stopping_on_a_plateau():
    task = copy_task()
    # min_delta larger than any possible fall: every evaluation after the first is "no better"
    result = train(build(task), task, quick(steps=40, eval_every=4, patience=2, min_delta=100.0))
    assert result.status == "done" and result.step == 12, result.message
    assert "stopped early at step 12 of 40" in result.message and "for 2 evaluations" in result.message
    assert TrainConfig(patience=0).patience == 0
    with pytest.raises(ValueError, match="eval_every"):
        TrainConfig(patience=3, eval_every=0)
    with pytest.raises(ValueError, match="compile"):
        TrainConfig(compile="yes")


def test_early_stopping_ends_with_the_best_weights(monkeypatch):
    """Validation losses 1.0, 0.5, 0.8, 0.9 (every 4 steps), patience 2: the run stops at step 16
    and ends with the weights it had at step 8, where the validation loss was best."""
    from tfviz.train import loop

    losses = iter([1.0, 0.5, 0.8, 0.9])
    real = loop._Run.evaluate

    def evaluate(self, split, max_examples):
        out = real(self, split, max_examples)
        return {**out, "loss": next(losses, 0.9)} if split == "validation" else out

    monkeypatch.setattr(loop._Run, "evaluate", evaluate)
    task = copy_task()
    model, at_8 = build(task), {}

    def keep(event):
        if event.kind == "metrics" and event.step == 8:
            at_8.update(_weights(model))

    result = train(model, task, quick(steps=40, eval_every=4, patience=2), [keep])
    assert result.step == 16 and "kept the weights of step 8" in result.message, result.message
    assert all(torch.equal(v.cpu(), model.state_dict()[k].cpu()) for k, v in at_8.items())


def test_the_first_loss_point_comes_at_step_one():
    """The Train page's first loss point must not wait for log_every steps (or an evaluation):
    the first metrics event is step 1, before any other step; then every log_every steps."""
    task = copy_task()
    events = []
    train(build(task), task, quick(log_every=5, eval_every=10, steps=10), [events.append])
    kinds = [(e.kind, e.step) for e in events if e.kind in ("metrics", "snapshot")]
    assert kinds[:2] == [("snapshot", 0), ("metrics", 1)]
    assert [s for k, s in kinds if k == "metrics"] == [1, 5, 10]


def test_the_first_loss_point_of_a_resumed_run_is_its_first_step(tmp_path):
    task = copy_task()
    model = build(task)
    train(model, task, quick(steps=4, log_every=10, eval_every=0), checkpoint=tmp_path / "r")
    ck = load_checkpoint(tmp_path / "r.safetensors")
    events = []
    train(ck.model, task, quick(steps=8, log_every=10, eval_every=0), [events.append], resume=ck)
    assert [e.step for e in events if e.kind == "metrics"] == [5, 8]
