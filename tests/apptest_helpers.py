"""What every AppTest of the app uses: one way to open a page, and readers for what a page shows.

    at = open_page("attention", model=path, att_layer=1)   # app.py -> app_pages/attention.py
    rerun(at, att_head=2)                                   # set widget state, run, no exception
    chart(at, "att_heatmap")                                # the figure JSON shown under that key
    arr(fig["data"][0]["z"])                                # a Plotly array as numpy

``state`` is set after the page's first run: a page forgets its own keys when it first sees a
model (``ui.widgets.forget_on_model_change``), exactly as when a student opens it.
"""
from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TIMEOUT_S = 120  # per script run; a busy 2-core machine: torch, a model, a measurement


def problems(at: AppTest) -> list[str]:
    return [e.value for e in at.exception]


def ok(at: AppTest) -> AppTest:
    assert not problems(at), problems(at)
    return at


def open_page(page: str | None = None, model: str | Path | None = None, *,
              timeout: float = TIMEOUT_S, **state) -> AppTest:
    """app.py in AppTest with ``model`` selected (a checkpoint path), switched to
    ``app_pages/<page>.py`` (None: Home); then ``state`` set and the page run again."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    if model is not None:
        at.session_state["model_path"] = str(model)
    at.run()
    if page is not None:
        at.switch_page(f"app_pages/{page}.py").run()
    ok(at)
    return rerun(at, **state) if state else at


def rerun(at: AppTest, **state) -> AppTest:
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    return ok(at)


def messages(at: AppTest) -> str:
    """Every warning / error / info / success text of the page and sidebar, one per line."""
    return "\n".join(str(m.value) for kind in ("warning", "error", "info", "success")
                     for m in getattr(at, kind))


def text(at: AppTest) -> str:
    """Every message, caption and markdown text of the page, joined."""
    return " ".join(str(e.value) for kind in ("info", "success", "warning", "error", "caption",
                                              "markdown") for e in getattr(at, kind))


def charts(at: AppTest) -> list[dict]:
    """The figure JSON of every Plotly chart, in page order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def chart(at: AppTest, key: str) -> dict:
    """The figure JSON of the chart shown under ``key`` (``ui.figures.show(fig, key)``)."""
    found = [c for c in at.get("plotly_chart") if c.proto.id.endswith(f"-{key}")]
    assert len(found) == 1, f"no chart {key!r}: {[c.proto.id for c in at.get('plotly_chart')]}"
    return json.loads(found[0].proto.spec)


def arr(v) -> np.ndarray:
    """A Plotly JSON array as float numpy: a (nested) list, None = gap (NaN), or a typed array
    {"dtype", "bdata", "shape"}."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        if v.get("shape"):
            a = a.reshape([int(s) for s in str(v["shape"]).split(",")])
        return a.astype(float)
    nested = v and isinstance(v[0], (list, tuple))
    return np.array([[np.nan if x is None else x for x in row] for row in v] if nested else
                    [np.nan if x is None else x for x in v], dtype=float)


def heatmap_z(fig: dict) -> np.ndarray:
    """z of the figure's first heatmap trace."""
    return arr(next(t for t in fig["data"] if t["type"] == "heatmap")["z"])


def traces(fig: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """trace name -> (x, y)."""
    return {t["name"]: (arr(t["x"]), arr(t["y"])) for t in fig["data"]}


def poll(at: AppTest, done, timeout: float = 120) -> AppTest:
    """Fragments do not tick in AppTest: run the page again until ``done(at)`` (a deadline, not a
    speed assertion: generous for a loaded 2-core machine); no page may show a problem meanwhile."""
    t0 = time.perf_counter()
    while not done(at):
        assert time.perf_counter() - t0 < timeout, messages(at)
        time.sleep(0.3)
        at.run()
        assert not problems(at), problems(at)
    return at


def my_jobs(at: AppTest) -> list:
    """This AppTest session's training runs on the server's one ``RunManager`` (``ui.jobs.job_manager``)."""
    from ui.jobs import job_manager

    return job_manager().jobs(owner=at.session_state["sid"])


def stop_all(*sessions: AppTest, wait_s: float = 60) -> None:
    """Stop every training job of these AppTest sessions and wait for each to end."""
    from ui.jobs import job_manager

    for at in sessions:
        for job in my_jobs(at):
            job_manager().stop(job.id)
        for job in my_jobs(at):
            job.wait(wait_s)


def head_zeroed(model, x, layer: int, head: int, stack: str = "stack."):
    """Logits with head ``head`` of ``layer`` zeroed by a plain forward hook on its ``hook_z``
    (an independent recomputation of "switched off", for tests)."""
    import torch

    mod = dict(model.named_modules())[f"{stack}blocks.{layer}.attn.hook_z"]

    def fn(m, i, z):
        z = z.clone()
        z[:, :, head] = 0
        return z
    h = mod.register_forward_hook(fn)
    try:
        with torch.no_grad():
            return model(x)
    finally:
        h.remove()
