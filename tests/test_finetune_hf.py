"""Fine-tuning an imported decoder on the user's text (issue 12 item 4): the lm task reads the text
with the model's own tokenizer (``tokenizer="given"``), and the job manager — the Train page's
path — starts from the folder's weights (``init=``) instead of a fresh model. A tiny random GPT-2
folder (tests/hf_folders.py) is fine-tuned a few steps; the result is a tfviz checkpoint whose
tokenizer is the folder's and whose task rebuilds with it, and it opens in the Attention explorer.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import hf_folders  # noqa: E402
import tfviz  # noqa: E402
from tfviz.tasks import make_task  # noqa: E402
from tfviz.tasks.base import Example, collate  # noqa: E402
from tfviz.runs import JobManager  # noqa: E402
from tfviz.train import TrainConfig  # noqa: E402
from tfviz.train.checkpoint import load_checkpoint  # noqa: E402

_WORDS = " ".join(hf_folders.CORPUS[:4]).split()
_RNG = random.Random(0)
TEXT = " ".join(_RNG.choice(_WORDS) for _ in range(300))  # words the tiny tokenizers know


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hf") / "gpt2"
    hf_folders.build("gpt2", folder)
    return folder


def lm_task(tokenizer, **kw):
    return make_task({"name": "lm", "tokenizer": "given", "text": TEXT, "block": 16, **kw},
                     given_tokenizer=tokenizer)


def test_lm_task_reads_the_text_with_the_given_tokenizer(gpt2):
    tok = tfviz.from_pretrained(gpt2).tokenizer
    task = lm_task(tok)
    assert task.tokenizer is tok
    ids = tok.encode_ids(TEXT)
    for ex in task.examples("train")[:20]:  # every window is a slice of the text's own ids
        start = ex.meta["start"]
        assert ex.tokens == ids[start:start + 16] and ex.targets == ids[start + 1:start + 17]
    assert task.spec()["tokenizer"] == "given" and "given_tokenizer" not in task.spec()


def test_given_tokenizer_is_checked(gpt2):
    tok = tfviz.from_pretrained(gpt2).tokenizer
    with pytest.raises(ValueError, match="none was given"):
        make_task({"name": "lm", "tokenizer": "given", "text": TEXT}).examples("train")
    with pytest.raises(ValueError, match="needs tokenizer='given'"):
        make_task({"name": "lm", "text": TEXT}, given_tokenizer=tok)
    with pytest.raises(ValueError, match="trains its own tokenizer"):
        make_task("copy", given_tokenizer=tok)
    with pytest.raises(ValueError, match="leave vocab_size"):
        make_task({"name": "lm", "tokenizer": "given", "vocab_size": 300}, given_tokenizer=tok)


def test_collate_without_pad_id():
    same = [Example([1, 2, 3], [2, 3, 4]), Example([5, 6, 7], [6, 7, 8])]
    assert collate(same, None).tokens.tolist() == [[1, 2, 3], [5, 6, 7]]
    with pytest.raises(ValueError, match="pad token"):
        collate([Example([1, 2], [2, 3]), Example([1], [2])], None)


def test_finetune_a_folder_through_the_job_manager(gpt2, tmp_path):
    base = tfviz.from_pretrained(gpt2)
    task = lm_task(base.tokenizer)
    out = tmp_path / "ft.safetensors"
    jobs = JobManager(torch_threads=1, open_folder=tfviz.from_pretrained)
    try:
        cfg = TrainConfig(steps=12, batch_size=8, lr=3e-3, warmup=1, log_every=1, eval_every=0,
                          eval_examples=16, snapshot_every=6, checkpoint_every=0, device="cpu")
        job = jobs.get(jobs.submit(None, task, cfg, init=gpt2, checkpoint=out, name="ft"))
        assert job.wait(300)
        snap = job.snapshot()
        assert snap.state == "done", snap.error
    finally:
        jobs.shutdown(timeout=30)
    losses = [h["train_loss"] for h in snap.history if h.get("train_loss") is not None]
    assert losses[-1] < losses[0]  # it learned something of the text
    ck = load_checkpoint(out)
    assert ck.config == base.config  # the imported architecture, unchanged (tanh GELU, no pad id)
    assert ck.tokenizer.fingerprint() == base.tokenizer.fingerprint()
    changed = [n for n, p in ck.model.state_dict().items()
               if not torch.equal(p, base.model.state_dict()[n])]
    assert changed  # the weights moved from the folder's
    task2 = ck.shared_task()  # rebuilt with the checkpoint's own tokenizer
    assert task2.examples("validation")[0].tokens == task.examples("validation")[0].tokens
    # the shared (imported) model was not trained in place: the job read the folder itself
    again = tfviz.from_pretrained(gpt2)
    assert all(torch.equal(p, again.model.state_dict()[n]) for n, p in base.model.state_dict().items())


def test_init_refuses_another_tokenizer(gpt2, tmp_path):
    other = tmp_path / "llama"
    hf_folders.build("llama", other)
    task = lm_task(tfviz.from_pretrained(other).tokenizer)
    jobs = JobManager(torch_threads=1, open_folder=tfviz.from_pretrained)
    try:
        job = jobs.get(jobs.submit(None, task, TrainConfig(steps=2, warmup=1, device="cpu"), init=gpt2))
        assert job.wait(120)
    finally:
        jobs.shutdown(timeout=30)
    assert job.snapshot().state == "failed"
    assert "tokenizer" in job.snapshot().error
    with pytest.raises(ValueError, match="not both"):
        JobManager(torch_threads=1, open_folder=tfviz.from_pretrained).submit(None, task, init=gpt2, resume=tmp_path / "x.safetensors")


def test_without_open_folder_a_folder_is_refused_plainly(gpt2):
    """Training sits below the interop layer: a JobManager reads a model folder only with the
    ``open_folder`` it is given (the app gives it ``from_pretrained``)."""
    task = lm_task(tfviz.from_pretrained(gpt2).tokenizer)
    jobs = JobManager(torch_threads=1)
    try:
        job = jobs.get(jobs.submit(None, task, TrainConfig(steps=2, warmup=1, device="cpu"), init=gpt2))
        assert job.wait(120)
    finally:
        jobs.shutdown(timeout=30)
    assert job.snapshot().state == "failed" and "open_folder" in job.snapshot().error
