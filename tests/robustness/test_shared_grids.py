"""Issue 29, items 3 and 4: causal grids off the shared model's lock, bounded, computed once.

Was: the Effects tab ran a head grid under ``locked([lm])`` (a 100-word input on a GPT-2-sized
folder held it 324 s; the other students on that model waited p50 317 s), opening the tab started
a grid, and ``ui.effects.computed`` did not look again after its lock: 5 sessions opening Findings
on a cold server computed the 492-sentence grid one after another (renders 2.8 ... 57.7 s).

Now (``ui.effects.computed``): a grid runs on a private copy of the module tree
(``interventions.private``: the same weight tensors, its own hooks), taken under the lock in
milliseconds; a key is computed once for the server (``tfviz.classroom.results.SharedResults``:
later callers wait on the first and get its result); one computation at a time per session; its
size is known before it starts (``interventions.grid_cost``), refused above
``TFVIZ_GRID_MAX_GFLOP`` on a CPU, and behind a button (its time estimated) over ``TFVIZ_GRID_AUTO_GFLOP``.
Every wait here is on an event, with a generous deadline; nothing depends on speed.
"""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import chart, messages, open_page, rerun

from tfviz.analysis import effects as ef
from tfviz.analysis import interventions as iv
from tfviz.analysis.cost import train_flops_per_token
from tfviz.classroom.results import Busy, SharedResults
from tfviz.train.checkpoint import load_checkpoint

DEADLINE = 120  # seconds any one event is waited for (a busy 2-core machine)


def until(condition) -> None:
    """Wait for ``condition()`` (checked every 10 ms) up to the deadline."""
    import time

    end = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < end, "deadline passed"
        time.sleep(0.01)


def loaded(path: Path):
    """A ``ui.models.LoadedModel`` of a checkpoint, as the app's cache holds it."""
    from ui.models import LoadedModel, ModelRef

    ckpt = load_checkpoint(path)
    ckpt.model.eval()
    return LoadedModel(ModelRef(path.stem, str(path), "shipped"), ckpt, path.stat().st_mtime_ns)


# ---------------------------------------------------------------------------- a private copy
def test_a_private_copy_shares_the_weights_and_keeps_its_hooks_to_itself(tiny_zoo):
    model = load_checkpoint(tiny_zoo["tiny-coref"]).model.eval()
    twin = iv.private(model)
    assert [p.data_ptr() for p in model.parameters()] == [p.data_ptr() for p in twin.parameters()]
    x = torch.tensor([[2, 8, 9, 10, 11, 12]])
    with torch.no_grad():
        assert torch.equal(twin(x), model(x))
    with iv.hooks(twin, [(iv.head(0, 0).name, lambda z: z * 0)]):
        assert not any(m._forward_hooks for m in model.modules())
        with torch.no_grad():
            assert not torch.equal(twin(x), model(x))  # the head is off in the copy only
    got = ef.head_effects(twin, ef.lm_probe(x))
    want = ef.head_effects(model, ef.lm_probe(x))
    assert np.allclose(got["Δ loss"], want["Δ loss"], atol=1e-6)


def test_grid_cost_counts_the_forwards_effect_runs(tiny_zoo):
    model = load_checkpoint(tiny_zoo["tiny-coref"]).model
    cfg, length = model.config, 7
    per_token = train_flops_per_token(model, length) / 3
    cost = iv.grid_cost(model, 3, length, [None, None])
    assert cost.forward == pytest.approx(3 * length * per_token) and cost.flops == pytest.approx(2 * cost.forward)
    grid = iv.grid_cost(model, 1, length, iv.head_grid_layers(model))
    assert grid.variants == 1 + cfg.n_layers * cfg.n_heads
    head = 2 * cfg.vocab_size * cfg.d_model
    want = sum(head + (per_token - head) * (cfg.n_layers - l) / cfg.n_layers
               for l in range(cfg.n_layers) for _ in range(cfg.n_heads)) + per_token
    assert grid.flops == pytest.approx(length * want)
    assert grid.rows == cfg.n_heads  # one layer's heads batched, as effect's chunks are
    assert grid.seconds(0.5) == pytest.approx(0.5 * grid.flops / (grid.forward * cfg.n_heads))


# ---------------------------------------------------------------------------- computed once
def test_threads_asking_for_the_same_cold_key_compute_it_once():
    results, release, waiting = SharedResults(keep=4, poll=0.01), threading.Event(), set()
    all_waiting = threading.Event()
    n, got = 5, {}

    def compute(report):
        report(0.5, "half way")
        assert release.wait(DEADLINE)
        return object()

    def wait(fraction, message):
        waiting.add(threading.get_ident())
        if len(waiting) == n - 1:
            all_waiting.set()

    def ask(i):
        got[i] = results.get("grid", compute, owner=f"session {i}", wait=wait)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    assert all_waiting.wait(DEADLINE)  # one computes, four wait on it
    release.set()
    for t in threads:
        t.join(DEADLINE)
    assert results.computations == 1 and len({id(v) for v in got.values()}) == 1 and len(got) == n


def test_a_computation_that_fails_is_computed_again_by_a_waiting_caller():
    results, first_started, release = SharedResults(poll=0.01), threading.Event(), threading.Event()
    out = {}

    def fails(report):
        first_started.set()
        assert release.wait(DEADLINE)
        raise RuntimeError("interrupted (a rerun)")

    def first():
        with pytest.raises(RuntimeError):
            results.get("k", fails, owner="a")

    def second():
        out["v"] = results.get("k", lambda report: 42, owner="b", wait=lambda f, m: release.set())

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_started.wait(DEADLINE)
    t2 = threading.Thread(target=second)
    t2.start()
    t1.join(DEADLINE), t2.join(DEADLINE)
    assert out == {"v": 42} and results.computations == 2 and results.peek("k") == 42


