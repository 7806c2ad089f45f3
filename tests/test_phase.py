"""The induction phase change (tfviz.analysis.phase): what the training loop records at each
logged step, checked against an independent recomputation; how it is kept in a checkpoint
(bounded, validated); the story read from the records; and the phase change itself re-measured
on tiny runs of other seeds than the shipped ones (2 layers: an induction head forms while the
in-context-learning score falls; 1 layer: neither)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tfviz import ModelConfig, Transformer
from tfviz.analysis import phase as ph
from tfviz.storage import CheckpointError
from tfviz.tasks import make_task
from tfviz.train import TrainConfig, model_config_for, new_model, train
from tfviz.train.checkpoint import load_checkpoint, read_metadata, save_checkpoint

# A tiny induction task whose circuit forms in a few hundred steps: [BOS] r r, r of 4..8 of 12
# symbols (a varying length: no fixed offset to copy from), the loss on every token.
TINY_TASK = {"name": "induction", "seed": 0, "n_symbols": 12, "half": 8, "min_half": 4,
             "loss_on": "all", "n_train": 2000, "n_val": 64, "n_test": 64}


def tiny_task():
    return make_task(TINY_TASK)


def perturbed(cfg: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    m = Transformer(cfg)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.eval()


# ------------------------------------------------------------------------------ the measurement
def test_probe_is_fresh_bos_r_r_of_the_tasks_symbols() -> None:
    task = tiny_task()
    cfg = model_config_for(task, arch="decoder", pos="rope", n_layers=2, n_heads=2, d_model=16,
                           attn_only=True)
    probe = ph.PhaseProbe.for_task(task, cfg)
    t = probe.tokens
    half = (t.shape[1] - 1) // 2
    assert t.shape == (ph.PROBE_BATCH, 1 + 2 * half) and half == 8  # the longest training sequence
    assert (t[:, 0] == task.tokenizer.bos_id).all()
    assert torch.equal(t[:, 1:half + 1], t[:, half + 1:])  # r r
    special = set(task.tokenizer.special_ids)
    assert not special & set(t[:, 1:].flatten().tolist())
    assert all(len(set(row[1:half + 1])) == half for row in t.tolist())  # distinct within r
    train_rows = {tuple(e.tokens) for e in task.examples("train")}
    assert not train_rows & {tuple(r) for r in t.tolist()}  # never a training example
    assert (probe.early, probe.late) == ph.icl_indices(2 * half) == (2, 15)
    again = ph.PhaseProbe.for_task(tiny_task(), cfg)
    assert torch.equal(again.tokens, t)  # the same sequences for every run of this vocabulary


def test_icl_indices_scale_olssons_50_and_500_of_512() -> None:
    assert ph.icl_indices(512) == (50, 500)
    assert ph.icl_indices(64) == (6, 62)
    assert ph.icl_indices(4) == (1, 3)


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_measure_matches_an_independent_recomputation(pos) -> None:
    task = tiny_task()
    cfg = model_config_for(task, arch="decoder", pos=pos, n_layers=2, n_heads=2, d_model=16,
                           attn_only=True)
    model = perturbed(cfg)
    probe = ph.PhaseProbe.for_task(task, cfg)
    rec = probe.measure(model, 7)
    tokens = probe.tokens
    patterns = {}
    handles = [model.stack.blocks[l].attn.hook_pattern.register_forward_hook(
        lambda m, i, out, l=l: patterns.__setitem__(l, out.detach().double())) for l in range(2)]
    try:
        with torch.no_grad():
            logp = torch.log_softmax(model(tokens).double(), -1)
    finally:
        for h in handles:
            h.remove()
    B, n = tokens.shape
    loss = [float(np.mean([-logp[b, p, tokens[b, p + 1]].item() for b in range(B)])) for p in range(n - 1)]
    np.testing.assert_allclose(rec["loss"], loss, rtol=1e-5, atol=1e-6)
    rows = tokens.tolist()
    for l in range(2):
        for h in range(2):
            A = patterns[l][:, h]
            ind, prev = [], []
            for b in range(B):
                for i in range(1, n):
                    prev.append(A[b, i, i - 1].item())
                    after = [j + 1 for j in range(i) if rows[b][j] == rows[b][i]]
                    if after:
                        ind.append(sum(A[b, i, k].item() for k in after))
            assert rec["induction"][l][h] == pytest.approx(np.mean(ind), abs=1e-5)
            assert rec["prev_token"][l][h] == pytest.approx(np.mean(prev), abs=1e-5)
    assert rec["step"] == 7


# ------------------------------------------------------------------------------ in training
def tiny_run(n_layers: int, seed: int, steps: int, path=None, log_every: int = 10):
    task = tiny_task()
    model = new_model(model_config_for(task, arch="decoder", pos="rope", n_layers=n_layers,
                                       n_heads=2, d_model=32, attn_only=True), seed)
    cfg = TrainConfig(steps=steps, batch_size=32, lr=1e-2, warmup=10, seed=seed, num_threads=1,
                      log_every=log_every, eval_every=0, snapshot_every=0, eval_examples=32)
    return train(model, task, cfg, checkpoint=path)


def test_training_records_step_0_and_every_logged_step_into_the_checkpoint(tmp_path) -> None:
    res = tiny_run(2, 0, 30, tmp_path / "run")
    steps = [r["step"] for r in res.phase["records"]]
    assert steps == [0, 1, 10, 20, 30] == [0] + [h["step"] for h in res.history]
    ck = load_checkpoint(tmp_path / "run.safetensors")
    assert ck.phase == json.loads(json.dumps(res.phase))
    assert read_metadata(tmp_path / "run.safetensors")["phase"] == ck.phase
    sidecar = json.loads((tmp_path / "run.json").read_text())
    assert sidecar["phase"] == {"probe": res.phase["probe"], "records": 5}
    # the last record is the saved model's own measurement
    probe = ph.PhaseProbe.for_task(tiny_task(), ck.config)
    again = probe.measure(ck.model, 30)
    np.testing.assert_allclose(again["loss"], res.phase["records"][-1]["loss"], rtol=1e-5)


def test_other_tasks_record_nothing(tmp_path) -> None:
    task = make_task("coref", seed=0)
    model = new_model(model_config_for(task, arch="decoder", pos="rope", n_layers=1, n_heads=2,
                                       d_model=16), 0)
    res = train(model, task, TrainConfig(steps=2, batch_size=4, warmup=0, eval_every=0,
                                         snapshot_every=0, eval_examples=4, num_threads=1),
                checkpoint=tmp_path / "c")
    assert res.phase is None and load_checkpoint(tmp_path / "c.safetensors").phase is None


def test_resume_continues_the_records(tmp_path) -> None:
    task = tiny_task()
    model = new_model(model_config_for(task, arch="decoder", pos="rope", n_layers=2, n_heads=2,
                                       d_model=16, attn_only=True), 0)
    cfg = TrainConfig(steps=20, batch_size=8, warmup=2, num_threads=1, log_every=10,
                      eval_every=0, snapshot_every=0, eval_examples=8)
    stop = iter([False] * 10 + [True] * 100)
    first = train(model, task, cfg, stop=lambda: next(stop), checkpoint=tmp_path / "r")
    assert first.status == "stopped" and first.step == 11
    assert [r["step"] for r in first.phase["records"]] == [0, 1, 10]
    ck = load_checkpoint(tmp_path / "r.safetensors")
    done = train(ck.model, task, cfg, resume=ck, checkpoint=tmp_path / "r")
    # the resumed run's first step (12) streams at once, as every run's first step does
    assert [r["step"] for r in done.phase["records"]] == [0, 1, 10, 12, 20]
    assert [r["step"] for r in done.phase["records"]] == [0] + [h["step"] for h in done.history]


# ------------------------------------------------------------------------------ bounded, checked
def records(n: int, L: int = 1, H: int = 2, width: int = 8) -> dict:
    return {"probe": {"tokens": width + 1, "early": 1, "late": width - 1, "half": width // 2,
                      "sequences": 4, "seed": 0},
            "records": [{"step": i, "loss": [1.0] * width, "induction": [[0.1] * H] * L,
                         "prev_token": [[0.2] * H] * L} for i in range(n)]}


def test_add_record_stays_bounded_and_thin_keeps_first_and_last() -> None:
    p = records(0)
    for i in range(5 * ph.MAX_RECORDS):
        ph.add_record(p, records(1)["records"][0] | {"step": i})
    assert len(p["records"]) <= 2 * ph.MAX_RECORDS and p["records"][-1]["step"] == 5 * ph.MAX_RECORDS - 1
    t = ph.thin(p)
    assert len(t["records"]) == ph.MAX_RECORDS
    assert t["records"][0]["step"] == 0 and t["records"][-1]["step"] == 5 * ph.MAX_RECORDS - 1
    ph.add_record(p, {**p["records"][-1], "loss": [2.0] * 8})  # the same step again: replaced
    assert p["records"][-1]["loss"][0] == 2.0 and p["records"][-2]["step"] < p["records"][-1]["step"]


@pytest.mark.parametrize("break_it", [
    lambda p: p["records"][1].update(loss=[1.0] * 7),              # a loss of the wrong length
    lambda p: p["records"][1].update(induction=[[0.1, "x"]]),      # not a number
    lambda p: p["records"][1].update(step=0),                      # steps not increasing
    lambda p: p["probe"].update(late=99),                          # outside the probe
    lambda p: p.update(records=p["records"] * (ph.MAX_RECORDS + 1)),  # too many
    lambda p: p.update(records="no"),
])
def test_a_malformed_phase_is_refused_at_load(tmp_path, break_it) -> None:
    cfg = ModelConfig(arch="decoder", vocab_size=20, d_model=8, n_heads=2, n_layers=1, max_len=16)
    p = records(3)
    break_it(p)
    path = save_checkpoint(tmp_path / "bad", Transformer(cfg), phase=p)
    with pytest.raises(CheckpointError, match="phase"):
        load_checkpoint(path)


def test_phase_field_bound_covers_a_full_record_set() -> None:
    from tfviz.train.checkpoint import field_limits

    cfg = ModelConfig(arch="decoder", vocab_size=20, d_model=384, n_heads=32, n_layers=12, max_len=256)
    p = records(ph.MAX_RECORDS, L=12, H=32, width=ph.PROBE_MAX_TOKENS - 1)
    for r in p["records"]:
        r["loss"] = [1.234567e-05] * len(r["loss"])  # the longest numbers _rounded writes
    text = json.dumps(p)
    max_bytes, max_containers = field_limits(cfg)["phase"]
    assert len(text) <= max_bytes and text.count("[") + text.count("{") <= max_containers


# ------------------------------------------------------------------------------ the story
def synthetic(icl_drop: tuple[int, int], head_rise: tuple[int, int] | None, steps=range(0, 301, 10)):
    """ICL score 0 -> -2 linearly over icl_drop; head L1H0's induction 0 -> 0.9 over head_rise."""
    out = records(0, L=2, H=2, width=8)
    for s in steps:
        f = np.clip((s - icl_drop[0]) / (icl_drop[1] - icl_drop[0]), 0, 1)
        g = 0.0 if head_rise is None else np.clip((s - head_rise[0]) / (head_rise[1] - head_rise[0]), 0, 1)
        loss = [2.0] * 8
        loss[7] = 2.0 - 2.0 * f
        out["records"].append({"step": s, "loss": loss, "induction": [[0.01, 0.02], [0.9 * g + 0.01, 0.03]],
                               "prev_token": [[0.8 * g, 0.1], [0.1, 0.1]]})
    return out


