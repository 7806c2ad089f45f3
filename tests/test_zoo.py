"""The shipped zoo (checkpoints/): every model loads and reproduces its card, and the effects it
exists to show are still there — a rebuild that loses one fails here.

Every measurement is re-run from the checkpoint files (``tfviz.zoo.measure``) on the same fixed
sample the card was measured on, so card and re-measurement agree up to float noise.
"""
from __future__ import annotations

import math

import pytest
import torch

from tfviz import load_checkpoint
from tfviz.analysis.induction import generalisation, pool_positions, position_curve
from tfviz.tasks import make_task
from tfviz.paths import SHIPPED as DEFAULT_DIR
from tfviz.zoo import SPECS, build, compare, measure, read_cards
from tfviz.zoo.measure import heldout_conditions
from tfviz.zoo import findings as zf
from tfviz.zoo.__main__ import main as zoo_main

NAMES = [s.name for s in SPECS]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # small models; more threads only fight over a busy CPU
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def cards() -> dict[str, dict]:
    return read_cards(DEFAULT_DIR)


@pytest.fixture(scope="module")
def live() -> dict[str, dict]:
    """Every shipped model re-measured now: name -> {"metrics", "finding", ...}."""
    return {n: measure(load_checkpoint(DEFAULT_DIR / f"{n}.safetensors")) for n in NAMES}


def as_card(m: dict) -> dict:
    return {"metrics": m["metrics"], "finding": m["finding"]}


# ------------------------------------------------------------------------------ shipped files
def test_every_zoo_model_is_shipped_with_its_card(cards) -> None:
    assert list(cards) == NAMES
    for name in NAMES:
        assert (DEFAULT_DIR / f"{name}.json").is_file()
        md = (DEFAULT_DIR / f"{name}.md").read_text()
        assert md.startswith(f"# {name}") and "rebuild: `python -m tfviz.zoo build --only" in md
        c = cards[name]
        assert c["train"]["num_threads"] == 1 and c["build"]["train_seconds"] > 0
    assert "Findings" in (DEFAULT_DIR / "README.md").read_text()
    total = sum(p.stat().st_size for p in DEFAULT_DIR.glob("*") if p.is_file())
    assert total <= 50 * 2**20, f"checkpoints/ is {total / 2**20:.1f} MB (limit 50 MB)"


def test_positional_family_is_marked(cards) -> None:
    family = {n: c for n, c in cards.items() if c["family"] == "positional"}
    assert sorted(c["model"]["pos"] for c in family.values()) == sorted(
        ["none", "sinusoidal", "learned", "rope", "alibi", "t5"])
    for name in family:
        extra = load_checkpoint(DEFAULT_DIR / f"{name}.safetensors").meta["extra"]
        assert extra["family"] == "positional" and extra["train_length"] == 32


@pytest.mark.parametrize("name", NAMES)
def test_card_reproduces(name, cards, live) -> None:
    rows = compare(cards[name]["metrics"], live[name]["metrics"])
    assert len(rows) >= 2
    bad = [r for r in rows if not r["ok"]]
    assert not bad, f"{name}: metrics that no longer match the card: {bad[:5]}"


def test_compare_tolerances() -> None:
    rows = {r["key"]: r["ok"] for r in compare(
        {"accuracy": 0.90, "head.L0H0.induction": 0.50, "loss": 2.0, "kv_bytes_per_token": 512,
         "loss@128": None},
        {"accuracy": 0.915, "head.L0H0.induction": 0.54, "loss": 2.03, "kv_bytes_per_token": 512,
         "loss@128": None})}
    assert rows == {"accuracy": False, "head.L0H0.induction": True, "loss": False,
                    "kv_bytes_per_token": True, "loss@128": True}


# ------------------------------------------------------------------------------ the effects
def test_coref_law_head_and_application_head(live) -> None:
    claim = zf.coref_claim(as_card(live["coref"]))
    assert claim["accuracy"] >= 0.95
    a = claim["antecedent_head"]
    assert a["antecedent_max"] >= 0.90, a  # one head on the true referent in >= 90% of test sentences
    s1 = claim["mission_s1"]  # "… but its application should be just.", read at the final "its"
    law, app = s1["law"], s1["application"]
    assert (law["layer"], law["head"]) != (app["layer"], app["head"])
    assert law["weight"] > 0.5 and app["weight"] > 0.5, s1
    assert claim["holds"]


