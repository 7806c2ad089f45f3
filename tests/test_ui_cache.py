"""ui.cache's shared figures (issue 15, the class's load): one figure per server for what it shows,
never one session's figure for another's data."""
from __future__ import annotations

import numpy as np

from ui import cache


def test_figure_for_is_keyed_on_the_key_the_builder_and_the_keywords() -> None:
    calls = []

    def bars(values, *, value="loss"):
        calls.append(value)
        return {"values": list(values), "value": value}

    def curves(values, *, value="loss"):
        return {"curves": list(values), "value": value}

    key = ("models", ("norm-pre", "/zoo/norm-pre.safetensors", 1), (1, 2, 3))
    loss = cache.figure_for(key, bars, np.arange(3), value="loss")
    # the key, not the data, decides: a second session's call neither hashes nor rebuilds
    assert cache.figure_for(key, bars, np.arange(3), value="loss") is loss and calls == ["loss"]
    accuracy = cache.figure_for(key, bars, np.arange(3), value="accuracy")  # keywords are part of it
    assert accuracy is not loss and accuracy["value"] == "accuracy"
    assert "curves" in cache.figure_for(key, curves, np.arange(3))  # so is the builder
    other = cache.figure_for(key + ((4,),), bars, np.arange(4), value="loss")  # another input
    assert other["values"] == [0, 1, 2, 3] and calls == ["loss", "accuracy", "loss"]


def test_figure_is_keyed_on_its_data() -> None:
    def heat(z, *, title=""):
        return {"z": np.asarray(z).tolist(), "title": title}

    a = cache.figure(heat, np.eye(2), title="t")
    assert cache.figure(heat, np.eye(2), title="t") is a
    assert cache.figure(heat, np.zeros((2, 2)), title="t")["z"] == [[0.0, 0.0], [0.0, 0.0]]
