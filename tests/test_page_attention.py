"""The Attention explorer page in AppTest, on the tiny real checkpoints: every chart is compared
with patterns recorded independently here (``tfviz.record`` on the same checkpoint)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest_helpers import charts, heatmap_z, open_page, rerun

import tfviz
from tfviz.train.checkpoint import load_checkpoint


def recorded(path, *inputs) -> tfviz.Recording:
    model = load_checkpoint(path).model
    return tfviz.record(model, *[torch.tensor([list(x)]) for x in inputs])


@pytest.fixture(scope="module")
def coref(tiny_zoo):
    path = tiny_zoo["tiny-coref"]
    mission = load_checkpoint(path).build_task().mission_sentences()[0]
    return path, mission, recorded(path, mission.tokens)


# ------------------------------------------------------------------------------ decoder (coref)
def test_heatmap_is_the_recorded_pattern_of_the_chosen_head(coref):
    path, mission, rec = coref
    at = open_page("attention", path)  # default input: mission sentence 1
    np.testing.assert_allclose(heatmap_z(charts(at)[0]),
                               rec["blocks.0.attn.hook_pattern"][0, 0].numpy(), atol=1e-6)
    rerun(at, att_layer=1, att_head=2)  # switching heads re-slices the same recording
    fig = charts(at)[0]
    np.testing.assert_allclose(heatmap_z(fig), rec["blocks.1.attn.hook_pattern"][0, 2].numpy(),
                               atol=1e-6)
    assert "layer 1 · head 2" in fig["layout"]["title"]["text"]
    assert [b.label for b in at.get("download_button")][:1] == ["Download data (CSV)"]


def test_grid_tile_at_layer_head_is_that_head(coref):
    path, mission, rec = coref
    at = open_page("attention", path, att_tab="All heads", att_layer=1, att_head=3)
    grid, below = charts(at)
    z = heatmap_z(grid)
    n = len(mission.tokens)
    P = rec.stack_layers("blocks.{l}.attn.hook_pattern")[:, 0].numpy()  # [layer, head, q, k]
    assert z.shape == (2 * n + 1, 4 * n + 3)  # 2 layers x 4 heads, one NaN gutter between
    for layer in range(2):
        for head in range(4):
            tile = z[layer * (n + 1):layer * (n + 1) + n, head * (n + 1):head * (n + 1) + n]
            np.testing.assert_allclose(tile, P[layer, head], atol=1e-6)
    picks = next(t for t in grid["data"] if t.get("meta") == "select")
    assert len(picks["customdata"]) == 8  # one invisible click target per tile
    assert grid["layout"]["shapes"]  # the selected tile is outlined
    np.testing.assert_allclose(heatmap_z(below), P[1, 3], atol=1e-6)


def test_a_grid_click_or_a_table_row_picks_the_head(coref):
    path, _, rec = coref
    at = open_page("attention", path, att_tab="All heads")
    # what a click on the tile-centre marker of (layer 1, head 3) leaves in the chart's state
    rerun(at, att_grid={"selection": {"points": [{"customdata": [1, 3]}], "point_indices": [7],
                                      "box": [], "lasso": []}})
    assert (at.session_state["att_layer"], at.session_state["att_head"]) == (1, 3)
    np.testing.assert_allclose(heatmap_z(charts(at)[1]),
                               rec["blocks.1.attn.hook_pattern"][0, 3].numpy(), atol=1e-6)
    rerun(at, att_head=0)  # the selectors still work afterwards: an old click is not re-applied
    assert at.session_state["att_head"] == 0
    rerun(at, att_tab="Head roles")
    rerun(at, att_table={"selection": {"rows": [6], "columns": [], "cells": []}})
    assert (at.session_state["att_layer"], at.session_state["att_head"]) == (1, 2)  # row 6
    assert "Layer 1, head 2" in " ".join(m.value for m in at.markdown)


def test_step_through_softmax_is_the_recorded_row(coref):
    path, mission, rec = coref
    q = mission.meta["query_index"]
    at = open_page("attention", path, att_tab="Step-through", att_layer=1, att_head=1)
    assert at.session_state["att_query"] == q  # the pronoun query by default
    assert len(at.success) == 1 and at.success[0].value.startswith("✓")
    fig = charts(at)[0]
    stages = next(t for t in fig["data"] if t.get("name") == "stages")
    softmax = [float(row[-1]) for row in stages["text"]]
    np.testing.assert_allclose(softmax, rec["blocks.1.attn.hook_pattern"][0, 1, q].numpy(),
                               atol=1e-3)  # printed with 3 decimals
    assert "RoPE-rotated" in " ".join(c.value for c in at.caption)
    rerun(at, att_query=3)  # an earlier query: causal mask hides later keys
    assert at.success[0].value.startswith("✓")
    assert f"{len(mission.tokens) - 4} of {len(mission.tokens)} keys masked" in \
        " ".join(m.value for m in at.markdown)


def test_lines_view(coref):
    path, mission, rec = coref
    at = open_page("attention", path, att_tab="Lines")
    fig = charts(at)[0]
    assert {"queries", "keys"} <= {t.get("name") for t in fig["data"]}
    rerun(at, lines_query=len(mission.tokens) - 1, lines_orientation="horizontal",
          lines_all_heads=True)
    legend = {t["name"] for t in charts(at)[0]["data"] if t.get("showlegend") is not False
              and t["name"].startswith("head")}
    assert legend == {"head 0", "head 1", "head 2", "head 3"}


def test_head_table_has_one_row_per_layer_and_head(coref):
    path, _, _ = coref
    at = open_page("attention", path, att_tab="Head roles")
    df = at.dataframe[0].value
    assert len(df) == 2 * 4
    assert sorted(zip(df["layer"], df["head"])) == [(l, h) for l in range(2) for h in range(4)]
    assert {"label", "prev_token", "first_token", "induction", "local", "entropy",
            "antecedent"} <= set(df.columns)
    assert len(charts(at)) == 1  # the selected head, under the table


def test_pronoun_probe_on_the_mission_sentences(coref):
    path, mission, rec = coref
    at = open_page("attention", path, att_tab="Pronoun probe")
    q = mission.meta["query_index"]
    fig = charts(at)[0]
    P = rec.stack_layers("blocks.{l}.attn.hook_pattern")[:, 0, :, q, :].numpy()  # [l, h, k]
    np.testing.assert_allclose(heatmap_z(fig), P.reshape(8, -1), atol=1e-6)
    text = " ".join(m.value for m in at.markdown)
    assert "→ **'law'**" in text and "→ **'application'**" in text
    table = at.dataframe[0].value
    assert len(table) == 8 and {"law", "application", "winner"} <= set(table.columns)
    rerun(at, probe_source="Mission sentence 2")
    assert "complex" in " ".join(m.value for m in at.markdown)
    assert len(charts(at)) == 1


def test_pronoun_probe_follows_the_sentence(coref):
    """Choosing mission sentence 2 moves the Pronoun box to that sentence's own pronoun: the
    position kept from sentence 1 ('its' at 16) is 'the' in sentence 2 (issue 25, item 1)."""
    path, _, _ = coref
    task = load_checkpoint(path).build_task()
    first, second = task.mission_sentences()
    at = open_page("attention", path, att_tab="Pronoun probe")
    assert at.session_state["probe_query"] == first.meta["query_index"]
    rerun(at, probe_source="Mission sentence 2")
    q = second.meta["query_index"]
    words = task.tokenizer.tokens_of(second.tokens)
    assert at.session_state["probe_query"] == q and words[q].strip() in ("it", "its")
    box = next(s for s in at.selectbox if s.key == "probe_query")
    assert box.options and all(o.endswith(("'it'", "'its'")) for o in box.options), box.options
    assert f"Where does '{words[q]}' (pos {q})" in charts(at)[0]["layout"]["title"]["text"]
    rerun(at, probe_source="Mission sentence 1")  # and back: sentence 1's 'its'
    assert at.session_state["probe_query"] == first.meta["query_index"]


def test_typed_text_empty_and_unknown_words(coref):
    path, _, _ = coref
    at = open_page("attention", path, att_source="Type text", att_text="the law and the zorblax qwop")
    warnings = " ".join(w.value for w in at.warning)
    assert "'zorblax'" in warnings and "'qwop'" in warnings
    ids = [2] + load_checkpoint(path).tokenizer.encode_ids("the law and the zorblax qwop")
    np.testing.assert_allclose(heatmap_z(charts(at)[0]),
                               recorded(path, ids)["blocks.0.attn.hook_pattern"][0, 0].numpy(),
                               atol=1e-6)
    rerun(at, att_text="   ")
    assert any("empty" in w.value for w in at.warning)
    assert not at.get("plotly_chart")


# ------------------------------------------------------------------------------ other archs
def test_encoder_decoder_cross_attention(tiny_zoo):
    path = tiny_zoo["tiny-translate"]
    ex = load_checkpoint(path).build_task().examples("validation")[0]
    rec = recorded(path, ex.src, ex.tokens)
    at = open_page("attention", path, att_site="cross-attention", att_head=1)
    fig = charts(at)[0]
    z = heatmap_z(fig)
    assert z.shape == (len(ex.tokens), len(ex.src))  # [tgt_pos, src_pos]
    np.testing.assert_allclose(z, rec["decoder.blocks.0.cross_attn.hook_pattern"][0, 1].numpy(),
                               atol=1e-6)
    assert any(t.get("name") == "expected alignment" for t in fig["data"])
    rerun(at, att_site="encoder self-attention")
    np.testing.assert_allclose(heatmap_z(charts(at)[0]),
                               rec["encoder.blocks.0.attn.hook_pattern"][0, 1].numpy(), atol=1e-6)
    rerun(at, att_tab="Step-through", att_site="cross-attention")
    assert at.success[0].value.startswith("✓")
    rerun(at, att_tab="Head roles", att_site="decoder self-attention")
    assert len(at.dataframe[0].value) == 2
    rerun(at, att_tab="Heatmap", att_source="Type text", att_src="a red car .", att_tgt="")
    assert any("empty" in w.value for w in at.warning)
    rerun(at, att_tgt="une voiture", att_site="cross-attention")
    assert heatmap_z(charts(at)[0]).shape == (3, 4)  # [BOS] une voiture × a red car .


def test_encoder_alibi_step_through_and_pronoun_probe_absent(tiny_zoo):
    at = open_page("attention", tiny_zoo["tiny-mlm"], att_tab="Step-through")
    assert at.success[0].value.startswith("✓")
    assert "hook_pos_bias (alibi)" in " ".join(c.value for c in at.caption)
    rerun(at, att_tab="Pronoun probe")
    assert any("coreference" in i.value for i in at.info)


def test_induction_default_probe_and_length_cap(tiny_zoo):
    at = open_page("attention", tiny_zoo["tiny-induction"])
    assert at.session_state["att_source"] == "Type text"
    tokens = at.session_state["att_text"].split()
    assert len(tokens) == 32 and tokens[:16] == tokens[16:]  # a random sequence, repeated
    rerun(at, att_text=" ".join(["a"] * 300))
    assert any("showing the first 128" in w.value for w in at.warning)
    assert heatmap_z(charts(at)[0]).shape == (128, 128)


# ------------------------------------------------------------------------------ shipped coref
@pytest.fixture
def shipped(monkeypatch):
    """The app's picker lists the shipped checkpoints (whatever TFVIZ_CHECKPOINT_DIR said)."""
    from tfviz.paths import SHIPPED

    monkeypatch.setenv("TFVIZ_CHECKPOINT_DIR", str(SHIPPED))
    return SHIPPED