def test_agreement_one_head_is_the_choice(live, cards) -> None:
    """Issue 31: accurate over the whole vocabulary and between the nouns on held-out frames and
    pairs; the one head whose pattern picks the referent, switched off, leaves a guess; patched
    from the other pronoun's sentence, the answer flips (the card's seed; other seeds:
    tests/test_causal_agreement.py)."""
    m, f = live["agreement"]["metrics"], live["agreement"]["finding"]
    assert m["accuracy"] >= 0.95 and m["pairwise_accuracy"] >= 0.95
    assert len(f["pattern_heads"]) == 1 and all(f["checks"].values()), f["checks"]
    head = f["pattern_heads"][0]
    for data in ("heldout", "fresh"):
        assert m[f"off.{head}.{data}.pairwise_accuracy"] <= 0.65
        assert m[f"patch.{head}.{data}.flips"] >= 0.8
        assert m[f"off.every other head.{data}.pairwise_accuracy"] >= 0.98
    assert m[f"head.{head}.antecedent_max"] > 0.9
    s1, s2 = f["mission"]
    assert (s1["answers"][0]["answer"], s2["answers"][0]["answer"]) == ("law", "rule")
    assert s1["answers"][1]["answer"] != "law" and s2["answers"][1]["answer"] != "rule"
    assert cards["agreement"]["model"]["n_layers"] == 1


def test_induction_two_layers_yes_one_layer_no(live) -> None:
    two, one = live["induction-2L"], live["induction-1L"]
    chance = two["finding"]["chance"]
    assert two["metrics"]["max_induction"] > 0.4 and one["metrics"]["max_induction"] <= 0.4
    assert two["metrics"]["loss_repeat"] < 0.25 * chance   # the repeats are predicted
    assert one["metrics"]["loss_repeat"] > 0.25 * chance   # ... only with two layers
    assert two["finding"]["previous_token_heads"]  # layer 0 prepares the keys
    assert all(h.startswith("L1") for h in two["finding"]["induction_heads"])
    assert zf.induction_contrast(as_card(two), as_card(one))["holds"]


def test_induction_heldout_conditions_leave_the_training_ranges(cards) -> None:
    for name in ("induction-2L", "induction-1L"):
        card = cards[name]
        t = card["task"]
        assert card["finding"]["train_length"] == t["length"] + 1  # [BOS] + the longest
        held = heldout_conditions(card["model"]["max_len"])
        for c in held:  # every condition about twice as long as any training sequence
            assert c["length"] >= 2 * t["length"] - 2, c  # tokens after [BOS]: 126-127 vs 64
        assert max(c["segment"] for c in held) > 3 * t["segment"]  # segments never trained on
        assert max(c["repeats"] for c in held) > 2 * t["repeats"]  # repeat counts likewise
        assert sum(c["segment"] > t["segment"] or c["repeats"] > t["repeats"] for c in held) >= 4


@pytest.fixture(scope="module")
def fresh_induction() -> dict:
    """Both induction models on fresh held-out inputs that no card was measured on (seed 7):
    name -> (table, pooled positions)."""
    out = {}
    for name in ("induction-2L", "induction-1L"):
        ck = load_checkpoint(DEFAULT_DIR / f"{name}.safetensors")
        vocab = ck.build_task().tokenizer.vocab_size
        table, positions = generalisation(ck.model.eval(), vocab,
                                          heldout_conditions(ck.config.max_len), batch=48, seed=7)
        out[name] = (table, pool_positions(list(positions.values())))
    return out


def test_induction_holds_on_fresh_inputs_past_the_training_length(fresh_induction, cards) -> None:
    """The mechanism, not a positional trick: on fresh sequences twice as long as any training
    sequence, with segment lengths and repeat counts never trained on, two layers copy the
    repeated tokens in every condition and at every position; one layer cannot."""
    L = cards["induction-2L"]["finding"]["train_length"]
    chance = cards["induction-2L"]["finding"]["chance"]  # ln 128 = 4.85
    two, two_pos = fresh_induction["induction-2L"]
    one, one_pos = fresh_induction["induction-1L"]
    for r in two.to_dict("records"):
        assert r["loss_repeat"] < 0.6 and r["accuracy_repeat"] > 0.9, r
        assert r["max_induction"] > 0.5 and r["best_head"].startswith("L1"), r
    for r in one.to_dict("records"):
        assert r["loss_repeat"] > 0.7 * chance and r["accuracy_repeat"] < 0.15, r
        assert r["max_induction"] < 0.2, r
    # position by position, past the longest training sequence (every later position pooled
    # over the conditions has >= 40 repeated tokens)
    for pos, ok in ((two_pos, lambda loss, acc: loss < 1.0 and acc > 0.75),
                    (one_pos, lambda loss, acc: loss > 0.6 * chance and acc < 0.25)):
        curve = position_curve(pos)
        late = curve[curve["position"] >= L]
        assert len(late) >= 60 and (late["n_repeat"] >= 40).all()
        bad = late[[not ok(a, b) for a, b in zip(late["loss_repeat"], late["accuracy_repeat"])]]
        assert bad.empty, bad