def test_one_computation_at_a_time_per_session():
    results, started, release = SharedResults(), threading.Event(), threading.Event()

    def slow(report):
        started.set()
        assert release.wait(DEADLINE)
        return 1

    t = threading.Thread(target=lambda: results.get("first", slow, owner="me"))
    t.start()
    assert started.wait(DEADLINE)
    with pytest.raises(Busy):
        results.get("second", lambda report: 2, owner="me")  # another tab of the same session
    assert results.get("second", lambda report: 2, owner="someone else") == 2
    release.set()
    t.join(DEADLINE)
    assert results.get("second", lambda report: 3, owner="me") == 2  # stored: no computation


def test_ui_computed_runs_once_for_many_sessions_and_looks_again_after_waiting(tiny_zoo):
    """``ui.effects.computed`` itself (outside a page run its bar draws nothing): five threads,
    five sessions, the same cold key: one computation, one result for all."""
    from ui import effects

    lm = loaded(tiny_zoo["tiny-coref"])
    key = ("test-once", threading.get_ident())
    release, calls, got, n = threading.Event(), [], {}, 5
    store = effects._store()

    def compute(progress, model):
        calls.append(model)
        progress(0.1, "started")
        assert release.wait(DEADLINE)
        return ef.head_effects(model, ef.lm_probe(torch.tensor([[2, 8, 9, 10]])))

    def ask(i):
        got[i] = effects.computed(lm, key, compute, "test grid", owner=f"session {i}")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    full = (*lm.key, *key)
    until(lambda: store.callers(full) == n)  # one computes, the others wait on it
    release.set()
    for t in threads:
        t.join(DEADLINE)
    assert len(calls) == 1 and len(got) == n and len({id(v) for v in got.values()}) == 1
    assert store.peek(full) is got[0]
    assert calls[0] is not lm.model  # a private copy, not the shared module


def test_a_grid_does_not_hold_the_shared_models_lock(tiny_zoo):
    """While a real head grid runs (held mid-way, at its first progress report), another
    thread's ``locked([lm])`` view of the same model — a recording, as every page makes —
    proceeds; was: it waited for the whole grid."""
    from ui import effects
    from ui.models import locked

    lm = loaded(tiny_zoo["tiny-coref"])
    x = torch.tensor([[2, 8, 9, 10, 11, 12, 13]])
    grid_running, other_done = threading.Event(), threading.Event()
    seen = {}

    def compute(progress, model):
        def held(fraction, message):
            grid_running.set()
            seen["other proceeded while the grid ran"] = other_done.wait(DEADLINE)
            progress(fraction, message)
        return ef.head_effects(model, ef.lm_probe(x), progress=held)

    def grid():
        seen["df"] = effects.computed(lm, ("test-lock", id(seen)), compute, "test grid", owner="grid")

    def other():
        assert grid_running.wait(DEADLINE)
        with locked([lm]):
            seen["recorded"] = lm.record(x, names=["blocks.0.attn.hook_pattern"])
        other_done.set()

    threads = [threading.Thread(target=grid), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * DEADLINE)
    assert seen["other proceeded while the grid ran"] is True
    assert "blocks.0.attn.hook_pattern" in seen["recorded"]
    want = ef.head_effects(lm.model, ef.lm_probe(x))  # the same numbers as on the shared model
    assert np.allclose(seen["df"]["Δ loss"], want["Δ loss"], atol=1e-6)


# ---------------------------------------------------------------------------- bounded on the CPU
def test_a_grid_over_the_cpu_limit_is_refused_with_the_limit(tiny_zoo, monkeypatch):
    monkeypatch.setenv("TFVIZ_GRID_MAX_GFLOP", "0.000001")  # 1,000 FLOP: every grid is over
    at = open_page("attention", tiny_zoo["tiny-induction"], att_tab="Effects", eff_data="input",
                   att_source="Type text", att_text="a b c d a b c d")
    assert "This server computes at most 1,000.0 FLOP per grid on its CPU (TFVIZ_GRID_MAX_GFLOP): " \
           "shorten the input to about 1 tokens" in messages(at), messages(at)
    assert not at.get("plotly_chart") or all("eff_heatmap" not in c.proto.id for c in at.get("plotly_chart"))


def test_a_grid_estimated_over_the_automatic_start_waits_for_its_button(tiny_zoo, monkeypatch):
    """TFVIZ_GRID_AUTO_GFLOP=0: every grid waits for its button, its estimate shown ("about N s");
    the tab opening starts nothing; the button starts it."""
    monkeypatch.setenv("TFVIZ_GRID_AUTO_GFLOP", "0")
    at = open_page("attention", tiny_zoo["tiny-induction"], att_tab="Effects", eff_data="input",
                   att_source="Type text", att_text="a b c a b c x y")
    assert all("eff_heatmap" not in c.proto.id for c in at.get("plotly_chart"))
    go = [b for b in at.button if b.key and b.key.startswith("eff_go_")]
    assert len(go) == 1 and go[0].label.startswith("Compute (about"), [b.label for b in at.button]
    assert any("runs of the model on" in str(c.value) for c in at.caption)
    go[0].click().run()
    assert chart(at, "eff_heatmap")
    rerun(at)  # stored: shown again without a button
    assert chart(at, "eff_heatmap") and not [b for b in at.button if b.key and b.key.startswith("eff_go_")]
