"""Figures of issue 33 (tfviz.viz.sinks, tfviz.viz.phase): pure functions of their frames; each
trace holds exactly the frame's numbers, hover says them, the marked lines sit where they should."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tfviz.analysis import phase as ph
from tfviz.viz import phase_heatmaps, phase_timeline, sink_share_heatmap, streaming_curves


def shares() -> pd.DataFrame:
    rows = []
    for l in range(2):
        for h in range(3):
            rows.append({"layer": l, "head": h, "name": f"L{l}H{h}", "share_1": 0.1 * (l + h),
                         "even_1": 0.05, "share_4": 0.2 + 0.1 * h, "even_4": 0.2, "ratio_1": 2 * (l + h)})
    return pd.DataFrame(rows)


def test_sink_share_heatmap_holds_every_heads_share() -> None:
    fig = sink_share_heatmap(shares())
    one, four = [t for t in fig.data if t.type == "heatmap"]
    assert np.asarray(one.z).shape == (2, 3) and np.asarray(one.z)[1, 2] == pytest.approx(0.3)
    assert np.asarray(four.z)[0, 1] == pytest.approx(0.3) and np.asarray(one.customdata)[0, 0] == 0.05
    assert "spread evenly" in one.hovertemplate and one.zmin == 0 and one.zmax == 1
    with pytest.raises(ValueError, match="share_4"):
        sink_share_heatmap(shares().drop(columns="share_4"))


def test_streaming_curves_smooth_and_keep_each_positions_loss() -> None:
    pos = np.arange(40)
    df = pd.concat([pd.DataFrame({"condition": c, "label": c.upper(), "position": pos,
                                  "loss": np.sin(pos) + i}) for i, c in enumerate(["dense", "window", "recompute"])])
    fig = streaming_curves(df, train_length=20, window=8, smooth=4)
    assert [t.name for t in fig.data] == ["DENSE", "WINDOW", "RECOMPUTE"]
    w = fig.data[1]
    np.testing.assert_allclose(w.customdata, np.sin(pos) + 1)
    np.testing.assert_allclose(w.y[10], np.mean(np.sin(pos[7:11]) + 1))
    xs = sorted(s.x0 for s in fig.layout.shapes)
    assert xs == [8.5, 19.5]  # the first eviction, the training length
    assert fig.data[0].line.dash == "dot" and fig.data[2].line.dash == "dash"
    legend = fig.layout.legend  # at the figure's bottom edge, whatever the plot's height
    assert (legend.orientation, legend.yref, legend.y, legend.yanchor) == ("h", "container", 0, "bottom")


def records(n_layers: int) -> dict:
    steps = list(range(0, 101, 10))
    out = {"probe": {"tokens": 9, "early": 1, "late": 7, "half": 4, "sequences": 2, "seed": 0},
           "records": []}
    for s in steps:
        out["records"].append({"step": s, "loss": [3.0 - 0.02 * s * (i >= 5) for i in range(8)],
                               "induction": [[0.01 * s / 10, 0.02]] * n_layers,
                               "prev_token": [[0.5, 0.1]] * n_layers})
    return out


def test_phase_heatmaps_share_one_scale_and_hold_the_records() -> None:
    two, one = ph.phase_frames(records(2)), ph.phase_frames(records(1))
    fig = phase_heatmaps({"2 layers": two["loss"], "1 layer": one["loss"]}, early=1, late=7)
    a, b = fig.data
    np.testing.assert_allclose(np.asarray(a.z), two["loss"].to_numpy().T)
    assert list(a.x) == list(range(0, 101, 10)) and list(a.y) == list(range(8))
    assert a.zmax == b.zmax == pytest.approx(3.0) and a.zmin == 0
    assert sorted(s.y0 for s in fig.layout.shapes) == [1, 1, 7, 7]
    with pytest.raises(ValueError):
        phase_heatmaps({})


def test_phase_timeline_puts_icl_and_every_head_on_one_step_axis() -> None:
    two, one = ph.phase_frames(records(2)), ph.phase_frames(records(1))
    loss = pd.DataFrame({"step": [0, 50, 100], "train_loss": [3.0, 2.5, 1.0]})
    fig = phase_timeline({"2 layers": two["curves"], "1 layer": one["curves"]},
                         {"2 layers": two["heads"], "1 layer": one["heads"]}, formed=0.4,
                         windows={"2 layers": (20, 90), "1 layer": None}, train_loss={"2 layers": loss})
    names = [t.name for t in fig.data]
    assert names[0] == "2 layers: ICL score" and "1 layer: ICL score" in names
    icl = fig.data[0]
    np.testing.assert_allclose(icl.y, two["curves"]["icl"])
    bump = next(t for t in fig.data if t.name == "2 layers: training loss")
    assert list(bump.y) == [3.0, 2.5, 1.0] and bump.yaxis == "y2" and bump.xaxis == "x"  # row 1, its own axis
    assert not any(t.name == "1 layer: training loss" for t in fig.data)
    head = next(t for t in fig.data if t.name == "2 layers L0H0" and t.yaxis == "y3")
    np.testing.assert_allclose(head.y, [0.01 * s / 10 for s in range(0, 101, 10)])
    assert {t.xaxis for t in fig.data} == {"x", "x2", "x3"}  # three rows ...
    assert fig.layout.xaxis.matches == fig.layout.xaxis2.matches == "x3"  # ... one step axis
    assert any(s.x0 == 20 and s.x1 == 90 for s in fig.layout.shapes)