def test_positional_ordering_as_measured(live) -> None:
    """What the shipped family measures (see checkpoints/README.md): ALiBi stays flat, and both
    ALiBi and RoPE grow less from 1x to 4x than sinusoidal; learned cannot run past 1x."""
    L = 32
    growth = {}
    for pos in ("none", "sinusoidal", "learned", "rope", "alibi", "t5"):
        m = live[f"pos-{pos}"]["metrics"]
        growth[pos] = None if m[f"loss@{4 * L}"] is None else m[f"loss@{4 * L}"] - m[f"loss@{L}"]
    assert growth["learned"] is None and live["pos-learned"]["metrics"][f"loss@{L}"] is not None
    assert abs(growth["alibi"]) < 0.05
    assert growth["alibi"] < growth["rope"] < growth["sinusoidal"]
    assert growth["sinusoidal"] > 0.5  # sinusoidal degrades badly beyond its training length
    order = zf.positional_ordering(zf.extrapolation_frame(
        {n: {**c, "finding": live[n]["finding"]} for n, c in read_cards(DEFAULT_DIR).items()}), L)
    assert order["scheme"].iloc[0] == "alibi" and order["scheme"].iloc[-1] == "learned"


def test_translate_cross_attention_follows_the_reordering(live) -> None:
    m = live["translate"]
    assert m["metrics"]["accuracy"] >= 0.9
    assert m["finding"]["best_head"]["share"] >= 0.8
    assert m["finding"]["best_head_reordered"]["share"] >= 0.8


def test_mlm_and_lm_family(live, cards) -> None:
    mlm = live["mlm"]["metrics"]
    assert mlm["accuracy"] > 0.35 and mlm["accuracy"] > 1.5 * mlm["accuracy_majority_baseline"]
    kv = {n: live[n]["metrics"]["kv_bytes_per_token"] for n in ("lm", "lm-gqa", "lm-mqa")}
    c = cards["lm"]["model"]
    d_head = c["d_model"] // c["n_heads"]
    assert kv == {n: 2 * c["n_layers"] * k * d_head * 4 for n, k in
                  (("lm", c["n_heads"]), ("lm-gqa", 2), ("lm-mqa", 1))}
    for n in ("lm", "lm-gqa", "lm-mqa"):
        assert math.exp(live[n]["metrics"]["val_loss"]) == pytest.approx(live[n]["metrics"]["val_ppl"])
        assert live[n]["metrics"]["val_loss"] < 2.0


# ------------------------------------------------------------------------------ reproducibility
def test_build_is_deterministic(tmp_path) -> None:
    """The same command twice gives the same weights and the same card metrics (one small model,
    a few steps)."""
    a = build(["induction-1L"], tmp_path / "a", steps=12, log=lambda _: None)[0]
    b = build(["induction-1L"], tmp_path / "b", steps=12, log=lambda _: None)[0]
    assert a["metrics"] == b["metrics"] and a["finding"] == b["finding"]
    wa = load_checkpoint(tmp_path / "a" / "induction-1L.safetensors").model.state_dict()
    wb = load_checkpoint(tmp_path / "b" / "induction-1L.safetensors").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (tmp_path / "a" / "induction-1L.md").is_file() and (tmp_path / "a" / "README.md").is_file()
    assert "--steps 12" in a["build"]["command"]


def test_remeasure_rewrites_the_card_and_keeps_the_weights(tmp_path) -> None:
    """``python -m tfviz.zoo measure`` re-measures a built model and rewrites its card (here
    after a card lost a metric), never touching the weights or the training record."""
    import json
    import shutil

    from tfviz.train.checkpoint import save_checkpoint

    shutil.copy(DEFAULT_DIR / "translate.safetensors", tmp_path / "translate.safetensors")
    ck = load_checkpoint(tmp_path / "translate.safetensors")
    extra = dict(ck.meta["extra"])
    card = json.loads(json.dumps(extra["card"]))
    lost = card["metrics"].pop("accuracy")
    save_checkpoint(tmp_path / "translate.safetensors", ck.model, tokenizer=ck.tokenizer, task=ck.task,
                    train_config=ck.train_config, history=ck.history, extra={**extra, "card": card},
                    snapshots=ck.snapshots)
    assert zoo_main(["measure", "--only", "translate", "--dir", str(tmp_path)]) == 0
    after = load_checkpoint(tmp_path / "translate.safetensors")
    new = after.meta["extra"]["card"]
    assert new["metrics"]["accuracy"] == pytest.approx(lost, abs=1e-9)
    assert new["build"]["train_seconds"] == card["build"]["train_seconds"] and new["build"]["remeasured"]
    wa, wb = ck.model.state_dict(), after.model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa) and after.history == ck.history
    assert (tmp_path / "translate.md").read_text().startswith("# translate")
    assert (tmp_path / "README.md").is_file()


