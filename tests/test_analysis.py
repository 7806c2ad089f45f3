"""Head scores on synthetic patterns whose answer is known, on a real (random) model, coref
antecedents, snapshots, the pronoun probe and RoPE geometry."""
import math

import numpy as np
import pytest
import torch

import tfviz
from tfviz.analysis import (COLUMNS, LABELS, SCORES, SOURCES, THRESHOLDS, antecedent_scores,
                            head_scores, induction_probe, label_head, pattern_scores,
                            pronoun_probe, rope_freqs, rope_score_by_offset, rope_score_grid,
                            score_model, scores_over_snapshots)
from tfviz.analysis.heads import ANTECEDENT_SCORES, RULES
from tfviz.tasks import collate, make_task
from tfviz.train import AttentionSnapshot

N = 17  # positions: [BOS] + 8 + 8


def rows_to_pattern(rows: np.ndarray) -> np.ndarray:
    """[q, k] (or [batch, q, k]) -> [layer=1, batch, head=1, q, k]."""
    rows = rows if rows.ndim == 3 else rows[None]
    return rows[None, :, None]


def uniform_causal(n=N) -> np.ndarray:
    a = np.tril(np.ones((n, n)))
    return a / a.sum(-1, keepdims=True)


def one_hot_rows(targets, n=N) -> np.ndarray:
    a = np.zeros((n, n))
    a[np.arange(n), targets] = 1.0
    return a


def repeated_tokens(half=8, seed=0):
    return induction_probe(60, half, batch=1, seed=seed)[0].numpy()


def row(df, layer=0, head=0):
    return df[(df.layer == layer) & (df["head"] == head)].iloc[0]


# ------------------------------------------------------------------------- synthetic patterns
def test_perfect_previous_token():
    p = rows_to_pattern(one_hot_rows(np.maximum(np.arange(N) - 1, 0)))
    r = row(head_scores(p, repeated_tokens()))
    assert r.prev_token == pytest.approx(1.0) and r.prev_token_top == pytest.approx(1.0)
    assert r.self_token == pytest.approx(0.0)  # query 0 (sees only itself) is not counted
    assert r.first_token == pytest.approx(1 / (N - 1))  # only query 1's previous token is 0
    assert r.induction == pytest.approx(0.0) and r.entropy == pytest.approx(0.0)
    assert r.label == "previous-token" and r.labels == "previous-token+local"


def test_perfect_induction_and_duplicate():
    half = 8
    tok = repeated_tokens(half)
    q = np.arange(N)
    # second-half query q holds r_{q-half}: earlier copy at q-half, the token after it at q-half+1
    ind = rows_to_pattern(one_hot_rows(np.where(q > half, q - half + 1, 0)))
    dup = rows_to_pattern(one_hot_rows(np.where(q > half, q - half, 0)))
    ri, rd = row(head_scores(ind, tok)), row(head_scores(dup, tok))
    assert ri.induction == pytest.approx(1.0) and ri.duplicate_token == pytest.approx(0.0)
    assert rd.duplicate_token == pytest.approx(1.0) and rd.induction == pytest.approx(0.0)
    assert ri.label == "induction" and rd.label == "duplicate-token"


def test_induction_equals_olsson_stripe_on_random_patterns():
    """On [BOS] r r (distinct r): mean weight on the offset -(half-1) stripe of the second half."""
    half = 8
    tok = induction_probe(60, half, batch=3, seed=1).numpy()
    rng = np.random.default_rng(0)
    s = rng.normal(size=(2, 3, 4, N, N)) * 3
    s[..., np.triu_indices(N, 1)[0], np.triu_indices(N, 1)[1]] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    q = np.arange(half + 1, 2 * half + 1)
    want = p[..., q, q - half + 1].mean(axis=(1, 3))  # [layer, head]
    got = pattern_scores(p, tok)
    np.testing.assert_allclose(got["induction"], want, atol=1e-12)
    np.testing.assert_allclose(got["duplicate_token"], p[..., q, q - half].mean(axis=(1, 3)),
                               atol=1e-12)
    np.testing.assert_allclose(got["prev_token"], p[..., np.arange(1, N), np.arange(N - 1)]
                               .mean(axis=(1, 3)), atol=1e-12)


