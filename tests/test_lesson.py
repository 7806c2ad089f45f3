"""The lesson's UI-free parts (issue 32): "what to notice" sentences written from the numbers they
are given (and saying so when an effect is absent), and the class record a teacher leads."""
from __future__ import annotations

import threading

import pytest

from tfviz import lesson as say
from tfviz.classroom.follow import MAX_FIELDS, MAX_VALUE, ClassRecord


def test_a_notice_quotes_its_numbers() -> None:
    n = {"query": ("its", 16), "head": (1, 1), "d": 16, "keys": 17, "masked": 0, "ok": True, "error": 3e-7,
         "top": [("law", 2, 7.56, 0.997), ("application", 10, 0.41, 0.001)]}
    text = say.qkv(n)
    assert "'law'" in text and "**1.00**" in text and "÷√16" in text and "3e-07" in text
    n["top"][0] = ("application", 10, 2.0, 0.61)
    assert "'application'" in say.qkv(n) and "**0.61**" in say.qkv(n)
    n["ok"], n["error"] = False, 0.02
    assert "differ from the model's" in say.qkv(n)


def test_a_notice_says_when_the_effect_is_absent() -> None:
    heads = {"law": (1, 1, 0.9), "application": (1, 1, 0.4)}
    on = {"law": {"law": 0.9, "application": 0.4}, "application": {"law": 0.9, "application": 0.4}}
    text = say.it_heads({"pronoun": ("it", 11), "heads": heads, "on": on})
    assert "no head separates them" in text and "No head prefers 'application'" in text
    w2v = {"words": 10, "dim": 8, "loss": (3.0, 1.0), "word": "dog", "near": [("cat", 0.9)],
           "analogy": [("king", 0.8)]}
    assert "the analogy fails here" in say.word2vec(w2v)
    assert "the analogy fails" not in say.word2vec({**w2v, "analogy": [("queen", 0.9)]})
    peek = {"pos": 3, "old": "a", "new": "b", "before": 0.0, "after": 2.5, "causal": True}
    assert "exactly **0**" in say.nopeek(peek)
    assert "reads both ways" in say.nopeek({**peek, "causal": False, "before": 1.2})
    bag = {"a": "x y", "b": "y z", "words": 3, "same": False, "differ": ["x", "z"], "same_order": False}
    assert "differ in the words" in say.bag(bag) and "identical" not in say.bag(bag)
    effects = {"metric": "pairwise accuracy", "baseline": 1.0, "on": "300 sentences",
               "worst": ("L0H0", -0.1), "looks": ("L1H1", "weight", 0.97, 0.0)}
    assert "is not what the answer depends on" in say.it_effects(effects)
    assert "also the head whose pattern" in say.it_effects({**effects, "looks": ("L0H0", "weight", 0.9, -0.1)})


def test_the_choice_notice_says_both_the_sentence_and_the_average() -> None:
    """Issue 31: the agreement step's notice reads the sentence's answers and the held-out
    pairwise accuracy from the view, says whether the head decides (a guess at <= 65%), and says
    so when the one sentence and the average disagree."""
    n = {"text": "the law and the rules ... its application", "head": "L0H1", "referent": "law",
         "weight": 0.93, "before": ("law", 0.98), "after": ("rule", 0.55), "pairwise": (0.99, 0.52),
         "on": "300 held-out sentences"}
    text = say.it_choice(n)
    assert "**law** (0.98)" in text and "**rule** (0.55)" in text and "99% to 52%" in text
    assert "the head that looks is the head that decides" in text and "does not change" not in text
    assert "neither of the two nouns" in say.it_choice({**n, "candidates": ["law", "rule"], "after": ("truck", 0.7)})
    assert "neither" not in say.it_choice({**n, "candidates": ["law", "rule"]})
    held = say.it_choice({**n, "after": ("law", 0.9), "pairwise": (0.99, 0.9)})
    assert "not the whole decision" in held and "does not change" in held


def test_every_part_is_a_lecture_stage_in_order() -> None:
    assert list(say.PARTS) == ["tokens", "vectors", "order", "rnn", "attention", "heads", "block", "decoder", "it",
                               "positions", "rope", "masks", "taxonomy", "bert", "cost"]