def test_head_roles_and_pronoun_probe_agree_on_the_shipped_coref_model(shipped):
    """Issue 11, before: the head-roles table called L0H2 "diffuse — spreads its attention almost
    evenly" (its entropy over every position) while Findings and the pronoun probe call it the
    'application' head (0.99). After: roles are scored on the task's own sentences at the
    pronoun, where they show: L0H2 reads the word after the pronoun that decides the referent
    (an attribute head; in mission sentence 1 that word is 'application'), and the probe names
    the same role. One label column (was: "label" and "labels")."""
    path = shipped / "coref.safetensors"
    at = open_page("attention", path, att_tab="Head roles")
    table = at.dataframe[0].value
    assert "labels" not in table.columns and "label" in table.columns
    roles = {(int(l), int(h)): r for l, h, r in zip(table["layer"], table["head"], table["label"])}
    assert roles[(0, 2)] == "attribute" and roles[(1, 1)] == "antecedent"
    rerun(at, att_tab="Pronoun probe")  # mission sentence 1, read at the final 'its'
    probe = at.dataframe[0].value
    assert dict(zip(zip(probe["layer"], probe["head"]), probe["role"])) == roles
    lines = " ".join(m.value for m in at.markdown)
    assert "→ **'application'**: L0·H2 (0.99, attribute)" in lines
    assert "→ **'law'**: L1·H1 (1.00, antecedent)" in lines
    far = probe[probe["elsewhere"] >= 0.9]
    assert (far["winner"] == "elsewhere").all()  # no noun "wins" with 90% of the weight elsewhere