def test_uniform_causal_is_diffuse():
    p = rows_to_pattern(uniform_causal())
    r = row(head_scores(p, repeated_tokens()))
    assert r.entropy_norm == pytest.approx(1.0)
    assert r.entropy == pytest.approx(np.mean(np.log(np.arange(2, N + 1))))
    assert r.label == "diffuse" and r.labels == "diffuse"


def test_sink():
    p = rows_to_pattern(one_hot_rows(np.zeros(N, dtype=int)))
    r = row(head_scores(p, repeated_tokens()))
    assert r.first_token == pytest.approx(1.0) and r.label == "sink"


def test_self_and_local():
    r = row(head_scores(rows_to_pattern(np.eye(N)), repeated_tokens()))
    assert r.self_token == pytest.approx(1.0) and r.label == "self"
    q = np.arange(N)
    two_back = rows_to_pattern(one_hot_rows(np.maximum(q - 2, 0)))
    r = row(head_scores(two_back, local_k=3))
    assert r.local == pytest.approx(1.0) and r.label == "local"
    assert row(head_scores(two_back, local_k=1)).local < 0.2


def test_mixed_when_nothing_dominates():
    a = np.zeros((N, N))
    q = np.arange(1, N)
    a[q, 0] += 0.45
    a[q, q - 1] += 0.45
    a[q, q] += 0.10
    a[0, 0] = 1.0
    r = row(head_scores(rows_to_pattern(a), repeated_tokens()))
    assert r.label == "mixed" and r.labels == "mixed"


def test_padding_queries_are_ignored():
    """Right padding: the pad queries' rows (here on key 0) must not count."""
    tok = np.stack([repeated_tokens(seed=0), repeated_tokens(seed=1)])
    tok[1, 10:] = 0  # [PAD]
    a = np.stack([one_hot_rows(np.maximum(np.arange(N) - 1, 0))] * 2)
    a[1, 10:] = 0.0
    a[1, 10:, 0] = 1.0
    p = rows_to_pattern(a)
    assert row(head_scores(p, tok)).prev_token == pytest.approx(1.0)
    assert row(head_scores(p, tok, pad_id=None)).prev_token < 0.9  # the check can fail
    mask = torch.from_numpy(tok == 0)
    assert row(head_scores(p, padding_mask=mask)).prev_token == pytest.approx(1.0)


def test_entropy_normalised_by_visible_keys_only():
    """Left padding: a real query may not see the pad keys, so uniform over the rest is 1."""
    n_pad = 4
    tok = repeated_tokens()
    tok = np.concatenate([np.zeros(n_pad, dtype=tok.dtype), tok])
    n = len(tok)
    vis = np.tril(np.ones((n, n)))
    vis[:, :n_pad] = 0
    a = vis / np.maximum(vis.sum(-1, keepdims=True), 1)
    a[:n_pad, :n_pad] = np.eye(n_pad)  # pad queries see themselves (as the model's mask)
    r = row(head_scores(rows_to_pattern(a), tok))
    assert r.entropy_norm == pytest.approx(1.0)
    r = row(head_scores(rows_to_pattern(a), tok, visible=np.tril(np.ones((n, n))), pad_id=None))
    assert r.entropy_norm < 0.99


def test_window_mask_sets_the_visible_keys():
    w = 3
    vis = np.tril(np.ones((N, N))) * np.triu(np.ones((N, N)), -w)
    p = rows_to_pattern(vis / vis.sum(-1, keepdims=True))
    assert row(head_scores(p, window=w)).entropy_norm == pytest.approx(1.0)
    assert row(head_scores(p)).entropy_norm < 0.9


