"""Checkpoints: round trip, atomic writes, and every kind of bad file rejected with its message."""
from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile

import pytest
import torch
from safetensors.torch import load_file, save_file

import tfviz.train.checkpoint as ckpt
from tfviz import storage
from tfviz.train.checkpoint import CheckpointError, TrainState, load_checkpoint, save_checkpoint
from tfviz import ModelConfig
from tfviz.model import Transformer
from tfviz.tasks import make_task
from tfviz.train import TrainConfig


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def task():
    return make_task("copy", arch="decoder", n_symbols=6, min_len=2, max_len=5,
                     n_train=200, n_val=20, n_test=20)


def tiny_model(task, seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    fields = dict(vocab_size=task.tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1,
                  max_len=16, pos="rope", tie_embeddings=True)
    return Transformer(ModelConfig(**{**fields, **kw})).eval()


@pytest.fixture
def saved(tmp_path, task):
    model = tiny_model(task)
    path = save_checkpoint(tmp_path / "good", model, task=task, train_config=TrainConfig(steps=10, warmup=1),
                           history=[{"step": 1, "train_loss": 2.0}], extra={"note": "hi"})
    return path, model


def logits(model, task):
    return model(torch.tensor([task.examples("test")[0].tokens]))


def rewrite_header(path, edit):
    """Re-serialise ``path`` with ``edit(header)`` applied to its JSON header (data unchanged)."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def rewrite_tensors(path, edit):
    """Re-save with ``edit(tensors)`` applied, keeping the metadata."""
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata=meta)


# ------------------------------------------------------------------------------ good files
def test_round_trip_identical_logits(saved, task):
    path, model = saved
    assert path.name == "good.safetensors" and path.with_suffix(".json").exists()
    ck = load_checkpoint(path)
    assert torch.equal(logits(ck.model, task), logits(model, task))
    assert ck.config == model.config and ck.model.unembed.weight is ck.model.embed.weight  # re-tied
    assert ck.tokenizer.to_json() == task.tokenizer.to_json()
    assert ck.task == task.spec() and ck.build_task().examples("test")[0].tokens == task.examples("test")[0].tokens
    assert ck.train_config == TrainConfig(steps=10, warmup=1)
    assert ck.history == [{"step": 1, "train_loss": 2.0}] and ck.meta["extra"] == {"note": "hi"}
    assert ck.meta["format_version"] == ckpt.FORMAT_VERSION and ck.train_state is None
    assert "decoder" in ck.card() and load_checkpoint(path.with_suffix("")).path == path  # suffix optional
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["model_config"]["d_model"] == 16


def test_encoder_decoder_round_trip(tmp_path):
    task = make_task("reverse", n_symbols=5, min_len=2, max_len=4, n_train=50, n_val=10, n_test=10)
    torch.manual_seed(1)
    model = Transformer(ModelConfig(arch="encoder-decoder", vocab_size=task.tokenizer.vocab_size,
                                    d_model=16, n_heads=2, n_layers=1, max_len=16, pos="t5")).eval()
    ck = load_checkpoint(save_checkpoint(tmp_path / "ed.safetensors", model, task=task))
    ex = task.examples("test")[0]
    src, tgt = torch.tensor([ex.src]), torch.tensor([ex.tokens])
    assert torch.equal(ck.model(src, tgt), model(src, tgt))


def test_train_state_round_trip(tmp_path, task):
    model = tiny_model(task)
    state = TrainState(7, {"optim.embed.weight.exp_avg": torch.ones_like(model.embed.weight),
                           "optim.embed.weight.exp_avg_sq": torch.ones_like(model.embed.weight),
                           "rng.batch": torch.Generator().manual_seed(3).get_state()},
                       {"param_steps": {"embed.weight": 7.0}})
    ck = load_checkpoint(save_checkpoint(tmp_path / "s", model, train_state=state))
    assert ck.train_state.step == 7 and ck.step == 7
    assert torch.equal(ck.train_state.tensors["rng.batch"], state.tensors["rng.batch"])
    assert ck.train_state.info == {"param_steps": {"embed.weight": 7.0}}


def test_attention_snapshots_round_trip_and_thinning(tmp_path, task):
    import numpy as np
    from tfviz.train.snapshot import AttentionSnapshot, thin
    model = tiny_model(task)
    probe = task.probe()
    n = len(probe.tokens)
    snaps = [AttentionSnapshot(s, {"blocks.0.attn.hook_pattern": np.full((2, n, n), s / 100, np.float16)},
                               task.tokenizer.tokens_of(probe.tokens)) for s in range(0, 100, 2)]
    ck = load_checkpoint(save_checkpoint(tmp_path / "snap", model, task=task, snapshots=snaps))
    assert len(ck.snapshots) == 32 and ck.snapshots[0].step == 0 and ck.snapshots[-1].step == 98
    assert np.array_equal(ck.snapshots[-1].patterns["blocks.0.attn.hook_pattern"],
                          snaps[-1].patterns["blocks.0.attn.hook_pattern"])
    assert ck.snapshots[3].tokens == snaps[0].tokens
    assert [s.step for s in thin(snaps, max_count=3)] == [0, 48, 98]
    assert len(thin(snaps, max_bytes=1)) == 2  # first and last at least

    rewrite_tensors(ck.path, lambda t: t.update({"snapshots.0.blocks.0.attn.hook_pattern": torch.zeros(2, n, n + 1,
                                                                                                       dtype=torch.float16)}))
    with pytest.raises(CheckpointError, match=r"'snapshots.0.blocks.0.attn.hook_pattern' is torch.float16 \[2, \d+, \d+\]"):
        load_checkpoint(ck.path)
    save_checkpoint(ck.path, model, task=task, snapshots=snaps[:2])
    rewrite_header(ck.path, _edit_meta("snapshots", json.dumps([{"step": 0, "tokens": ["a"], "names": ["x.hook_q"]}])))
    with pytest.raises(CheckpointError, match="'x.hook_q' is not an attention pattern"):
        load_checkpoint(ck.path)
    rewrite_header(ck.path, _edit_meta("snapshots", json.dumps([{"step": "zero"}])))
    with pytest.raises(CheckpointError, match="snapshot 0 needs step, tokens, names"):
        load_checkpoint(ck.path)


def test_loading_never_unpickles(saved, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("unpickling was attempted")
    for target in (torch, pickle):
        monkeypatch.setattr(target, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    load_checkpoint(saved[0])


def test_crash_mid_save_keeps_previous_checkpoint(saved, task, monkeypatch):
    path, model = saved
    before = logits(model, task)

    def crash(f, data, chunk=1 << 20):
        f.write(data[: len(data) // 2])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(storage, "_write_all", crash)
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(path, tiny_model(task, seed=5), task=task)
    assert torch.equal(logits(load_checkpoint(path).model, task), before)
    assert sorted(p.name for p in path.parent.iterdir()) == ["good.json", "good.safetensors"]  # no temp left


# ------------------------------------------------------------------------------ bad files
class Canary:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):  # unpickling this would create the canary file
        return (open, (str(self.path), "w"))


def test_pickle_is_never_loaded(tmp_path):
    canary = tmp_path / "canary"
    bad = tmp_path / "evil.safetensors"
    bad.write_bytes(pickle.dumps({"model": Canary(canary)}))
    with pytest.raises(CheckpointError, match=r"not a safetensors file \(is it a pickle/torch.save file"):
        load_checkpoint(bad)
    for protocol in (0, 2):
        bad.write_bytes(pickle.dumps(Canary(canary), protocol=protocol))
        with pytest.raises(CheckpointError, match="not a safetensors file"):
            load_checkpoint(bad)
    assert not canary.exists()


def test_torch_save_zip_is_rejected(tmp_path, task):
    bad = tmp_path / "zipped.safetensors"
    torch.save(tiny_model(task).state_dict(), bad)
    with pytest.raises(CheckpointError, match="zip archive"):
        load_checkpoint(bad)
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("data.txt", "hello")
    with pytest.raises(CheckpointError, match="zip archive"):
        load_checkpoint(bad)


@pytest.mark.parametrize("cut, message", [(0.5, "truncated"), (0.0005, "truncated"), (0, "too short")])
def test_truncated_file(saved, cut, message):
    path = saved[0]
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut) if cut else 3])
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


def test_garbage_and_foreign_files(tmp_path):
    bad = tmp_path / "x.safetensors"
    bad.write_bytes(os.urandom(4096))
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load_checkpoint(bad)
    save_file({"w": torch.zeros(2)}, str(bad))
    with pytest.raises(CheckpointError, match="not a tfviz checkpoint"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing")


def test_header_claiming_huge_sizes(saved):
    def huge(h):
        h["embed.weight"]["shape"] = [10**12, 10**6]
        h["embed.weight"]["data_offsets"][1] = h["embed.weight"]["data_offsets"][0] + 4 * 10**18
    rewrite_header(saved[0], huge)
    with pytest.raises(CheckpointError, match="truncated or corrupt|needs"):
        load_checkpoint(saved[0])


def test_header_shape_inconsistent_with_offsets(saved):
    rewrite_header(saved[0], lambda h: h["embed.weight"].update(shape=[3, 3]))
    with pytest.raises(CheckpointError, match=r"tensor 'embed.weight': shape \[3, 3\] of F32 needs 36 bytes"):
        load_checkpoint(saved[0])


def test_header_length_prefix_too_large(saved):
    path = saved[0]
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    path.write_bytes(struct.pack("<Q", len(data)) + data[8:])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(path)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({"embed.weight": torch.zeros(t["embed.weight"].shape[0], 17)}),
     r"tensor 'embed.weight' is torch.float32 \[\d+, 17\] but the config needs torch.float32 \[\d+, 16\]"),
    (lambda t: t.update({"embed.weight": t["embed.weight"].half()}),
     "tensor 'embed.weight' is torch.float16 .* needs torch.float32"),
    (lambda t: t.pop("stack.blocks.0.attn.W_o.weight"), r"missing tensor\(s\) stack.blocks.0.attn.W_o.weight"),
    (lambda t: t.update({"sneaky.weight": torch.zeros(2)}), r"unexpected tensor\(s\) sneaky.weight"),
    (lambda t: t.update({"optim.embed.weight.exp_avg": torch.zeros(2)}), "unexpected tensor"),
    (lambda t: t["stack.blocks.0.ln1.weight"].__setitem__(0, float("nan")), "'stack.blocks.0.ln1.weight' holds NaN"),
    (lambda t: t["embed.weight"].__setitem__((0, 0), float("inf")), "'embed.weight' holds NaN or infinite"),
])
def test_bad_tensors(saved, edit, message):
    rewrite_tensors(saved[0], edit)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(saved[0])


def _edit_meta(key, value):
    def edit(h):
        h["__metadata__"][key] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_edit_meta("format_version", "2"), r"newer tfviz \(checkpoint format_version 2; this tfviz reads up to 1\)"),
    (_edit_meta("format_version", "x"), "format_version 'x' is not a number"),
    (_edit_meta("model_config", json.dumps({"d_model": 15, "n_heads": 2})), "invalid metadata: d_model=15"),
    (_edit_meta("model_config", "{not json"), "'model_config' is not valid JSON"),
    (_edit_meta("history", "{}"), "history must be a JSON array"),
    (_edit_meta("tokenizer", "{}"), "invalid metadata: not a tfviz tokenizer"),
    (lambda h: h["__metadata__"].pop("model_config"), "metadata lacks 'model_config'"),
    (_edit_meta("train_state", json.dumps({"step": "x"})), "train_state needs a whole-number step"),
    (_edit_meta("train_state", json.dumps({"step": 3})), r"without the batch sampler's RNG state"),
    (_edit_meta("train_state", json.dumps({"step": 3, "param_steps": {"nope": 1}})), "unknown parameter 'nope'"),
    (lambda h: h.__setitem__("__metadata__", {"format": 3}), "must map strings to strings"),
])
def test_bad_metadata(saved, edit, message):
    rewrite_header(saved[0], edit)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(saved[0])


def test_size_limit(saved):
    with pytest.raises(CheckpointError, match=r"over the 0 MB limit.*max_bytes="):
        load_checkpoint(saved[0], max_bytes=1000)
    assert load_checkpoint(saved[0], max_bytes=10**9)


def test_checkpoint_error_is_a_value_error():
    assert issubclass(CheckpointError, ValueError)
