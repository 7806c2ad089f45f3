"""Helpers of the robustness tests: session folders and hostile checkpoint files (reading a page: apptest_helpers)."""
from __future__ import annotations

from pathlib import Path


def session_files(root: Path, sid: str) -> list[Path]:
    """Every file (hidden ones too) a session keeps under the checkpoint folder, but for the
    marker of its last visit (``.seen``: tfviz.classroom.disk's expiry reads it)."""
    d = root / "user" / sid
    return sorted(p for p in d.rglob("*") if p.is_file() and p != d / ".seen") if d.exists() else []


# ------------------------------------------------------------------------------ hostile files
class Canary:
    """Unpickling this object creates ``path`` (it pickles as a call to ``open(path, "w")``)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def header_of(data: bytes) -> tuple[dict, bytes]:
    import json
    import struct

    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def with_header(header: dict, body: bytes) -> bytes:
    import json
    import struct

    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + body


def edit_header(data: bytes, edit) -> bytes:
    header, body = header_of(data)
    edit(header)
    return with_header(header, body)


def edit_tensors(data: bytes, edit) -> bytes:
    from safetensors.torch import load, save

    meta = header_of(data)[0]["__metadata__"]
    tensors = load(data)
    edit(tensors)
    return save(tensors, metadata=meta)


def edit_meta(key: str, value: str):
    def edit(h):
        h["__metadata__"][key] = value
    return edit


def hostile_files(good: bytes, canary: Path) -> dict[str, tuple[str, bytes, str]]:
    """case -> (file name, bytes, regex the rejection message must match). ``good`` is a valid
    tfviz checkpoint (tiny-coref: tied=False, 2 layers, d_model 32)."""
    import io
    import json
    import os
    import pickle
    import zipfile

    import torch

    def lie_shape(h):
        h["embed.weight"]["shape"] = [3, 3]

    def huge(h):
        e = h["embed.weight"]
        e["shape"] = [10**12, 10**6]
        e["data_offsets"][1] = e["data_offsets"][0] + 4 * 10**18

    def bigger_tok(h):  # a tokenizer that does not belong to the model: vocab_size + 1 in config
        cfg = json.loads(h["__metadata__"]["model_config"])
        cfg["vocab_size"] += 1
        h["__metadata__"]["model_config"] = json.dumps(cfg)

    torch_zip = io.BytesIO()
    torch.save({"w": torch.zeros(3)}, torch_zip)
    plain_zip = io.BytesIO()
    with zipfile.ZipFile(plain_zip, "w") as z:
        z.writestr("model.safetensors", good)
    from safetensors.torch import save as st_save

    n_big = 50 * 2**20 + 1
    return {
        "too-big": ("big.safetensors", b"\0" * n_big, r"is 50 MB; the limit is 50 MB"),
        "empty": ("empty.safetensors", b"", r"only 0 bytes: too short"),
        "pickle-extension": ("model.pt", pickle.dumps(Canary(canary)), r"only tfviz checkpoints"),
        "pkl-extension": ("model.pkl", good, r"only tfviz checkpoints"),
        "json-sidecar": ("coref.json", b'{"model_config": {}}', r"human-readable copy"),
        "no-extension": ("model", good, r"only tfviz checkpoints"),
        "pickle-canary": ("evil.safetensors", pickle.dumps({"model": Canary(canary)}),
                          r"not a safetensors file \(is it a pickle"),
        "pickle-canary-proto0": ("evil0.safetensors", pickle.dumps(Canary(canary), protocol=0),
                                 r"not a safetensors file"),
        "torch-save-zip": ("torch.safetensors", torch_zip.getvalue(), r"a zip archive"),
        "zip": ("zipped.safetensors", plain_zip.getvalue(), r"a zip archive"),
        "truncated": ("cut.safetensors", good[: len(good) // 2], r"truncated"),
        "truncated-header": ("cut-header.safetensors", good[:40], r"truncated"),
        "garbage": ("noise.safetensors", os.urandom(4096), r"not a safetensors file"),
        "huge-header-claim": ("huge.safetensors", edit_header(good, huge), r"truncated or corrupt|needs"),
        "header-length-lie": ("len.safetensors", (len(good)).to_bytes(8, "little") + good[8:],
                              r"truncated"),
        "shape-lie": ("lie.safetensors", edit_header(good, lie_shape),
                      r"tensor 'embed.weight': shape \[3, 3\] of F32 needs 36 bytes"),
        "shape-off-config": ("wide.safetensors", edit_tensors(good, lambda t: t.update(
            {"embed.weight": torch.zeros(t["embed.weight"].shape[0], 33)})), r"but the config needs"),
        "dtype-off-config": ("half.safetensors", edit_tensors(good, lambda t: t.update(
            {"embed.weight": t["embed.weight"].half()})), r"torch.float16 .* needs torch.float32"),
        "extra-tensor": ("sneaky.safetensors", edit_tensors(good, lambda t: t.update(
            {"sneaky.weight": torch.zeros(2)})), r"unexpected tensor\(s\) sneaky.weight"),
        "missing-tensor": ("missing.safetensors", edit_tensors(good, lambda t: t.pop("embed.weight")),
                           r"missing tensor\(s\) embed.weight"),
        "nan-weights": ("nan.safetensors", edit_tensors(good, lambda t: t["embed.weight"].__setitem__(
            (0, 0), float("nan"))), r"holds NaN or infinite"),
        "inf-weights": ("inf.safetensors", edit_tensors(good, lambda t: t["embed.weight"].__setitem__(
            (1, 1), float("inf"))), r"holds NaN or infinite"),
        "future-version": ("future.safetensors", edit_header(good, edit_meta("format_version", "99")),
                           r"newer tfviz \(checkpoint format_version 99"),
        "not-tfviz": ("foreign.safetensors", st_save({"w": torch.zeros(2)}), r"not a tfviz checkpoint"),
        "bad-config": ("cfg.safetensors", edit_header(good, edit_meta(
            "model_config", json.dumps({"d_model": 15, "n_heads": 2}))), r"invalid metadata: d_model=15"),
        "tokenizer-vocab-mismatch": ("tok.safetensors", edit_header(good, bigger_tok),
                                     r"tokenizer has \d+ tokens but the model's vocab_size is \d+"),
    }


def start(at, **values) -> None:
    """Press Start on the Train page (AppTest) with these form values (keys without the "train_"
    prefix; 6 steps and 1 warmup step unless given); the page must show no exception."""
    from apptest_helpers import problems

    values = {"steps": 6, "warmup": 1, **values}
    for key, v in values.items():
        at.number_input(key=f"train_{key}").set_value(v)
    at.button(key="train_start").click().run()
    assert not problems(at), problems(at)


def in_process_workers() -> None:
    """The app's runs trained by worker threads of this test process (``ThreadExecutor``), so a
    test can patch the training code: the process workers of this folder are let go first."""
    from tfviz.runs.executor import ThreadExecutor
    from ui.jobs import job_manager

    manager = job_manager()
    manager.executor.shutdown()
    manager.executor = ThreadExecutor(manager.store.path, workers=manager.max_concurrent, idle_s=2.0)
