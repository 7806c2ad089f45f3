"""The induction phase change in the app (``tfviz.analysis.phase``): a finished run's records in
the Train page's replay, and the shipped 2-layer / 1-layer runs on the Findings page. Reads the
records a run saved in its checkpoint; nothing is recomputed here but the figures."""
from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from tfviz.analysis import phase as ph
from tfviz.viz import phase_heatmaps, phase_timeline

from .figures import show

ZOO = {"2 layers": "phase-2L", "1 layer": "phase-1L"}  # the shipped runs (tfviz.zoo.specs)


@st.cache_data(max_entries=32, show_spinner=False)
def _phase(path: str, mtime: float) -> dict | None:
    from tfviz.train.checkpoint import read_metadata

    meta = read_metadata(path)
    raw = meta.get("phase")
    if raw is None:
        return None
    cfg = meta.get("model_config") or {}
    return ph.check_phase(raw, int(cfg.get("n_layers", 0)), int(cfg.get("n_heads", 1)))


def records(path: str | None) -> dict | None:
    """The phase records saved in the checkpoint at ``path`` (None: no file, or not an induction
    run); a malformed record -> ValueError."""
    if not path or not os.path.isfile(path):
        return None
    return _phase(path, os.stat(path).st_mtime)


def _losses(history) -> pd.DataFrame:
    """step, train_loss of a run's history (the curve whose bump Olsson et al. point to)."""
    rows = [(h["step"], h["train_loss"]) for h in history or [] if "train_loss" in h]
    return pd.DataFrame(rows, columns=["step", "train_loss"])


def _figures(runs: dict[str, dict], key: str, filename: str, histories: dict) -> list[dict]:
    frames = {name: ph.phase_frames(p) for name, p in runs.items()}
    stories = [ph.phase_story(p, name) for name, p in runs.items()]
    probe = next(iter(runs.values()))["probe"]
    heat = pd.concat([f["loss"].stack().rename("loss").reset_index().assign(model=n)
                      for n, f in frames.items()], ignore_index=True)  # model, step, token index, loss
    show(phase_heatmaps({n: f["loss"] for n, f in frames.items()}, early=probe["early"],
                        late=probe["late"]), key=f"{key}_heat", filename=f"{filename}-loss-by-index",
         data=heat)
    show(phase_timeline({n: f["curves"] for n, f in frames.items()}, {n: f["heads"] for n, f in frames.items()},
                        formed=ph.FORMED, windows={s["label"]: s["icl_window"] for s in stories},
                        train_loss={n: _losses(h) for n, h in histories.items()}),
         key=f"{key}_timeline", filename=f"{filename}-timeline",
         data=pd.concat([f["heads"].merge(f["curves"][["step", "icl", "loss_early", "loss_late"]], on="step")
                         .assign(model=n) for n, f in frames.items()], ignore_index=True))
    for s in stories:
        st.markdown(s["sentence"])
    return stories


def replay_section(snap) -> None:
    """The Train page, under the replay: this run's phase change, when it recorded one."""
    try:
        phase = records(snap.checkpoint)
    except (ValueError, OSError) as e:
        st.warning(f"The run's phase-change records could not be read: {e}")
        return
    if not phase or len(phase["records"]) < 2:
        return
    st.subheader("When did in-context learning appear? (the phase change)")
    p = phase["probe"]
    st.caption(f"Recorded while training, at every logged step, on {p['sequences']} fresh "
               f"sequences [BOS] r r (r: {p['half']} random symbols, never a training example): "
               f"the loss at every token index, the in-context-learning score (loss at token "
               f"{p['late']} minus token {p['early']}, Olsson et al. 2022's 500th minus 50th scaled "
               "to this length) and every head's induction and previous-token scores.")
    _figures({snap.name: phase}, "train_phase", f"{snap.name}-phase", {snap.name: snap.history})


def findings_section(models: dict) -> None:
    """The Findings page: the shipped 2-layer and 1-layer runs on the same axes. ``models``:
    label -> LoadedModel (``ui.models.zoo_model``)."""
    runs = {}
    for label, m in models.items():
        phase = records(m.ref.path)
        if not phase:
            st.warning(f"{m.ref.label} holds no phase-change records: rebuild it with "
                       f"`python -m tfviz.zoo build --only {ZOO.get(label, m.ref.label)}`.")
            return
        runs[label] = phase
    p = next(iter(runs.values()))["probe"]
    st.caption(f"Both runs recorded, at every logged step while training (card: measured when "
               f"the zoo was built), the loss at every token index of {p['sequences']} fresh "
               f"sequences [BOS] r r (r: {p['half']} random symbols) and every head's scores.")
    stories = _figures(runs, "find_phase", "phase", {label: m.ckpt.history for label, m in models.items()})
    st.caption(f"**The paper:** {ph.PAPER}")
    return stories


__all__ = ["ZOO", "findings_section", "records", "replay_section"]