def test_the_class_record_moves_only_when_the_view_changes() -> None:
    r = ClassRecord()
    assert r.current().version == 0
    a = r.publish({"step": "qkv", "head": "L1·H1"})
    assert a.version == 1 and r.publish({"step": "qkv", "head": "L1·H1"}).version == 1  # the same view
    b = r.publish({"step": "heatmap", "head": 3})
    assert b.version == 2 and b.state == {"step": "heatmap", "head": "3"} and b.at >= a.at
    assert r.current() is b


def test_the_class_record_is_bounded() -> None:
    r = ClassRecord()
    with pytest.raises(ValueError, match="at most"):
        r.publish({f"k{i}": 1 for i in range(MAX_FIELDS + 1)})
    with pytest.raises(ValueError, match="characters"):
        r.publish({"text": "x" * (MAX_VALUE + 1)})
    assert r.current().version == 0


def test_the_class_record_under_many_threads() -> None:
    r, seen = ClassRecord(), []

    def lead():
        for i in range(200):
            r.publish({"step": str(i)})

    def follow():
        last = 0
        for _ in range(500):
            v = r.current().version
            assert v >= last
            last = v
        seen.append(last)

    threads = [threading.Thread(target=lead)] + [threading.Thread(target=follow) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.current().version == 200 and r.current().state == {"step": "199"}


def test_followers_wait_while_the_leader_draws() -> None:
    r = ClassRecord()
    assert r.wait_for_leader(0.5) < 0.1  # nobody leading: no wait
    r.begin()
    assert r.leader_busy()
    done = []
    t = threading.Thread(target=lambda: done.append(r.wait_for_leader(5.0)))
    t.start()
    t.join(0.2)
    assert t.is_alive()  # held back while the leader draws …
    r.end()
    t.join(5)
    assert done and 0.15 < done[0] < 5  # … and let go when the leader is done
    r.begin()
    assert 0.25 <= r.wait_for_leader(0.3) < 2  # never longer than asked


def test_a_dead_leader_holds_nobody_back(monkeypatch) -> None:
    r = ClassRecord()
    monkeypatch.setattr(ClassRecord, "STALE_S", 0.2)
    r.begin()  # and never end: the leader's run died
    assert r.wait_for_leader(5.0) < 1.0 and not r.leader_busy()


def test_followers_redraw_a_few_at_a_time() -> None:
    r, inside, most, lock = ClassRecord(), [0], [0], threading.Lock()

    def redraw():
        with r.follower_turn():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            threading.Event().wait(0.02)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=redraw) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == ClassRecord.REDRAWS and inside[0] == 0


def test_the_sinks_notice_says_whether_the_papers_signature_holds() -> None:
    """Issue 33: the window step's notice quotes every scheme's loss beyond the training length
    against recomputation, and says the paper's signature held, half held or is absent."""
    n = {"label": "lm-bos", "train_length": 64, "window": 32, "end": 512, "kmax": 4,
         "loss_far": {"recompute": 1.86, "window": 1.861, "sinks 4": 1.859, "dense": 2.37},
         "gap": {"recompute": 0.0, "window": 0.001, "sinks 4": -0.001, "dense": 0.51},
         "sink_heads": 0, "heads": 8, "top_head": "L1H0", "top_share": 0.03, "top_even": 0.04,
         "window_blows_up": False, "sinks_close": True, "signature": False,
         "sink_ratio": 2.0, "blowup": 0.5, "close": 0.1}
    text = say.sinks(n)
    assert "**1.86** nats" in text and "with a sliding window of 32" in text and "2.37 (+0.51)" in text
    assert "signature is **absent**" in text and "0 of 8 heads" in text and "full attention, not the window" in text
    assert "(+0.00) with the first 4 tokens" in text and "-0.00" not in text  # -0.001 rounds to zero
    held = say.sinks({**n, "loss_far": {**n["loss_far"], "window": 4.1}, "gap": {**n["gap"], "window": 2.24, "dense": 0.2},
                      "window_blows_up": True, "signature": True, "sink_heads": 6})
    assert "That is the paper's signature" in held and "+2.24" in held and "6 of 8" in held
    assert "not the window" not in held
    half = say.sinks({**n, "window_blows_up": True, "sinks_close": False, "gap": {**n["gap"], "window": 1.0}})
    assert "Only half" in half


