"""CUDA-only checks (marked `gpu`: skipped without a CUDA GPU; scripts/gpu_check.sh runs them).

The compiled FlexAttention window kernel forward and backward (float32 against a float64 masked
reference; bf16 within bf16 tolerance), its O(n·w) memory up to n = 131072, the windowed model's
GPU fast path against its explicit path, ALiBi/T5 biases as score_mod with their gradients,
recording on the GPU, compiled training with no graph break, and bf16 training."""
from __future__ import annotations

import copy
from unittest import mock

import pytest
import torch
from test_banded import _cfg, qkv, reference

import tfviz
from tfviz.model import banded, flex
from tfviz.model.positional import ALiBi, T5Bias

pytestmark = pytest.mark.gpu
CUDA = "cuda"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a - b‖ / ‖b‖ in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def _cuda_qkv(batch, heads, kv_heads, n, d, dtype, seed=0):
    return [t.detach().to(CUDA, dtype).requires_grad_() for t in qkv(batch, heads, kv_heads, n, d, seed)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", [None, "alibi", "t5"])
def test_compiled_flex_equals_reference_forward_and_backward(causal, bias):
    n, window = 300, 32
    q, k, v = _cuda_qkv(2, 4, 2, n, 16, torch.float32)
    pads = torch.zeros(2, n, dtype=torch.bool, device=CUDA)
    pads[1, :7] = True
    scheme = {None: None, "alibi": ALiBi(_cfg()), "t5": T5Bias(_cfg(), causal=causal)}[bias]
    params = []
    if scheme is not None:
        scheme = scheme.to(CUDA)
        params = list(scheme.parameters())
    ref_scheme = None if scheme is None else copy.deepcopy(scheme).double()
    ref_params = [] if scheme is None else list(ref_scheme.parameters())
    for kp in (None, pads):
        out = flex.flex_window_attention(q, k, v, window, causal, key_is_pad=kp,
                                         score_mod=None if scheme is None else scheme.score_mod())
        # float64 reference from the same (float32) values
        q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
        want = reference(q64, k64, v64, window, causal, key_is_pad=kp,
                         bias=None if ref_scheme is None else ref_scheme.score_bias)[0]
        torch.testing.assert_close(out.double(), want, atol=2e-4, rtol=2e-4)
        g = torch.randn_like(want)
        got = torch.autograd.grad(out, [q, k, v, *params], g.float())
        exp = torch.autograd.grad(want, [q64, k64, v64, *ref_params], g)
        assert len(got) == len(exp) == 3 + len(params)  # T5's table gets its gradient too
        for a, b in zip(got, exp):
            torch.testing.assert_close(a.double(), b, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("causal", [True, False])
def test_bf16_flex_within_bf16_tolerance(causal):
    """The benchmark's shape (4 heads x 64, w = 128), bf16: output and gradients against the
    masked float32 reference of the same bf16 values, relative error (bf16: 1e-3 .. 1e-2)."""
    n, window = 4096, 128
    q, k, v = _cuda_qkv(1, 4, 4, n, 64, torch.bfloat16, seed=3)
    out = banded.banded_attention(q, k, v, window, causal)  # the model's dispatch: flex on CUDA
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    want = reference(q32, k32, v32, window, causal)[0]
    assert rel(out, want) < 1e-2
    g = torch.randn_like(want)
    for a, b in zip(torch.autograd.grad(out, [q, k, v], g.bfloat16()),
                    torch.autograd.grad(want, [q32, k32, v32], g)):
        assert rel(a, b) < 2e-2


def test_flex_runs_to_131072_in_linear_memory():
    """bf16, 4 heads x 64, w = 128: forward + backward at n = 131072 allocates O(n·w), far below
    the 2 x 4 x n² bf16 scores (128 GiB) the dense fallback would need."""
    peaks = {}
    for n in (65536, 131072):
        q, k, v = (torch.randn(1, 4, n, 64, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        banded.banded_attention(q, k, v, 128, True).sum().backward()
        torch.cuda.synchronize()
        peaks[n] = torch.cuda.max_memory_allocated() - base
        assert torch.isfinite(q.grad).all()
        del q, k, v
    assert peaks[131072] < 2 ** 30  # 1 GiB
    assert peaks[131072] / peaks[65536] < 2.3


@pytest.mark.parametrize("arch,pos", [("decoder", "rope"), ("decoder", "alibi"), ("encoder", "t5"),
                                      ("encoder", "learned")])
@pytest.mark.parametrize("d_head", [16, 8])
def test_windowed_model_on_cuda_fast_path_equals_explicit_path(arch, pos, d_head):
    """d_head 16: the fused FlexAttention kernel in every layer; d_head 8, under the kernel's
    smallest head size (``flex.MIN_D_HEAD``; torch 2.11 refuses it at compile time): the chunked
    band instead. Either way the same numbers as the explicit path, forward and backward."""
    torch.manual_seed(0)
    cfg = _cfg(arch=arch, pos=pos, n_kv_heads=2, window=6, n_layers=2, pad_id=0, d_model=4 * d_head)
    model = tfviz.Transformer(cfg).to(CUDA)
    tokens = torch.randint(1, 50, (2, 200), device=CUDA)
    tokens[1, :3] = 0  # left padding: the fast path gets key_is_pad
    with mock.patch("tfviz.model.banded.flex.flex_window_attention",
                    wraps=flex.flex_window_attention) as spy:
        fast = model(tokens)
    # the GPU kernel ran in every layer, where the head size fits it
    assert spy.call_count == (cfg.n_layers if d_head >= flex.MIN_D_HEAD else 0)
    params = list(model.parameters())
    grads_fast = torch.autograd.grad(fast.sum(), params, allow_unused=True)
    model.set_attention_impl("explicit")
    slow = model(tokens)
    grads_slow = torch.autograd.grad(slow.sum(), params, allow_unused=True)
    torch.testing.assert_close(fast, slow, atol=2e-4, rtol=2e-4)
    for a, b in zip(grads_fast, grads_slow):
        if a is not None:
            torch.testing.assert_close(a, b, atol=2e-3, rtol=2e-3)


def test_recording_on_cuda_equals_recording_on_cpu():
    torch.manual_seed(1)
    model = tfviz.Transformer(_cfg(pos="alibi", n_kv_heads=2, n_layers=2))
    x = torch.randint(1, 50, (2, 30))
    on_cpu = tfviz.record(model, x)
    model.to(CUDA)
    on_gpu = tfviz.record(model, x.to(CUDA))
    assert list(on_gpu) == list(on_cpu)
    for name, t in on_cpu.items():
        assert on_gpu[name].device.type == "cpu"
        torch.testing.assert_close(on_gpu[name], t, atol=1e-4, rtol=1e-4)
    kept = tfviz.record(model, x.to(CUDA), names=["blocks.0.attn.hook_pattern"], device=None)
    assert kept["blocks.0.attn.hook_pattern"].is_cuda


@pytest.mark.parametrize("window", [None, 8])
def test_compiled_forward_has_no_graph_break_on_cuda(window):
    torch.manual_seed(2)
    model = tfviz.Transformer(_cfg(pos="t5", window=window, n_kv_heads=2, pad_id=0)).to(CUDA)
    x = torch.randint(1, 50, (2, 64), device=CUDA)
    x[0, :5] = 0
    torch._dynamo.reset()
    explain = torch._dynamo.explain(model)(x, pads=model.prepare(x))
    assert explain.graph_break_count == 0, explain.break_reasons


def test_compiled_bf16_training_on_cuda(tmp_path):
    """TrainConfig(compile=True, bf16) on the GPU: the loss falls; MFU and GPU memory are logged."""
    from tfviz.tasks import make_task
    from tfviz.train import TrainConfig, train
    from tfviz.train.setup import model_config_for

    task = make_task("copy", arch="decoder", n_symbols=8, min_len=3, max_len=6, n_train=500, n_val=50,
                     n_test=50)
    torch.manual_seed(0)
    model = tfviz.Transformer(model_config_for(task, d_model=64, n_heads=4, n_layers=2, pos="rope",
                                               window=4))
    cfg = TrainConfig(steps=60, batch_size=32, lr=3e-3, warmup=5, log_every=10, eval_every=30,
                      eval_examples=50, snapshot_every=0, checkpoint_every=0, device="cuda", bf16=True,
                      compile=True)
    result = train(model, task, cfg, checkpoint=tmp_path / "run")
    assert result.status == "done", result.message
    h = result.history
    assert h[-1]["train_loss"] < h[0]["train_loss"]
    assert 0 < h[-1]["mfu"] < 1 and h[-1]["gpu_memory_gib"] > 0