def test_scores_without_tokens_are_nan_for_token_scores():
    r = row(head_scores(rows_to_pattern(uniform_causal())))
    assert math.isnan(r.induction) and math.isnan(r.duplicate_token)
    assert math.isnan(r.antecedent) and r.label == "diffuse"


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="layer, batch, head"):
        head_scores(np.zeros((N, N)))
    with pytest.raises(ValueError, match="tokens"):
        head_scores(rows_to_pattern(uniform_causal()), np.zeros(N + 1, dtype=int))


# ------------------------------------------------------------------------- labels
def test_thresholds_are_documented_and_overridable():
    assert set(THRESHOLDS) <= set(SCORES)
    assert set(SOURCES) >= {"induction", "prev_token_top", "first_token", "local", "antecedent"}
    assert set(RULES) | {"diffuse", "mixed"} == set(LABELS)
    s = {k: 0.0 for k in SCORES} | {"induction": 0.45, "entropy_norm": 0.5}
    assert label_head(s) == ("induction", ["induction"])
    assert label_head(s, {"induction": 0.5})[0] == "mixed"
    assert label_head(s | {"induction": math.nan})[0] == "mixed"  # NaN never fires


# ------------------------------------------------------------------------- a real model
@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=48, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2,
                            max_len=64, pos="rope")
    return tfviz.Transformer(cfg)


def test_induction_probe_layout():
    t = induction_probe(40, half=10, batch=5, seed=3)
    assert t.shape == (5, 21) and t.dtype == torch.long
    assert (t[:, 0] == 2).all() and torch.equal(t[:, 1:11], t[:, 11:])
    assert ((t[:, 1:] >= 7) & (t[:, 1:] < 40)).all()  # no special ids
    assert all(len(set(r[1:11].tolist())) == 10 for r in t)  # distinct within a half
    assert torch.equal(t, induction_probe(40, half=10, batch=5, seed=3))
    assert not torch.equal(t, induction_probe(40, half=10, batch=5, seed=4))
    u = induction_probe([9, 11], half=6, batch=2, bos_id=1)
    assert (u[:, 0] == 1).all() and set(u[:, 1:].unique().tolist()) <= {9, 11}
    with pytest.raises(ValueError):
        induction_probe([9, 11], half=6, distinct=True)


def test_real_model_scores(model):
    probe = induction_probe(model.config.vocab_size, half=12, batch=4)
    rec = tfviz.record(model, probe, names=lambda n: n.endswith("hook_pattern"))
    df = head_scores(rec, probe)
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == 2 * 4
    assert set(zip(df.layer, df["head"])) == {(l, h) for l in range(2) for h in range(4)}
    shares = [c for c in SCORES if c != "entropy" and c not in ANTECEDENT_SCORES]  # coref-only
    vals = df[shares].to_numpy()
    assert np.isfinite(vals).all() and (vals >= -1e-9).all() and (vals <= 1 + 1e-9).all()
    assert (df.entropy >= 0).all() and df.label.isin(list(LABELS)).all()
    # same numbers from the stacked tensor
    again = head_scores(rec.stack_layers("blocks.{l}.attn.hook_pattern"), probe)
    np.testing.assert_allclose(again[list(SCORES[:9])], df[list(SCORES[:9])])


def test_score_model(model):
    df = score_model(model, half=8, batch=4)
    assert list(df.columns) == list(COLUMNS) and len(df) == 8
    assert df.induction.notna().all() and df.antecedent.isna().all()
    assert "induction" in df.attrs["inputs"]["induction"]


