"""Issue 42, item 1: the Lesson's claims checked on the shipped models' own numbers, each
recomputed here independently of the step's view (plain tensors from the checkpoint), and each
claim seen holding on one model or input and failing on another."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tfviz import lesson as say
from tfviz.paths import SHIPPED
from tfviz.train.checkpoint import load_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(autouse=True)
def real_zoo(monkeypatch):
    """The steps open on the shipped zoo (checkpoints/), whatever TFVIZ_ZOO_DIR says."""
    monkeypatch.delenv("TFVIZ_ZOO_DIR", raising=False)


def _model(name: str):
    from ui.models import zoo_model

    lm = zoo_model(name)
    if lm is None:
        pytest.skip(f"checkpoints/{name} is not shipped")
    return lm


def _cos(v: np.ndarray) -> np.ndarray:
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    return u @ u.T


@pytest.mark.parametrize(("name", "holds"), [("lm", False), ("mlm", True)])
def test_related_words_end_up_close_recomputed(name, holds) -> None:
    """The one-hot step: within-group against across-group mean cosine of the input embeddings,
    recomputed from ``embed.weight`` — on lm the claim fails (and the notice says so), on mlm
    it holds."""
    from ui import lesson_steps as ls

    lm = _model(name)
    words = ls.default_words(lm).split()
    n = ls.onehot_view(lm, {"words": " ".join(words)}).numbers
    ck = load_checkpoint(SHIPPED / f"{name}.safetensors")
    ids = [ck.tokenizer.token_to_id(w) for w in words]
    cos = _cos(ck.model.embed.weight.detach().double().numpy()[ids])
    group = {w: g for g, ws in ls.WORD_GROUPS.items() for w in ws.split()}
    within = [cos[a, b] for a in range(len(words)) for b in range(a + 1, len(words))
              if words[a] in group and words[b] in group and group[words[a]] == group[words[b]]]
    across = [cos[a, b] for a in range(len(words)) for b in range(a + 1, len(words))
              if words[a] in group and words[b] in group and group[words[a]] != group[words[b]]]
    assert n["within"] == pytest.approx(np.mean(within), abs=1e-5)
    assert n["across"] == pytest.approx(np.mean(across), abs=1e-5)
    (c,) = say.claims(say.onehot, n)
    assert c.holds is holds and bool(np.mean(within) > np.mean(across)) is holds
    assert ("do **not** end up closer" in say.onehot(n)) is not holds


def test_learned_positions_far_pairs_recomputed() -> None:
    """The learned-positions step: neighbour and far cosines recomputed from the model's position
    table (``stack.pos`` weights read from the checkpoint), the sign kept."""
    from ui import lesson_steps as ls

    lm = _model("pos-learned")
    n = ls.learned_view(lm, {}).numbers
    ck = load_checkpoint(SHIPPED / "pos-learned.safetensors")
    table = [p for name, p in ck.model.named_parameters() if "pos" in name and p.ndim == 2]
    assert len(table) == 1
    cos = _cos(table[0].detach().double().numpy()[:256])
    k = len(cos) // 2
    far = np.array([cos[i, j] for i in range(len(cos)) for j in range(i + k, len(cos))])
    assert n["far"] == pytest.approx(far.mean(), abs=1e-5) and n["far_negative"] == pytest.approx((far < 0).mean())
    assert n["neighbour"] == pytest.approx(np.mean(np.diagonal(cos, 1)), abs=1e-5)
    (c,) = say.claims(say.learned, n)
    assert c.holds and far.mean() < -say.UNRELATED  # pos-learned: far positions point apart