def test_story_reads_the_windows_from_the_records() -> None:
    s = ph.phase_story(synthetic((95, 195), (115, 185)), "2L")  # boundaries between logged steps
    assert s["icl_window"] == (110, 190) and s["induction_window"] == (130, 180)
    assert s["best_head"] == "L1H0" and s["formed"] and s["formed_at"] == 150 and s["overlap"]
    assert s["icl_start"] == 0.0 and s["icl_end"] == pytest.approx(-2.0)
    assert "between steps 110 and 190" in s["sentence"] and "overlap" in s["sentence"]
    apart = ph.phase_story(synthetic((20, 60), (200, 260)), "2L")
    assert apart["formed"] and not apart["overlap"] and "do not overlap" in apart["sentence"]
    none = ph.phase_story(synthetic((100, 200), None), "1L")
    assert not none["formed"] and not none["overlap"] and "barely moved" in none["sentence"]
    assert "never above 0.4" in none["sentence"]


def test_frames_hold_the_records() -> None:
    p = synthetic((100, 200), (110, 190))
    f = ph.phase_frames(p)
    assert f["loss"].shape == (31, 8) and f["loss"].loc[300, 7] == pytest.approx(0.0)
    c = f["curves"].set_index("step")
    assert c.loc[150, "icl"] == pytest.approx(-1.0) and c.loc[300, "best_induction"] == "L1H0"
    assert len(f["heads"]) == 31 * 4