def test_score_model_with_coref_task():
    task = make_task("coref", n_train=40, n_val=40, n_test=40)
    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=32, n_heads=2,
                            n_layers=1, max_len=64)
    df = score_model(tfviz.Transformer(cfg), task, n_examples=16)
    assert len(df) == 2 and df[list(SCORES)].notna().all().all()
    assert "coref" in df.attrs["inputs"]["antecedent"]
    assert "induction probe" in df.attrs["inputs"]["induction"]
    with pytest.raises(ValueError, match="laid out"):
        score_model(tfviz.Transformer(cfg), make_task("coref", arch="encoder", n_train=40,
                                                      n_val=40, n_test=40))


# ------------------------------------------------------------------------- coreference
@pytest.fixture(scope="module")
def coref():
    task = make_task("coref", n_train=60, n_val=60, n_test=60)
    examples = task.examples("validation")[:24]
    return task, examples, collate(examples, task.tokenizer.pad_id).tokens


def coref_pattern(examples, tokens, pick):
    """Uniform causal everywhere; at each query row, weight spread over ``pick(meta)``."""
    n = tokens.shape[1]
    a = np.stack([uniform_causal(n)] * len(examples))
    for b, ex in enumerate(examples):
        m = ex.meta
        a[b, m["query_index"]] = 0.0
        pos = pick(m)
        a[b, m["query_index"], pos] = 1.0 / len(pos)
    return rows_to_pattern(a)


def test_antecedent_on_the_referent(coref):
    _, examples, tokens = coref
    metas = [e.meta for e in examples]
    true = coref_pattern(examples, tokens, lambda m: m["candidate_mentions"][m["referent"]])
    r = row(head_scores(true, tokens, metas))
    assert r.antecedent == pytest.approx(1.0) and r.antecedent_other == pytest.approx(0.0)
    assert r.antecedent_max == 1.0 and r.antecedent_top == 1.0 and r.label == "antecedent"
    other = coref_pattern(examples, tokens, lambda m: m["candidate_mentions"][1 - m["referent"]])
    r = row(head_scores(other, tokens, metas))
    assert r.antecedent == pytest.approx(0.0) and r.antecedent_other == pytest.approx(1.0)
    assert r.antecedent_max == 0.0 and r.label != "antecedent"
    # always the first-named noun: right only when it is the referent
    first = coref_pattern(examples, tokens, lambda m: m["candidate_mentions"][0])
    s = antecedent_scores(first, metas)
    want = np.mean([m["referent"] == 0 for m in metas])
    assert s["antecedent"][0, 0] == pytest.approx(want) and 0 < want < 1


def test_antecedent_reads_the_query_row(coref):
    _, examples, tokens = coref
    metas = [e.meta for e in examples]
    p = coref_pattern(examples, tokens, lambda m: m["candidate_mentions"][m["referent"]])
    s = antecedent_scores(p, metas, query="pronoun_index")  # a different (uniform) row
    assert s["antecedent"][0, 0] < 0.5
    ambiguous = [dict(m, referent=None) for m in metas]
    assert np.isnan(antecedent_scores(p, ambiguous)["antecedent"]).all()


def test_pronoun_probe_on_the_mission_sentence():
    task = make_task("coref", n_train=40, n_val=40, n_test=40)
    ex = task.mission_sentences()[0]  # "the law ... but its application ..." -> law
    n, q = len(ex.tokens), ex.meta["query_index"]
    law, app = ex.meta["candidate_mentions"]
    a = np.stack([uniform_causal(n)] * 4)  # [head, q, k]
    a[0, q] = 0
    a[0, q, law] = 1.0
    a[1, q] = 0
    a[1, q, app] = 0.7
    a[1, q, 0] = 0.3
    a[3, q] = 0
    a[3, q, 0], a[3, q, app] = 0.95, 0.05  # 95% on [BOS]: no noun "wins" (was: 'application')
    df = pronoun_probe(a[None], q, {"law": law, "application": app})
    assert list(df.columns) == ["layer", "head", "law", "application", "elsewhere", "winner"]
    assert list(df.winner) == ["law", "application", "law", "elsewhere"]
    assert df.law[0] == pytest.approx(1.0) and df.application[1] == pytest.approx(0.7)
    assert df.elsewhere[1] == pytest.approx(0.3)
    assert df.law[2] == pytest.approx(1 / (q + 1))
    with pytest.raises(ValueError):
        pronoun_probe(a[None], q, {"head": law})


