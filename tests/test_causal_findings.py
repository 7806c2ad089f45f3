"""The zoo's head claims re-measured by switching heads off (tfviz.zoo.causal), on sentences and
sequences other than the cards' (other seeds, fewer of them: seconds), and the stories' text."""
from __future__ import annotations

import pytest

from tfviz.paths import zoo_dir
from tfviz.train.checkpoint import load_checkpoint
from tfviz.zoo import causal as zc


def ckpt(name):
    p = zoo_dir() / f"{name}.safetensors"
    if not p.is_file():
        pytest.skip(f"no {p}")
    return load_checkpoint(p)


@pytest.fixture(scope="module")
def coref():
    ck = ckpt("coref")
    return zc.coref_effects(ck.model.eval(), ck.shared_task(), n_test=200, n_fresh=120, seed=7)


def test_the_pronoun_heads_carry_the_noun_but_layer_0_chooses_it(coref):
    # pattern: the antecedent heads look at the referent ...
    assert coref["pattern_heads"][:1] == ["L1H1"]
    # ... effect: without them the right noun still wins, but it is no longer the word said;
    # the choice needs a layer-0 head whose pattern is at chance
    checks = zc.coref_checks(coref)
    assert all(checks.values()), checks
    assert coref["effect_heads"][0] == "L0H0"
    story = zc.coref_story(coref)
    assert "layer 0 — L0H0 above all" in story and "Attention is not explanation" in story
    dis = zc.disagreements(coref["heads"])
    assert {"L1H1", "L0H0"} <= set(dis["name"])


def test_induction_previous_token_head_necessary_layer_1_redundant_1_layer_none():
    two, one = ckpt("induction-2L"), ckpt("induction-1L")
    i = zc.induction_effects(two.model.eval(), one.model.eval(), int(two.task["n_symbols"]),
                             half=32, batch=12, seed=5)
    checks = zc.induction_checks(i)
    assert all(checks.values()), checks
    assert i["previous_token_head"] == "L0H2"
    story = zc.induction_story(i)
    assert "necessary" in story and "redundant" in story and "no head matters" in story


def test_section_replaced_not_duplicated():
    text = "# coref\n\nabout\n\n## Heads\n\n- L0H0\n"
    once = zc.replace_section(text, zc.SECTION + "\n\nfirst\n")
    assert once.index(zc.SECTION) < once.index("## Heads")
    twice = zc.replace_section(once, zc.SECTION + "\n\nsecond\n")
    assert twice.count(zc.SECTION) == 1 and "second" in twice and "first" not in twice
    assert twice.endswith("- L0H0\n")