# ------------------------------------------------------------------------------ re-measured
RECIPE_STEPS = 800  # the shipped runs train 2000 steps; the circuit starts forming by ~300


def recipe_run(n_layers: int, seed: int, steps: int = RECIPE_STEPS):
    """The shipped phase-{n}L recipe (tfviz.zoo.specs), another seed, fewer steps, no evaluations."""
    from tfviz.zoo.specs import BY_NAME

    spec = BY_NAME[f"phase-{n_layers}L"]
    task = make_task(spec.task)
    fields = {**spec.train_fields(steps), "seed": seed, "log_every": 20, "eval_every": 0,
              "snapshot_every": 0, "eval_examples": 32}
    return train(new_model(model_config_for(task, **spec.model), seed), task, TrainConfig(**fields))


@pytest.fixture(scope="module")
def one_layer():
    return ph.phase_story(recipe_run(1, 1).phase, "1 layer")


@pytest.mark.parametrize("seed", [1, 2])
def test_the_phase_change_on_other_seeds(seed, one_layer) -> None:
    """The shipped runs (phase-2L / phase-1L) use seed 0 and 2000 steps; here the same recipe on
    other seeds for 800: with two layers a layer-1 head's induction score rises while the
    in-context-learning score falls (the two windows overlap) and the ICL score ends well below
    the one-layer model's, which forms no induction head."""
    two = ph.phase_story(recipe_run(2, seed).phase, "2 layers")
    assert two["overlap"] and two["best_head"].startswith("L1"), two["sentence"]
    assert two["induction_end"] > 2 * two["induction_start"], two["sentence"]
    assert not one_layer["formed"], one_layer["sentence"]
    assert two["icl_end"] < one_layer["icl_end"] - 0.5, (two["sentence"], one_layer["sentence"])