# ------------------------------------------------------------------------- snapshots
def test_scores_over_snapshots_track_specialisation():
    tok = repeated_tokens()
    prev = one_hot_rows(np.maximum(np.arange(N) - 1, 0))
    uni = uniform_causal()
    mix = [(1 - t) * uni + t * prev for t in (0.0, 0.5, 1.0)]
    snaps = [np.stack([np.stack([m, uni])]) for m in mix]  # [layer=1, head=2, q, k]
    df = scores_over_snapshots(snaps, steps=[0, 50, 100], tokens=tok)
    assert list(df.columns) == ["step"] + list(COLUMNS) and len(df) == 3 * 2
    h0 = df[df["head"] == 0].sort_values("step")
    assert list(h0.step) == [0, 50, 100] and (h0.layer == 0).all()
    assert h0.prev_token.is_monotonic_increasing and h0.prev_token.iloc[-1] == pytest.approx(1.0)
    assert list(h0.label) == ["diffuse", "previous-token", "previous-token"]
    assert (df[df["head"] == 1].label == "diffuse").all()
    # AttentionSnapshot objects: steps and token strings come from them
    strs = [f"t{t}" for t in tok]
    objs = [AttentionSnapshot(s, {"blocks.0.attn.hook_pattern": a[0].astype(np.float16)}, strs)
            for s, a in zip([0, 50, 100], snaps)]
    again = scores_over_snapshots(objs)
    assert list(again.step) == list(df.step)
    np.testing.assert_allclose(again.prev_token, df.prev_token, atol=2e-3)
    assert again.induction.notna().all()


def test_snapshots_of_a_coref_probe_have_antecedent(coref):
    _, examples, _ = coref
    ex = examples[0]
    tokens = torch.tensor(ex.tokens)[None]
    p = coref_pattern([ex], tokens, lambda m: m["candidate_mentions"][m["referent"]])
    snaps = [p[:, 0], rows_to_pattern(uniform_causal(len(ex.tokens)))[:, 0]]
    df = scores_over_snapshots(snaps, tokens=ex.tokens, meta=ex.meta)
    assert list(df.antecedent_max) == [1.0, 0.0] and df.label.iloc[0] == "antecedent"


# ------------------------------------------------------------------------- RoPE
@pytest.mark.parametrize("pairs", ["interleaved", "half"])
def test_rope_score_grid_is_toeplitz(pairs):
    torch.manual_seed(0)
    d, n = 16, 12
    q, k, f = torch.randn(d), torch.randn(d), rope_freqs(d)
    g = rope_score_grid(q, k, f, n, pairs)
    assert g.shape == (n, n)
    for off in range(-n + 1, n):
        diag = torch.diagonal(g, -off)  # entries with m - p = off
        torch.testing.assert_close(diag, diag[:1].expand_as(diag), atol=1e-10, rtol=0)
    by_off = rope_score_by_offset(q, k, f, torch.arange(n), pairs)
    torch.testing.assert_close(by_off, g[torch.arange(n), 0])
    assert g[0, 0] == pytest.approx(float(q.double() @ k.double()))
    assert not torch.allclose(g[0, 1], g[0, 0])  # position matters (off the diagonal)


def test_rope_freqs_match_the_model():
    cfg = tfviz.ModelConfig(vocab_size=20, d_model=32, n_heads=2, n_layers=1, pos="rope")
    tables = tfviz.positional_tables(tfviz.Transformer(cfg), 4)
    torch.testing.assert_close(rope_freqs(cfg.d_head).float(), tables["rope_freqs"])