# ------------------------------------------------------------------------------ claims (issue 42)
def _grad(rows: dict) -> dict:
    return {"distance": 25, "rows": {stage: {m: {"key": k, "per_step": 0.9, "loss": loss, "near": 1e-3}
                                             for m, (k, loss) in r.items()} for stage, r in rows.items()}}


def test_the_vanishing_gradient_claims_hold_or_say_they_do_not() -> None:
    """The textbook ordering (RNN fades most, then LSTM, attention not at all) checked per stage:
    both branches, each with its numbers."""
    good = _grad({"initialisation": {"rnn": (1.1e-8, 3.5), "lstm": (8e-6, 3.4), "transformer": (1.59, 3.6)},
                  "trained": {"rnn": (0.029, 0.56), "lstm": (0.135, 0.0015), "transformer": (119.0, 6e-5)}})
    cs = say.claims(say.gradient, good)
    assert [c.name for c in cs] == ["textbook ordering, initialisation", "textbook ordering, trained"]
    assert all(c.holds for c in cs)
    text = say.gradient(good)
    assert "**1.1e-08×**" in text and "**119×**" in text and "holds at initialisation" in text
    assert "does **not** hold" not in text and "compare the shape of each line" in text
    # the reading of the old figure: the LSTM fading more than the RNN after training
    bad = _grad({"initialisation": {"rnn": (1.1e-8, 3.5), "lstm": (8e-6, 3.4), "transformer": (1.59, 3.6)},
                 "trained": {"rnn": (0.3, 0.5), "lstm": (0.01, 0.5), "transformer": (0.05, 0.5)}})
    first, second = say.claims("gradient", bad)
    assert first.holds and not second.holds
    assert "does **not** hold after training" in second.text
    assert "the LSTM, the transformer, the RNN" in second.text  # most to least faded, said
    assert "under 0.1× of its neighbour's" in second.text and "**0.01×**" in second.text
    assert "compare the shape" not in say.gradient(bad)  # no loss near zero here


def test_the_one_hot_claim_related_words_end_up_close() -> None:
    """Within-group mean cosine against across-group, both branches, and no claim when the words
    make no pair of one kind."""
    n = {"n": 4, "model": "m", "d": 8, "lo": 0.1, "hi": 0.9, "pair": ("dog", "cat"), "pair_cos": 0.9,
         "groups": {"animal": ["dog", "cat"], "person": ["doctor", "child"]}, "within": 0.8, "across": 0.2}
    (c,) = say.claims(say.onehot, n)
    assert c.name == "related words end up close" and c.holds
    text = say.onehot(n)
    assert "closer here" in text and "**0.80**" in text and "**0.20**" in text and "both in the animal group" in text
    assert "small margin" not in text and "small margin" in say.onehot({**n, "across": 0.78})
    fails = {**n, "within": 0.659, "across": 0.668, "pair": ("fox", "doctor")}
    (c,) = say.claims("onehot", fails)
    assert not c.holds and "do **not** end up closer" in c.text and "**0.66**" in c.text and "**0.67**" in c.text
    assert "from the animal and person groups" not in say.onehot(fails)  # 'fox' is not in this n's groups
    none = say.onehot({**n, "within": None})
    assert say.claims("onehot", {**n, "within": None}) == [] and "not checked here" in none


def test_the_learned_positions_claim_says_the_sign() -> None:
    """Far positions' mean cosine is said with its sign (the old notice's absolute value hid that
    pos-learned's far pairs average -0.45, 98% negative); both branches of the claim."""
    n = {"model": "pos-learned", "max_len": 32, "neighbour": 0.553, "far_gap": 16, "far": -0.454,
         "far_negative": 0.978, "far_pairs": 136}
    (c,) = say.claims(say.learned, n)
    assert c.holds and "**-0.45**" in c.text and "98% of those 136 pairs below zero" in c.text
    assert "opposite directions" in say.learned(n) and "absolute" not in say.learned(n)
    assert "unrelated on average" in say.learned({**n, "far": -0.002, "far_negative": 0.44})
    assert "**+0.00**" in say.learned({**n, "far": -0.002})  # no "-0.00"
    (c,) = say.claims("learned", {**n, "neighbour": 0.2, "far": 0.5, "far_negative": 0.0})
    assert not c.holds and "**not** more alike" in c.text and "still alike" in c.text


