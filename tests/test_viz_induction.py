"""repeat_by_position (Findings, induction): lines hold the input numbers, the training length and
chance are marked, hover says position / value / count, the figure serialises in the theme."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from tfviz.viz import theme
from tfviz.viz import repeat_by_position


def frame() -> pd.DataFrame:
    rows = []
    for model, base in (("2 layers", 0.05), ("1 layer", 4.7)):
        for p in reversed(range(10)):  # the order of positions must not matter
            n = 0 if p < 2 else 3 * p
            rows.append({"model": model, "position": p, "n_repeat": n,
                         "loss_repeat": math.nan if n == 0 else base + 0.01 * p,
                         "accuracy_repeat": math.nan if n == 0 else 1 - base / 5})
    return pd.DataFrame(rows)


def test_lines_marks_and_hover():
    df = frame()
    fig = repeat_by_position(df, train_length=6, chance=4.85, title="t")
    assert [t.name for t in fig.data] == ["2 layers", "1 layer"]
    for t in fig.data:
        g = df[df["model"] == t.name].sort_values("position")
        assert list(t.x) == list(range(10))
        np.testing.assert_allclose(np.asarray(t.y, float), g["loss_repeat"].to_numpy(), equal_nan=True)
        assert list(t.customdata) == list(g["n_repeat"])
        assert "position %{x}" in t.hovertemplate and "%{customdata} repeated tokens" in t.hovertemplate
    xs = [s.x0 for s in fig.layout.shapes if s.x0 == s.x1]
    ys = [s.y0 for s in fig.layout.shapes if s.y0 == s.y1]
    assert xs == [5.5] and ys == [pytest.approx(4.85)]
    texts = " ".join(a.text for a in fig.layout.annotations)
    assert "longest training sequence (6 tokens)" in texts and "chance 4.85" in texts
    assert "loss" in fig.layout.yaxis.title.text and "position" in fig.layout.xaxis.title.text
    json.loads(fig.to_json())
    assert fig.layout.template.layout.font.family == theme.FONT_FAMILY


def test_accuracy_has_no_chance_line_and_a_0_1_axis():
    fig = repeat_by_position(frame(), train_length=6, chance=4.85, value="accuracy_repeat")
    assert not [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert tuple(fig.layout.yaxis.range) == (0, 1.02) and "accuracy" in fig.layout.yaxis.title.text
    with pytest.raises(ValueError, match="n_repeat"):
        repeat_by_position(frame().drop(columns="n_repeat"))


def test_repeat_floor_curves_put_the_floor_beside_each_model():
    import pandas as pd

    from tfviz.viz import repeat_floor_curves

    df = pd.DataFrame({"model": ["2 layers"] * 2 + ["1 layer"] * 2, "half": [15, 31, 15, 31],
                       "loss": [0.04, 0.08, 4.1, 4.3], "floor": [0.065, 0.154, 0.065, 0.154]})
    fig = repeat_floor_curves(df)
    names = [t.name for t in fig.data]
    assert names[:2] == ["2 layers", "1 layer"] and names[2].startswith("floor")
    assert list(fig.data[0].y) == [0.04, 0.08] and list(fig.data[2].y) == [0.065, 0.154]
    assert fig.data[2].line.dash == "dash"