def test_cli_evaluate_one_model_and_unknown_name(capsys) -> None:
    assert zoo_main(["evaluate", "--only", "mlm"]) == 0
    assert "every card reproduces" in capsys.readouterr().out
    assert zoo_main(["evaluate", "--only", "nope"]) == 2
    assert zoo_main(["list"]) == 0


def test_induction_task_min_half() -> None:
    """The variable repeat length the induction models train on (a small change to the task:
    default behaviour is unchanged)."""
    task = make_task("induction", min_half=4, n_train=200, n_val=20, n_test=20)
    halves = {e.meta["half"] for e in task.examples("train")}
    assert min(halves) >= 4 and max(halves) <= 16 and len(halves) > 5
    for e in task.examples("train")[:20]:
        n = e.meta["half"]
        assert len(e.tokens) == 1 + 2 * n and e.tokens[1:n + 1] == e.tokens[n + 1:]
    assert {e.meta["half"] for e in make_task("induction", n_train=50, n_val=5, n_test=5)
            .examples("train")} == {16}
    with pytest.raises(ValueError, match="min_half"):
        make_task("induction", min_half=20).examples("train")


# ------------------------------------------------------------------------------ pre-norm vs post-norm
def test_norm_pair_differs_in_norm_placement_only(cards) -> None:
    from tfviz.runs.pairs import check_pair

    cks = [load_checkpoint(DEFAULT_DIR / f"{n}.safetensors") for n in ("norm-pre", "norm-post")]
    assert check_pair([(c.config, c.train_config) for c in cks]) == "norm"
    tc = cks[0].train_config
    assert tc.warmup == 0 and not tc.grad_clip
    for c in cks:  # per-layer gradient norms were recorded on every logged step
        assert all(set(h["grad_norms"]) >= {f"L{l}.attn" for l in range(6)} for h in c.history)


def test_post_norm_unstable_pre_norm_stable(live, cards) -> None:
    from tfviz.zoo.findings import norm_contrast

    now = {n: {**cards[n], **as_card(live[n])} for n in ("norm-pre", "norm-post")}
    c = norm_contrast(now["norm-pre"], now["norm-post"])
    assert c["holds"], c
    assert c["post"]["grad_first"] > 2 * c["pre"]["grad_first"]


def test_pre_norm_better_on_other_fresh_text() -> None:
    """On grammar sentences of seeds the card did not use (never trained on), pre-norm's loss
    stays below post-norm's."""
    from tfviz.analysis.positional import sequence_metrics
    from tfviz.zoo.measure import fresh_lm_batch

    cks = {n: load_checkpoint(DEFAULT_DIR / f"norm-{n}.safetensors") for n in ("pre", "post")}
    for seed in (7, 8):
        loss = {n: sequence_metrics(c.model, *fresh_lm_batch(c.tokenizer, 32, 4096, seed))[0]
                for n, c in cks.items()}
        assert loss["pre"] + 0.3 < loss["post"], (seed, loss)


def test_compare_section_lists_every_shipped_pair(cards) -> None:
    from tfviz.zoo.findings import compare_frame, findings_markdown

    df = compare_frame(cards)
    assert list(dict.fromkeys(df["comparison"])) == ["positional family", "MHA / GQA / MQA",
                                                     "pre-norm vs post-norm", "1 layer vs 2 layers"]
    kv = df[df.measure == "KV cache bytes per token"].set_index("model")["number"]
    assert kv["lm"] == 2 * kv["lm-gqa"] == 4 * kv["lm-mqa"]
    assert "### Compare" in findings_markdown(cards) and "### Pre-norm vs post-norm" in findings_markdown(cards)


def test_norm_frames_are_the_cards(cards) -> None:
    from tfviz.zoo.findings import norm_contrast, norm_frames, norm_metrics

    curves, bars = norm_frames(cards)
    ck = load_checkpoint(DEFAULT_DIR / "norm-post.safetensors")
    got = curves[curves.model == "norm-post"]
    assert got["value"].tolist() == pytest.approx([h["train_loss"] for h in ck.history], abs=1e-4)
    from tfviz.analysis.compare import layer_grad_norms

    want = layer_grad_norms(ck.history, until=cards["norm-post"]["finding"]["early_steps"])
    assert bars[bars.model == "norm-post"]["norm"].tolist() == pytest.approx(want["norm"].tolist(), abs=1e-4)
    assert len(norm_metrics(norm_contrast(cards["norm-pre"], cards["norm-post"]))) == 3