def test_the_it_heads_claims_word_by_the_larger_weight() -> None:
    """Issue 42: a head with 0.56 on 'application' and 0.32 on 'law' leans towards 'application';
    one with 0.99 against 0.00 follows; a noun after the pronoun in a causal model is unseen."""
    n = {"pronoun": ("it", 28), "heads": {"law": (1, 3, 0.99), "application": (1, 2, 0.56)},
         "on": {"law": {"law": 0.99, "application": 0.0}, "application": {"law": 0.32, "application": 0.56}},
         "positions": {"law": [3, 17], "application": [6, 20]}, "causal": True}
    cs = {c.name: c for c in say.claims(say.it_heads, n)}
    assert cs["a head follows 'law'"].holds and "**L1·H3** follows 'law': 0.99" in cs["a head follows 'law'"].text
    c = cs["a head follows 'application'"]
    assert c.holds and "leans towards 'application' (0.56) but still puts 0.32 on 'law'" in c.text
    assert cs["different heads follow different nouns"].holds
    flipped = {**n, "on": {**n["on"], "application": {"law": 0.6, "application": 0.3}},
               "heads": {**n["heads"], "application": (1, 2, 0.3)}}
    cs = {c.name: c for c in say.claims("it_heads", flipped)}
    assert not cs["a head follows 'application'"].holds and "puts more on 'law' (0.60)" in cs["a head follows 'application'"].text
    assert not cs["different heads follow different nouns"].holds
    unseen = {**n, "pronoun": ("its", 5)}
    cs = {c.name: c for c in say.claims("it_heads", unseen)}
    assert not cs["a head follows 'application'"].holds and "comes after 'its' (pos 5)" in cs["a head follows 'application'"].text


def test_the_order_claim_attention_alone() -> None:
    """Step 15: 'attention alone has no sense of order' checked on the no-positions decoder's
    weights run without its mask; both branches; no claim when there is no such run."""
    n = {"first": {"no positions": 0.0, "learned positions": 0.21}, "last": {"no positions": 2.6, "learned positions": 4.0},
         "stage": "after layer 1", "causal": True,
         "unmasked": {"label": "no positions and no mask", "relative": 1.5e-7, "most": 1.2e-6}}
    (c,) = say.claims(say.order, n)
    assert c.name == "attention alone has no sense of order" and c.holds
    text = say.order(n)
    assert "only because it is a decoder" in text and "float rounding" in text and "1.2e-06" in text
    (c,) = say.claims("order", {**n, "unmasked": {**n["unmasked"], "relative": 0.3, "most": 2.0}})
    assert not c.holds and "still tell the two sentences apart by up to **2**" in c.text
    assert say.claims("order", {**n, "unmasked": None}) == []


def test_the_paths_claims_say_one_step_per_layer() -> None:
    """Step 8: the attention path is flat in n and equals the layer count (the chart's '2 steps'
    for 2 layers); the RNN's grows; both branches of the per-model claim."""
    n = {"rows": {"rnn": (4.0, 4.0, 64.0, 64.0), "transformer": (4.0, 2.0, 64.0, 2.0)},
         "layers": {"rnn": 1, "transformer": 2}}
    cs = {c.name: c for c in say.claims(say.paths, n)}
    assert cs["transformer: the path does not grow with n"].holds
    assert "one hop in each of its 2 layers" in cs["transformer: the path does not grow with n"].text
    assert not cs["rnn: the path does not grow with n"].holds and "it grows with n" in cs["rnn: the path does not grow with n"].text
    assert "the number of layers, not the distance" in say.paths(n)
    flat = say.paths({"rows": {"transformer": (4.0, 2.0, 64.0, 2.0)}, "layers": {"transformer": 3}})
    assert "one hop in each" not in flat and "not the distance" not in flat


