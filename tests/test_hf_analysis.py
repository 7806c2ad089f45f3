"""The analyses pages run, on models imported from Hugging Face folders (no task, their own
tokenizer with specials away from ids 0-6, no pad id): each checked against an independent
recomputation on the same recording."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

import hf_folders  # noqa: E402
import tfviz  # noqa: E402
from tfviz.analysis import score_model  # noqa: E402
from tfviz.analysis.heads.scores import PATTERN, pattern_scores  # noqa: E402

TEXT = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    out = {}
    for kind in ("gpt2", "bert", "llama"):
        hf_folders.build(kind, root / kind)
        out[kind] = tfviz.from_pretrained(root / kind)
    return out


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_head_roles_without_a_task_score_the_users_text(models, kind):
    ck = models[kind]
    ids = ck.tokenizer.encode(TEXT, template=True).ids
    df = score_model(ck.model, None, tokenizer=ck.tokenizer, texts=[ids])
    rec = tfviz.record(ck.model, torch.tensor([ids]), names=[PATTERN.format(l=l) for l in range(ck.config.n_layers)])
    c = ck.config
    want = pattern_scores(rec.stack_layers(PATTERN), torch.tensor([ids]), causal=c.causal, window=c.window,
                          global_tokens=c.global_tokens, pad_id=c.pad_id)
    for name in ("prev_token", "first_token", "self_token", "local", "entropy"):
        got = df.pivot(index="layer", columns="head", values=name).to_numpy()
        np.testing.assert_allclose(got, want[name], atol=1e-6)
        assert df.attrs["inputs"][name] == f"your text ({len(ids)} tokens)"
    assert "induction probe" in df.attrs["inputs"]["induction"]


def test_induction_probe_starts_with_the_tokenizers_bos(models):
    ck = models["gpt2"]
    seen = []
    real = tfviz.record

    def spy(model, *inputs, **kw):
        seen.append(inputs[0])
        return real(model, *inputs, **kw)

    import tfviz.analysis.heads.probes as probes
    probes.record, old = spy, probes.record
    try:
        score_model(ck.model, None, tokenizer=ck.tokenizer)
    finally:
        probes.record = old
    probe = seen[0]
    assert (probe[:, 0] == ck.tokenizer.bos_id).all()
    assert not np.isin(probe[:, 1:].numpy(), ck.tokenizer.special_ids).any()
