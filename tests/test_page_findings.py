"""Findings page in AppTest: every section renders from the shipped zoo (checkpoints/), and each
chart holds exactly what an independent recording / the card says."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, head_zeroed, ok, open_page, rerun

import tfviz
from tfviz.analysis import score_model
from tfviz.train.checkpoint import load_checkpoint
from tfviz.paths import SHIPPED as DEFAULT_DIR
from tfviz.zoo import read_cards
from tfviz.analysis.induction import condition_probes
from tfviz.zoo.measure import HELDOUT_BATCH, HELDOUT_SEED, heldout_conditions


@pytest.fixture(autouse=True)
def real_zoo(monkeypatch):
    """The Findings page reads the shipped zoo (checkpoints/), whatever TFVIZ_CHECKPOINT_DIR says."""
    monkeypatch.delenv("TFVIZ_ZOO_DIR", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def zoo(name: str):
    return load_checkpoint(DEFAULT_DIR / f"{name}.safetensors")


def mission_row(ck, sentence: int, position: str) -> np.ndarray:
    ex = ck.build_task().mission_sentences()[sentence - 1]
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(ck.config.n_layers)]
    rec = tfviz.record(ck.model, torch.tensor([ex.tokens]), names=names)
    p = rec.stack_layers("blocks.{l}.attn.hook_pattern")[:, 0]
    return p[:, :, ex.meta[f"{position}_index"], :].numpy()  # [layer, head, k_pos]


def test_coref_probe_is_the_recorded_pronoun_row() -> None:
    at = open_page("findings")
    ck = zoo("coref")
    fig = chart(at, "find_coref_probe")
    want = mission_row(ck, 1, "query")
    np.testing.assert_allclose(arr(fig["data"][0]["z"]), want.reshape(-1, want.shape[-1]), atol=1e-6)
    metrics = {m.label: m.value for m in at.metric}
    assert any(k.startswith("→ law: L") for k in metrics) and any("application" in k for k in metrics)
    # the live head weights are the figure's bars: the best head per noun, > 0.5 each (the claim)
    law = next(float(v) for k, v in metrics.items() if k.startswith("→ law"))
    app = next(float(v) for k, v in metrics.items() if k.startswith("→ application"))
    s1 = {"law": want[..., ck.build_task().mission_sentences()[0].meta["candidate_mentions"][0]].sum(-1).max()}
    assert law == pytest.approx(s1["law"], abs=0.006) and law > 0.5 and app > 0.5
    # the same heads' roles, as the Attention explorer's head-roles table names them (issue 11:
    # the table said "diffuse" for the application head L0H2)
    words = " ".join(m.value for m in at.markdown)
    assert "**Layer 0, head 2: attribute**" in words and "**Layer 1, head 1: antecedent**" in words
    at.radio(key="find_sentence").set_value(2).run()
    at.radio(key="find_position").set_value("pronoun").run()
    ok(at)
    want = mission_row(ck, 2, "pronoun")
    np.testing.assert_allclose(arr(chart(at, "find_coref_probe")["data"][0]["z"]),
                               want.reshape(-1, want.shape[-1]), atol=1e-6)
    assert "Vaswani" in " ".join(c.value for c in at.caption)


def test_induction_bars_are_the_head_scores() -> None:
    at = open_page("findings", finding="Induction heads")
    fig = chart(at, "find_ind_bars")
    names = [t["name"] for t in fig["data"] if t["type"] == "bar"]
    assert names == ["2 layers", "1 layer"]
    for trace, name in zip(fig["data"], ("induction-2L", "induction-1L")):
        df = score_model(zoo(name).model, half=16, batch=32, seed=0)
        np.testing.assert_allclose(arr(trace["y"]), df["induction"].to_numpy(), atol=1e-6)
    two, one = (arr(t["y"]) for t in fig["data"][:2])
    assert two.max() > 0.4 and one.max() <= 0.4
    at.radio(key="find_ind_score").set_value("prev_token").run()
    ok(at)
    fig = chart(at, "find_ind_bars")
    df = score_model(zoo("induction-2L").model, half=16, batch=32, seed=0)
    np.testing.assert_allclose(arr(fig["data"][0]["y"]), df["prev_token"].to_numpy(), atol=1e-6)


def repeat_loss_by_position(model, probes: list[torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """Independent recomputation of the curve: per query position, the mean next-token loss and
    accuracy over the sequences whose token there recurs with the same successor as before."""
    width = min(t.shape[1] for t in probes) - 1
    loss_sum, right, count = np.zeros(width), np.zeros(width), np.zeros(width)
    with torch.no_grad():
        for t in probes:
            logp = torch.log_softmax(model(t).double(), -1)
            for b, row in enumerate(t.tolist()):
                for p in range(width):
                    before = [row[j + 1] for j in range(p) if row[j] == row[p]]
                    if before and set(before) == {row[p + 1]}:
                        loss_sum[p] -= logp[b, p, row[p + 1]].item()
                        right[p] += int(logp[b, p].argmax().item() == row[p + 1])
                        count[p] += 1
    with np.errstate(invalid="ignore"):
        return loss_sum / count, right / count


def test_induction_curve_is_the_recomputed_repeat_loss_per_position() -> None:
    """The per-position curve (2 layers vs 1, training length marked) holds what the models
    compute on the held-out sequences, recomputed here; and it shows the claim: past the longest
    training sequence the 2-layer model still copies, the 1-layer model does not."""
    at = open_page("findings", finding="Induction heads")
    card = read_cards(DEFAULT_DIR)["induction-2L"]
    L, chance = card["finding"]["train_length"], card["finding"]["chance"]
    fig = chart(at, "find_ind_curve")
    lines = {t["name"]: t for t in fig["data"] if t["type"] == "scatter"}
    assert list(lines) == ["2 layers", "1 layer"]
    shapes = fig["layout"]["shapes"]
    assert any(s.get("x0") == L - 0.5 for s in shapes)  # the training length, marked
    assert any(s.get("y0") == pytest.approx(chance) for s in shapes)  # chance, for loss
    conditions = heldout_conditions(zoo("induction-2L").config.max_len)
    probes = condition_probes(zoo("induction-2L").build_task().tokenizer.vocab_size, conditions,
                              batch=HELDOUT_BATCH, seed=HELDOUT_SEED)
    for name, ck in (("2 layers", "induction-2L"), ("1 layer", "induction-1L")):
        want, _ = repeat_loss_by_position(zoo(ck).model, list(probes.values()))
        np.testing.assert_allclose(arr(lines[name]["y"]), want, rtol=1e-4, atol=1e-5)
    two, one = arr(lines["2 layers"]["y"]), arr(lines["1 layer"]["y"])
    assert np.nanmax(two[L:]) < 0.25 * chance and np.nanmin(one[L:]) > 0.5 * chance
    # one condition, accuracy
    at.selectbox(key="find_ind_cond").set_value(conditions[1]["name"]).run()
    at.radio(key="find_ind_value").set_value("accuracy_repeat").run()
    ok(at)
    fig = chart(at, "find_ind_curve")
    assert conditions[1]["name"] in fig["layout"]["title"]["text"]
    _, want = repeat_loss_by_position(zoo("induction-2L").model, [probes[conditions[1]["name"]]])
    np.testing.assert_allclose(arr(fig["data"][0]["y"]), want, atol=1e-9)
    heldout = at.dataframe[0].value
    assert list(heldout["condition"]) == [c["name"] for c in conditions]


def test_extrapolation_curves_from_cards_and_live() -> None:
    at = open_page("findings", finding="Positional extrapolation")
    cards = read_cards(DEFAULT_DIR)
    fig = chart(at, "find_pos_curves")
    lines = {t["name"]: t for t in fig["data"] if t.get("mode") == "lines+markers"}
    assert set(lines) == {"none", "sinusoidal", "learned", "rope", "alibi", "t5"}
    for scheme, t in lines.items():
        want = [np.nan if x is None else x for x in cards[f"pos-{scheme}"]["finding"]["loss"]]
        np.testing.assert_allclose(arr(t["y"]), want, atol=1e-9)
    assert np.isnan(arr(lines["learned"]["y"])[1:]).all()  # cannot run past its table
    at.button(key="find_pos_live").click().run()
    ok(at)
    fig = chart(at, "find_pos_curves")
    assert "(live)" in fig["layout"]["title"]["text"]
    for t in fig["data"]:
        if t.get("mode") == "lines+markers":
            card = [np.nan if x is None else x for x in cards[f"pos-{t['name']}"]["finding"]["loss"]]
            np.testing.assert_allclose(arr(t["y"]), card, rtol=1e-3)
    assert at.dataframe[0].value["scheme"].iloc[0] == "alibi"


def test_cross_attention_is_the_recorded_pattern() -> None:
    at = open_page("findings", finding="Cross-attention")
    ck = zoo("translate")
    best = read_cards(DEFAULT_DIR)["translate"]["finding"]["best_head"]
    ex = ck.build_task().examples("test")[0]
    name = f"decoder.blocks.{best['layer']}.cross_attn.hook_pattern"
    rec = tfviz.record(ck.model, torch.tensor([ex.src]), torch.tensor([ex.tokens]), names=[name])
    fig = chart(at, "find_tr_heatmap")
    np.testing.assert_allclose(arr(fig["data"][0]["z"]), rec[name][0, best["head"]].numpy(), atol=1e-6)
    assert fig["data"][1]["name"] == "expected alignment"
    at.number_input(key="find_tr_index").set_value(7).run()
    at.selectbox(key="find_tr_head").set_value(-1).run()
    ok(at)
    ex = ck.build_task().examples("test")[7]
    rec = tfviz.record(ck.model, torch.tensor([ex.src]), torch.tensor([ex.tokens]), names=[name])
    np.testing.assert_allclose(arr(chart(at, "find_tr_heatmap")["data"][0]["z"]),
                               rec[name][0].mean(0).numpy(), atol=1e-6)


def test_all_models_table_and_kv_bars() -> None:
    at = open_page("findings", finding="All models")
    cards = read_cards(DEFAULT_DIR)
    assert list(at.dataframe[0].value["model"]) == list(cards)
    fig = chart(at, "find_lm_bars")
    np.testing.assert_allclose(arr(fig["data"][0]["y"]),
                               [cards[n]["metrics"]["kv_bytes_per_token"] for n in ("lm", "lm-gqa", "lm-mqa")])


def test_missing_zoo_and_missing_model_warn(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TFVIZ_ZOO_DIR", str(tmp_path))
    at = open_page("findings")
    assert any("No zoo models" in w.value for w in at.warning)
    shutil.copy(DEFAULT_DIR / "mlm.safetensors", tmp_path / "mlm.safetensors")
    at = open_page("findings")
    assert any("coref" in w.value and "missing" in w.value for w in at.warning)
    for section in ("Induction heads", "Positional extrapolation", "Cross-attention", "All models"):
        at.radio(key="finding").set_value(section).run()
        ok(at)
        assert at.warning or section == "All models"


def test_compare_section_shows_the_norm_pair_from_its_checkpoints() -> None:
    """Pre/post-norm: the loss curves are the checkpoints' own history, the bars their recorded
    per-layer gradient norms; every shipped pair is in the table."""
    from tfviz.analysis.compare import layer_grad_norms

    at = open_page("findings")
    at.radio(key="finding").set_value("Compare: one setting apart").run()
    ok(at)
    curves = {t["name"].split(":")[0]: arr(t["y"]) for t in chart(at, "find_norm_curves")["data"]}
    bars = {t["name"]: arr(t["y"]) for t in chart(at, "find_norm_grads")["data"]}
    for n in ("norm-pre", "norm-post"):
        ck = zoo(n)
        np.testing.assert_allclose(curves[n], [h["train_loss"] for h in ck.history], atol=1e-4)
        np.testing.assert_allclose(bars[n], layer_grad_norms(ck.history, until=50)["norm"], atol=1e-4)
    assert bars["norm-post"][0] > 2 * bars["norm-pre"][0]
    table = next(d.value for d in at.dataframe if "comparison" in d.value.columns)
    assert set(table["comparison"]) == {"positional family", "MHA / GQA / MQA",
                                        "pre-norm vs post-norm", "1 layer vs 2 layers"}


z_off = head_zeroed  # a plain forward hook (apptest_helpers)


def test_pattern_or_choice_shows_both_pronoun_models_side_by_side() -> None:
    """Issue 31: the coref model's pattern head off keeps its answer, the agreement model's pattern
    head off loses it; each figure holds the recorded pattern row and the probabilities with the
    head off, recomputed here with plain hooks."""
    at = open_page("findings", finding="“It”: pattern or choice?")
    words = " ".join(m.value for m in at.markdown)
    assert "the pattern is not the choice" in words and "the pattern is the choice" in words
    for key, name, head, answer in (("find_contrast_coref", "coref", (1, 1), "law"),
                                    ("find_contrast_agreement", "agreement", (0, 1), "law")):
        ck = zoo(name)
        ex = ck.build_task().mission_sentences()[0]
        x, q = torch.tensor([ex.tokens]), ex.meta["query_index"]
        fig = chart(at, key)
        bars = [t for t in fig["data"] if t["type"] == "bar"]
        rec = tfviz.record(ck.model, x, names=[f"blocks.{head[0]}.attn.hook_pattern"])
        np.testing.assert_allclose(arr(bars[0]["y"]), rec[f"blocks.{head[0]}.attn.hook_pattern"][0, head[1], q].numpy(), atol=1e-6)
        with torch.no_grad():
            on = ck.model(x)[0, q].softmax(-1)
        off = z_off(ck.model, x, *head)[0, q].softmax(-1)
        law = ck.tokenizer.token_to_id(answer)
        np.testing.assert_allclose(arr(bars[1]["y"]), [on[law].item(), off[law].item()], atol=1e-5)
        if name == "coref":
            assert off.argmax().item() == law  # the choice survives the pattern head
        else:
            assert off.argmax().item() != law and off[law].item() < 0.5  # the choice is gone
    rerun(at, find_agree_sentence_pick=2)
    fig = chart(at, "find_agree_sentence")
    assert [t["name"] for t in fig["data"] if t["type"] == "bar"][1:] == ["P(law)", "P(rule)"]
    assert "their" in fig["layout"]["title"]["text"]


def test_coref_paragraph_follows_the_chosen_sentence() -> None:
    at = open_page("findings")
    words = " ".join(m.value for m in at.markdown)
    assert "two-head picture" in words and "its application should be just" in words
    rerun(at, find_sentence=2)
    words = " ".join(m.value for m in at.markdown)
    assert "two-head picture" not in words and "because it is too complex" in words
    assert "No head cleanly picks *application*" in words and "diffuse" in words
    assert "With **L0H0** off the model answers" in words  # the chosen sentence, heads off


def test_induction_floor_is_the_recomputed_loss_beside_the_bigram_floor() -> None:
    from collections import Counter

    from tfviz.analysis.induction import floor_halves, replacement_sequences

    at = open_page("findings", finding="Induction heads")
    fig = chart(at, "find_ind_floor")
    lines = {t["name"]: t for t in fig["data"]}
    ck = zoo("induction-2L")
    halves = floor_halves(ck.config.max_len)
    vocab = ck.build_task().tokenizer.vocab_size
    want_loss, want_floor = [], []
    for i, half in enumerate(halves):
        t = replacement_sequences(vocab, half, HELDOUT_BATCH, HELDOUT_SEED * 1000 + i)
        with torch.no_grad():
            logp = torch.log_softmax(ck.model(t).double(), -1)
        losses, floors = [], []
        for b, row in enumerate(t.tolist()):
            first = row[1:half + 1]
            pairs, totals = Counter(zip(first, first[1:])), Counter(first[:-1])
            for p in range(half + 1, 2 * half):
                losses.append(-logp[b, p, row[p + 1]].item())
                floors.append(-np.log(pairs[row[p], row[p + 1]] / totals[row[p]]))
        want_loss.append(np.mean(losses))
        want_floor.append(np.mean(floors))
    np.testing.assert_allclose(arr(lines["2 layers"]["y"]), want_loss, rtol=1e-4)
    floor = next(t for n, t in lines.items() if n.startswith("floor"))
    np.testing.assert_allclose(arr(floor["y"]), want_floor, atol=1e-9)
    assert "vs floor" in " ".join(m.value for m in at.markdown)