def test_the_bottleneck_claims_explain_the_fall_past_training() -> None:
    """Step 7: attention against the single vector at the longest trained length, and one token
    longer — the transformer's fall to 0% explained by its cross-attention's alignment; both
    branches of both claims."""
    n = {"trained": 10, "at": {"gru": 0.14, "gru-attention": 1.0, "transformer": 1.0},
         "next": {"gru": 0.05, "gru-attention": 0.91, "transformer": 0.0},
         "next_tokens": {"gru": 0.81, "gru-attention": 0.99, "transformer": 0.47},
         "alignment": {"transformer": {8: 1.0, 10: 1.0, 12: 0.083}}, "attends": ["gru-attention", "transformer"]}
    squeeze, longer = say.claims(say.bottleneck, n)
    assert squeeze.holds and "the GRU 14% without attention" in squeeze.text
    assert not longer.holds and "The transformer gets 0% of whole outputs right at length 11 (but 47% of single tokens)" in longer.text
    assert "100% of output positions at length 10 and 8% at 12" in longer.text
    fine = {**n, "next": {**n["next"], "transformer": 0.9}}
    assert say.claims("bottleneck", fine)[1].holds and "does **not**" not in say.bottleneck(fine)
    worse = {**n, "at": {**n["at"], "transformer": 0.1}}
    assert not say.claims("bottleneck", worse)[0].holds and "does **not** beat the single vector" in say.bottleneck(worse)


def test_the_tokens_and_mask_notices_say_what_the_settings_did() -> None:
    """Issue 42's smaller defects: the character tokenizer's unknowns are said; a BPE vocabulary
    smaller than the slider allowed is explained; a window setting a mask kind ignores is said."""
    n = {"chars": 60, "bpe_asked": 2000, "rows": {"char": {"count": 60, "unknowns": 3, "vocab_size": 33},
                                                  "bpe": {"count": 32, "unknowns": 0, "vocab_size": 414}}}
    text = say.tokens(n)
    assert "**3** of them unknown" in text and "allowed 2000 pieces but learned 414" in text
    n["rows"]["char"]["unknowns"], n["bpe_asked"] = 0, 414
    assert "unknown ([UNK]: characters" not in say.tokens(n) and "allowed" not in say.tokens(n)
    m = {"kind": "causal / full", "n": 4, "allowed": 10, "most": 4, "window": None, "asked_window": 3,
         "blocked_weight": 0.0}
    assert "does not apply" in say.mask(m)
    assert "does not apply" not in say.mask({**m, "kind": "sliding window", "window": 3})


def test_every_other_claim_has_both_branches() -> None:
    """Issue 42's audit: recall, heads, sinusoidal, RoPE, no-peeking and cost each say their claim
    when it holds and say plainly, with the number, when it does not."""
    rec = {"rows": {"rnn": (1.0, 0.91, 64.0, 0.68), "lstm": (1.0, 1.0, 64.0, 1.0), "transformer": (1.0, 1.0, 64.0, 1.0)},
           "trained": 32, "chance": 0.125}
    cs = {c.name: c for c in say.claims(say.recall, rec)}
    assert cs["rnn: recall falls with distance"].holds and "The RNN loses 23 points" in say.recall(rec)
    assert not cs["lstm: recall falls with distance"].holds and "does **not** fall" in cs["lstm: recall falls with distance"].text
    heads = {"layers": 1, "heads": 2, "query": ("it", 3), "targets": {(0, 0): ("law", 0.9), (0, 1): ("app", 0.8)}}
    assert say.claims(say.heads, heads)[0].holds and "2 different tokens" in say.heads(heads)
    same = {**heads, "targets": {(0, 0): ("law", 0.9), (0, 1): ("law", 0.8)}}
    assert not say.claims("heads", same)[0].holds and "do **not** differ" in say.heads(same)
    sin = {"n": 8, "d": 8, "fast": 6.28, "slow": 100.0, "neighbour": 0.9, "closest": 1.47}
    assert say.claims(say.sinusoidal, sin)[0].holds and "1.47 apart" in say.sinusoidal(sin)
    assert not say.claims("sinusoidal", {**sin, "closest": 0.0})[0].holds
    rope = {"head": (0, 2), "q": ".", "k": "a", "spread": 5e-15, "by_distance": {0: 8.5, 1: 8.3},
            "model": (23, 0, -0.047, -0.047)}
    assert say.claims(say.rope, rope)[0].holds and "**5e-15**" in say.rope(rope)
    assert "does **not**" in say.rope({**rope, "spread": 0.3})
    peek = {"pos": 4, "old": "old", "new": "happy", "before": 0.0, "after": 1.49, "causal": True}
    assert say.claims(say.nopeek, peek)[0].holds and "exactly **0**" in say.nopeek(peek)
    assert "this model peeks ahead" in say.nopeek({**peek, "before": 0.2})
    assert say.claims("nopeek", {**peek, "causal": False}) == []
    cost = {"what": "time", "rows": {"full attention": (4096, 0.89, 8192, 3.62), "window, band only": (4096, 0.02, 8192, 0.0385)}}
    assert all(c.holds for c in say.claims(say.cost, cost)) and "**not**" not in say.cost(cost)
    flat = {**cost, "rows": {"full attention": (4096, 1.0, 8192, 2.1), "window, band only": (4096, 1.0, 8192, 3.9)}}
    assert not any(c.holds for c in say.claims("cost", flat))
    assert "**not** the quadratic 4× here" in say.cost(flat) and "**not** the linear 2× here" in say.cost(flat)


def test_the_word2vec_group_claim() -> None:
    w2v = {"words": 10, "dim": 8, "loss": (3.0, 1.0), "word": "dog", "near": [("cat", 0.9)],
           "analogy": [("queen", 0.9)], "within": 0.82, "across": 0.28, "groups": 6}
    (c,) = say.claims(say.word2vec, w2v)
    assert c.holds and "**0.82**" in say.word2vec(w2v) and "**0.28**" in say.word2vec(w2v)
    (c,) = say.claims("word2vec", {**w2v, "within": 0.2})
    assert not c.holds and "did not learn the groups" in c.text
    assert say.claims("word2vec", {**w2v, "within": None}) == []


# ------------------------------------------------------------------------------ issue 42, item 2
BLOCK = {"query": (".", 23), "layers": 2, "norm": "pre", "next": "the", "sum_error": 3e-8,
         "stages": [("embeddings", 0.31, 0.46), ("L0 + attention", 0.61, 0.64), ("L0 + MLP", 11.8, 0.81),
                    ("L1 + attention", 12.9, 0.81), ("L1 + MLP", 16.9, 0.84)],
         "ln": {"mean": 4e-8, "spread": (0.997, 1.0), "given": (0.039, 2.53)}}


def test_the_block_claims_both_branches() -> None:
    held = {c.name: c for c in say.claims(say.block, BLOCK)}
    assert set(held) == {"each sublayer adds to the stream", "layer norm: mean 0, spread 1",
                         "the layers build the prediction"}
    assert all(c.holds for c in held.values())
    text = say.block(BLOCK)
    assert "**adds**" in text and "3e-08" in text and "0.0394" not in text and "0.039 to 2.53" in text
    assert "**0.46**" in text and "**0.84**" in text and "L0 + attention (+0.18)" in text
    post = {**BLOCK, "norm": "post", "sum_error": 42.1,
            "ln": {"mean": 4e-8, "spread": (0.4, 1.0), "given": (1e-6, 6.3)},
            "stages": [("embeddings", 0.8, 0.5), ("L0 + attention", 1.0, 0.3), ("L0 + MLP", 5.2, 0.22)]}
    failed = {c.name: c for c in say.claims(say.block, post)}
    assert not any(c.holds for c in failed.values())
    text = say.block(post)
    assert "**not** a plain sum" in text and "42.1×" in text and "post-norm" in text
    assert "does **not** hand every one over" in text and "0.4 to 1" in text
    assert "do **not** raise it" in text and "**0.50**" in text and "**0.22**" in text
    rms = {**BLOCK, "ln": {"kind": "rmsnorm", "mean": 0.0, "spread": (0.999, 1.0), "given": (0.5, 3.0)}}
    (c,) = [c for c in say.claims(say.block, rms) if c.name == "layer norm: mean 0, spread 1"]
    assert c.holds and "root mean square 1" in c.text and "not centred" in c.text
    rms["ln"]["spread"] = (0.2, 1.0)
    (c,) = [c for c in say.claims(say.block, rms) if c.name == "layer norm: mean 0, spread 1"]
    assert not c.holds and "does **not** hand every one over at root mean square 1" in c.text


NEXT = {"query": (".", 23), "vocab": 64, "logits": (8.87, -6.5), "top": "the",
        "runners": [("some", 0.084), ("a", 0.079)], "temperature": 1.0, "top_k": 0,
        "p_top": (0.84, 0.84), "kept": 64, "choices": (1.76, 1.76)}


def test_the_next_token_claims_both_branches() -> None:
    assert say.claims(say.next_token, NEXT) == []  # temperature 1, no top-k: nothing to check
    assert "'the' **0.84**" in say.next_token(NEXT) and "64 tokens can be drawn" in say.next_token(NEXT)
    sharp = {**NEXT, "temperature": 0.5, "p_top": (0.84, 0.98), "top_k": 10, "kept": 10}
    (t, k) = say.claims(say.next_token, sharp)
    assert t.holds and k.holds and "**0.98** — sharper" in t.text and "(10 left with a chance)" in k.text
    flat = {**NEXT, "temperature": 2.0, "p_top": (0.84, 0.56)}
    (t,) = say.claims(say.next_token, flat)
    assert t.holds and "flatter" in t.text
    certain = {**NEXT, "temperature": 0.5, "p_top": (1.0, 1.0), "top_k": 3, "kept": 4}
    (t, k) = say.claims(say.next_token, certain)
    assert not t.holds and "**not** sharper" in t.text and "already certain" in t.text
    assert not k.holds and "4 keep a chance" in k.text
    greedy = {**NEXT, "temperature": 0.0, "p_top": (0.84, 1.0), "kept": 1}
    (g,) = say.claims(say.next_token, greedy)
    assert g.holds and "always chosen" in g.text and "1 token can be drawn" in say.next_token(greedy)
    assert not say.claims(say.next_token, {**greedy, "p_top": (0.84, 0.5)})[0].holds


def _pair(pos, writes, src, src_pos, argmax, weight):
    return {"pos": pos, "writes": writes, "src": src, "src_pos": src_pos, "argmax": argmax,
            "argmax_tok": {1: "boy", 4: "yellow", 5: "boy", 6: "."}[argmax], "weight": weight}


def test_the_cross_attention_claims_both_branches() -> None:
    n = {"text": "the boy follows the yellow boy .", "target": "le garçon suit le garçon jaune .",
         "head": "layer 0 · head 1", "src_len": 7, "crossing": [1, 2],
         "pairs": [_pair(1, "garçon", "boy", 1, 1, 0.98), _pair(4, "garçon", "boy", 5, 5, 0.96),
                   _pair(5, "jaune", "yellow", 4, 4, 0.84)]}
    a, b = say.claims(say.cross, n)
    assert a.holds and b.holds and "every one of the 3" in a.text and "goes back to 'yellow' (pos 4)" in b.text
    n["pairs"][2] = _pair(5, "jaune", "yellow", 4, 6, 0.07)
    a, b = say.claims(say.cross, n)
    assert not a.holds and "only **2 of 3**" in a.text and "looks most at '.', 0.07 on 'yellow'" in a.text
    assert not b.holds and "does **not** follow it" in b.text
    assert len(say.claims(say.cross, {**n, "crossing": None})) == 1
    assert say.claims(say.cross, {**n, "pairs": []}) == []


MLM = {"text": "the children near the horses wait .", "hidden": "near", "pos": 3, "words": 7,
       "guesses": [("near", 0.30), ("beside", 0.26), ("with", 0.25), ("a", 0.01), ("the", 0.01)],
       "p_hidden": 0.30, "rank": 1, "before": 0.76, "after": 0.98, "before_mean": 0.2, "after_mean": 0.53,
       "causal": False}


def test_the_masked_word_claims_both_branches() -> None:
    a, b = say.claims(say.mlm, MLM)
    assert a.holds and b.holds and "top guess is 'near' (**0.30**)" in a.text and "**0.76**" in b.text
    text = say.mlm(MLM)
    assert "within 0.05 of each other" in text
    missed = {**MLM, "guesses": [("beside", 0.6), ("near", 0.2), ("with", 0.1)], "rank": 2, "p_hidden": 0.2,
              "before": 0.0998, "causal": True}
    a, b = say.claims(say.mlm, missed)
    assert not a.holds and "**not** its first choice: number 2" in a.text and "fits the blank as well" in a.text
    assert not b.holds and "0.100 of the [MASK]'s attention" in b.text and "a causal mask hides" in b.text
    assert "many words fit" not in say.mlm(missed)
    end = {**MLM, "pos": 1, "before": None, "before_mean": None}
    assert len(say.claims(say.mlm, end)) == 1 and "hide a middle word" in say.mlm(end)


def test_the_taxonomy_claims_both_branches() -> None:
    full = {"family": "encoder-only", "expected": "full", "allowed": 49, "pairs": 49, "ahead": 21, "behind": 28,
            "ahead_pairs": 21, "behind_pairs": 28}
    causal = {**full, "family": "decoder-only", "expected": "causal", "allowed": 28, "ahead": 0}
    cross = {**full, "family": "encoder–decoder"}
    n = {"n": 7, "rows": {"mlm · encoder": full, "lm · decoder": causal, "translate · cross": cross}}
    cs = say.claims(say.families, n)
    assert [c.name for c in cs] == ["mlm · encoder: full", "lm · decoder: causal", "translate · cross: full"]
    assert all(c.holds for c in cs) and "what separates the families" in say.families(n)
    assert "every decoder position sees every source word" in cs[2].text and "0 of 21 ahead" in cs[1].text
    bad = {"n": 7, "rows": {"mlm · encoder": {**full, "allowed": 28, "ahead": 0},
                            "lm · decoder": {**causal, "ahead": 3, "allowed": 31}}}
    cs = say.claims(say.families, bad)
    assert not any(c.holds for c in cs) and "28 of 49 have" in cs[0].text and "3 of 21" in cs[1].text
    assert "what separates" not in say.families(bad)


def test_the_context_claims_both_branches() -> None:
    n = {"word": "cat", "a": "the cat sees the dog .", "b": "the cat helps the children .", "pos": (2, 2),
         "rows": [("its own embedding", 1.0, 0.0), ("after block 0", 0.997, 0.085), ("after block 1", 0.996, 0.091)],
         "causal": False, "same_past": True, "model": "mlm", "past": "the cat"}
    a, b = say.claims(say.context, n)
    assert a.holds and b.holds and "**0.09**" in b.text and "cosine 0.996" in b.text
    assert "Both sentences start 'the cat'" in b.text and "reads both ways" in b.text
    dec = {**n, "causal": True, "model": "lm", "rows": [("its own embedding", 1.0, 0.0), ("after block 1", 1.0, 0.0)]}
    a, b = say.claims(say.context, dec)
    assert a.holds and not b.holds and "**the same**" in b.text and "lm is a decoder" in b.text
    moved = {**n, "pos": (3, 5), "same_past": False, "rows": [("its own embedding", 0.9, 0.3), ("after block 1", 0.98, 0.22)]}
    a, b = say.claims(say.context, moved)
    assert not a.holds and "**different** vectors" in a.text
    assert b.holds and "its different position" in b.text and "reads both ways" not in b.text


def test_the_kv_claims_both_branches() -> None:
    row = lambda m, kv, b, loss: {"model": m, "heads": 4, "kv_heads": kv, "bytes": b, "formula": 256 * kv,  # noqa: E731
                                  "positions": 24, "loss": loss, "windows": 64}
    n = {"rows": [row("lm", 4, 1024.0, 1.873), row("lm-gqa", 2, 512.0, 1.871), row("lm-mqa", 1, 256.0, 1.869)]}
    a, b = say.claims(say.kv, n)
    assert a.holds and b.holds and "**256** bytes per token (1 K/V head)" in a.text and "lm-gqa, is -0.002" in b.text
    bad = {"rows": [row("lm", 4, 1024.0, 1.8), row("lm-mqa", 1, 300.0, 2.0)]}
    a, b = say.claims(say.kv, bad)
    assert not a.holds and "**not** the formula's 1,024, 256" in a.text
    assert not b.holds and "**+0.200** nats worse" in b.text
    assert say.claims(say.kv, {"rows": [row("lm", 4, 1024.0, 1.8)]}) == [] and "1,024 bytes" in say.kv(
        {"rows": [row("lm", 4, 1024.0, 1.8)]})
