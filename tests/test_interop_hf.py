"""Hugging Face folders in, GPT-2 / bertviz out: tfviz computes what transformers computes.

For each family a small random model is built with ``transformers``, every parameter perturbed,
saved with ``save_pretrained`` next to a tokenizer.json whose special tokens are not at ids 0-6
(tests/hf_folders.py), opened with ``tfviz.from_pretrained`` and compared on inputs that contain
token id 0: logits within 1e-4, every layer's attention pattern within 1e-5 and every hidden
state within 1e-4 of transformers' own (eager attention, float32), greedy generation with the KV
cache equal to transformers' ``generate``, and the same token ids as ``tokenizers`` on the same
file. No network, no real weights; ``TFVIZ_TEST_HF_DIR`` adds a smoke test on a real folder.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import hf_folders  # noqa: E402
import tfviz  # noqa: E402
from tfviz.cli import main as cli  # noqa: E402
from tfviz.interop import ModelFolderError, from_pretrained, list_models, to_hf  # noqa: E402

FAMILIES = {"gpt2": "gpt2", "gpt2-untied": "gpt2", "bert": "bert", "bert-untied": "bert", "bert-base": "bert",
            "llama": "llama", "mistral": "llama", "qwen2": "llama"}
LOGITS_TOL, PATTERN_TOL, HIDDEN_TOL = 1e-4, 1e-5, 1e-4
MEASURED: dict[str, dict[str, float]] = {}  # kind -> max |difference|, printed at the end (-s)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """kind -> (folder, the transformers model it holds)."""
    root = tmp_path_factory.mktemp("hf")
    return {kind: (root / kind, hf_folders.build(kind, root / kind, seed=i))
            for i, kind in enumerate(FAMILIES)}


def _ids(ck, batch: int = 2, n: int = 13, seed: int = 0) -> torch.Tensor:
    """Random ids over the tokenizer's vocabulary, with token 0 at two places in every row."""
    ids = torch.randint(0, ck.tokenizer.vocab_size, (batch, n), generator=torch.Generator().manual_seed(seed))
    ids[:, 2] = 0
    ids[:, -3] = 0
    return ids


def _compare(ck, hf, ids, token_types=None) -> dict[str, float]:
    kw = {} if token_types is None else {"token_type_ids": token_types}
    with torch.no_grad():
        out = hf(ids, output_attentions=True, output_hidden_states=True, **kw)
    rec = tfviz.record(ck.model, ids, token_types=token_types)
    L = ck.config.n_layers
    assert len(out.attentions) == L and len(out.hidden_states) == L + 1
    diffs = {"pattern": max(float((rec[f"blocks.{l}.attn.hook_pattern"] - a).abs().max())
                            for l, a in enumerate(out.attentions))}
    # hidden_states[l] enters block l; the last one leaves the stack (after the final norm).
    ours = [rec[f"blocks.{l}.hook_resid_pre"] for l in range(L)]
    ours.append(rec["ln_final.hook_out"] if ck.config.norm == "pre" else rec[f"blocks.{L - 1}.hook_resid_post"])
    diffs["hidden"] = max(float((a - b).abs().max()) for a, b in zip(ours, out.hidden_states))
    if hasattr(out, "logits"):
        diffs["logits"] = float((rec.output - out.logits).abs().max())
    assert diffs["pattern"] <= PATTERN_TOL, diffs
    assert diffs["hidden"] <= HIDDEN_TOL, diffs
    assert diffs.get("logits", 0.0) <= LOGITS_TOL, diffs
    return diffs


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_same_numbers_as_transformers(folders, kind):
    folder, hf = folders[kind]
    ck = from_pretrained(folder)
    assert isinstance(ck.model, tfviz.Transformer) and ck.meta["extra"]["imported"]["family"] == FAMILIES[kind]
    assert ck.config.pad_id is None  # token 0 is a real token: never masked
    ids = _ids(ck)
    MEASURED[kind] = _compare(ck, hf, ids)


def test_bert_token_types(folders):
    folder, hf = folders["bert"]
    ck = from_pretrained(folder)
    ids = _ids(ck)
    types = torch.zeros_like(ids)
    types[:, 7:] = 1  # sentence B
    MEASURED["bert, token types"] = _compare(ck, hf, ids, types)
    assert ck.config.n_token_types == 2 and ck.config.head == "mlm" and ck.config.embed_norm


def test_bert_untied_head_reads_the_decoders_own_bias(folders, tmp_path):
    """Untied, transformers' logits use cls.predictions.decoder.weight and .bias (its
    cls.predictions.bias is never read); tied, decoder.bias *is* cls.predictions.bias."""
    folder, hf = folders["bert-untied"]
    p = hf.cls.predictions
    assert p.decoder.bias is not p.bias and float((p.decoder.bias - p.bias).detach().abs().max()) > 0.05
    ck = from_pretrained(folder)
    assert not ck.config.tie_embeddings and ck.config.head == "mlm"
    torch.testing.assert_close(ck.model.unembed.bias, p.decoder.bias.detach(), atol=0, rtol=0)
    # the unused-weights check sees the untied head's tensors: one missing is refused, not skipped
    from safetensors.torch import load_file, save_file
    bad = _copy(folders, "bert-untied", tmp_path / "no-decoder-bias")
    tensors = load_file(bad / "model.safetensors")
    del tensors["cls.predictions.decoder.bias"]
    save_file(tensors, bad / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFolderError, match="no cls.predictions.decoder.weight and .bias"):
        from_pretrained(bad)
    # the same file with a config saying tied: transformers 5 ties only what the file holds equal,
    # so here it keeps the decoder's own weight and bias; tfviz reads the same (and notes it)
    import transformers
    said_tied = _copy(folders, "bert-untied", tmp_path / "says-tied")
    _edit_config(said_tied, tie_word_embeddings=True)
    ref = transformers.BertForMaskedLM.from_pretrained(str(said_tied), attn_implementation="eager").eval()
    ck = from_pretrained(said_tied)
    assert not ck.config.tie_embeddings and "keeps them apart" in ck.meta["extra"]["imported"]["notes"][0]
    MEASURED["bert, config says tied"] = _compare(ck, ref, _ids(ck))


def test_gpt2_config_saying_tied_with_a_different_lm_head(folders, tmp_path):
    """transformers 5 keeps an lm_head that differs from the embeddings even when config.json
    says tied; tfviz does the same instead of silently using the embeddings."""
    import transformers
    folder = _copy(folders, "gpt2-untied", tmp_path / "says-tied")
    _edit_config(folder, tie_word_embeddings=True)
    ref = transformers.GPT2LMHeadModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    ck = from_pretrained(folder)
    assert not ck.config.tie_embeddings
    MEASURED["gpt2, config says tied"] = _compare(ck, ref, _ids(ck))


def test_llama_family_options(folders):
    cfgs = {k: from_pretrained(folders[k][0]).config for k in ("llama", "mistral", "qwen2")}
    for cfg in cfgs.values():
        assert (cfg.n_heads, cfg.n_kv_heads) == (4, 2)  # grouped-query attention
        assert (cfg.pos, cfg.rope_pairs, cfg.rope_base) == ("rope", "half", 500.0)
        assert (cfg.normalization, cfg.activation, cfg.tie_embeddings) == ("rmsnorm", "swiglu", False)
    assert not cfgs["llama"].bias and cfgs["qwen2"].bias
    assert cfgs["qwen2"].vocab_size > from_pretrained(folders["qwen2"][0]).tokenizer.vocab_size


def test_mistral_sliding_window(tmp_path):
    hf = hf_folders.build("mistral", tmp_path / "m", seed=5, sliding_window=4)
    ck = from_pretrained(tmp_path / "m")
    assert ck.config.window == 3  # HF: i - j < 4; tfviz: i - j <= 3
    MEASURED["mistral, window 4"] = _compare(ck, hf, _ids(ck, n=14))


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_greedy_generation_with_the_kv_cache_matches_generate(folders, kind):
    folder, hf = folders[kind]
    ck = from_pretrained(folder)
    prompt = _ids(ck, batch=1, n=6, seed=3)
    want = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=10,
                       do_sample=False, eos_token_id=None, pad_token_id=0)
    got = ck.model.generate(prompt, 10)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_left_padded_batch_generation_matches_generate(folders, kind):
    """A left-padded batch with its mask: every row equals transformers' generate on the same
    padded batch (attention_mask = not padding) and that row generated alone; without the mask an
    imported model (pad_id=None) reads its pads and does not."""
    folder, hf = folders[kind]
    ck = from_pretrained(folder)
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(1, ck.config.vocab_size - 3, (n,), generator=g).tolist() for n in (7, 3, 5)]
    n = max(map(len, prompts))
    ids = torch.tensor([[0] * (n - len(p)) + p for p in prompts])
    mask = ids.new_tensor([[True] * (n - len(p)) + [False] * len(p) for p in prompts], dtype=torch.bool)
    gen = dict(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    want = hf.generate(ids, attention_mask=(~mask).long(), **gen)
    got = ck.model.generate(ids, 10, padding_mask=mask)
    assert got.tolist() == want.tolist()
    for row, p in zip(got, prompts):
        alone = hf.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long), **gen)
        assert row[n - len(p):].tolist() == alone[0].tolist()
    assert ck.model.generate(ids, 10).tolist() != want.tolist()


@pytest.mark.parametrize("kind", ["gpt2", "bert", "llama"])
def test_tokenizer_gives_the_files_ids(folders, kind):
    from tokenizers import Tokenizer as HFTokenizer
    folder, _ = folders[kind]
    tok = from_pretrained(folder).tokenizer
    ref = HFTokenizer.from_file(str(folder / "tokenizer.json"))
    assert max(tok.special_ids) > 6  # the specials are where the file puts them
    literal = tok.display(tok.special_ids[-1])
    for text in ["the cat sat on the mat!", "Hello, world. 123", f"a {literal} b", "", "zebra 日本"]:
        assert tok.encode(text).ids == ref.encode(text, add_special_tokens=False).ids, text
        assert tok.encode(text, template=True).ids == ref.encode(text).ids, text
    enc = tok.encode(f"the {literal} cat")
    assert tok.special_ids[-1] in enc.ids  # a special's literal in text is that special token
    assert tok.decode(enc.ids) == ref.decode(enc.ids, skip_special_tokens=False)


def test_special_ids_and_display_by_family(folders):
    gpt2 = from_pretrained(folders["gpt2"][0]).tokenizer
    eot = gpt2.vocab_size - 1
    assert (gpt2.bos_id, gpt2.eos_id, gpt2.unk_id, gpt2.pad_id, gpt2.mask_id) == (eot, eot, eot, None, None)
    assert gpt2.kind == "bpe"
    spaced = [i for i in range(gpt2.vocab_size) if gpt2.id_to_token(i).startswith("\u0120")]  # 'Ġ...'
    assert spaced and all(gpt2.display(i) == " " + gpt2.id_to_token(i)[1:] for i in spaced)
    bert = from_pretrained(folders["bert"][0]).tokenizer
    assert bert.kind == "wordpiece" and bert.pad_id == 0 and bert.mask_id > 6 and bert.bos_id is None
    assert bert.encode("the cat", template=True).tokens == ["[CLS]", "the", "cat", "[SEP]"]
    llama = from_pretrained(folders["llama"][0]).tokenizer
    assert llama.kind == "sentencepiece" and llama.bos_id > 6 and llama.pad_id is None
    assert llama.encode("the cat").tokens[0].startswith(" ")  # '▁' shown as a space


def test_special_tokens_found_without_tokenizer_config(folders, tmp_path):
    """Older BERT folders name their specials nowhere but tokenizer.json: recognised there."""
    folder = _copy(folders, "bert", tmp_path / "old-bert")
    (folder / "tokenizer_config.json").unlink()
    tok = from_pretrained(folder).tokenizer
    want = from_pretrained(folders["bert"][0]).tokenizer
    assert tok.specials == want.specials and len(tok.specials) == 5
    (folder / "special_tokens_map.json").write_text(json.dumps({"mask_token": "[SEP]"}))
    assert from_pretrained(folder).tokenizer.mask_id == want.sep_id  # the file's word wins


def test_sharded_folder_and_progress(folders, tmp_path):
    _, hf = folders["gpt2"]
    hf.save_pretrained(str(tmp_path / "sharded"), max_shard_size="40KB")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folders["gpt2"][0] / f, tmp_path / "sharded" / f)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    assert len(list((tmp_path / "sharded").glob("model-*.safetensors"))) > 1
    seen = []
    ck = from_pretrained(tmp_path / "sharded", progress=lambda f, msg: seen.append((f, msg)))
    fractions = [f for f, _ in seen]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0 and fractions == sorted(fractions)
    _compare(ck, hf, _ids(ck))


def test_hf_cache_layout(folders, tmp_path):
    """models--org--name/snapshots/<rev>/ with files linked into blobs/, refs/main naming the rev."""
    src, hf = folders["llama"]
    repo = tmp_path / "hub" / "models--someone--tiny-llama"
    (repo / "blobs").mkdir(parents=True)
    for rev in ("0000old", "abc123"):
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True)
        for f in src.iterdir():
            blob = repo / "blobs" / f"{rev}-{f.name}"
            shutil.copy(f, blob)
            (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    ck = from_pretrained(repo)
    assert ck.path == repo / "snapshots" / "abc123"
    _compare(ck, hf, _ids(ck))
    found = list_models(models_dir=tmp_path / "none", cache_dir=tmp_path / "hub")
    assert [(m.name, m.source, m.family, m.ok) for m in found] == [("someone/tiny-llama", "hf-cache", "llama", True)]


# ------------------------------------------------------------------------------------ refusals
def _copy(folders, kind: str, dest: Path) -> Path:
    shutil.copytree(folders[kind][0], dest)
    return dest


def _edit_config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("kind, changes, match", [
    ("gpt2", dict(model_type="t5"), r"model_type 't5' is not supported; tfviz opens GPT-2 \(gpt2\); BERT"),
    ("llama", dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}),
     "RoPE scaling 'llama3' is not supported"),
    ("llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0}), "RoPE scaling 'linear'"),
    ("llama", dict(hidden_act="gelu"), "hidden_act='gelu' is not supported"),
    ("llama", dict(head_dim=8), "head_dim=8"),
    ("qwen2", dict(use_sliding_window=True, sliding_window=4,
                   layer_types=["full_attention", "sliding_attention"]), "sliding window on some layers"),
    ("gpt2", dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx=True"),
    ("gpt2", dict(activation_function="swish"), "activation 'swish' is not supported"),
    ("bert", dict(position_embedding_type="relative_key"), "position_embedding_type='relative_key'"),
    ("bert", dict(num_attention_heads=5), "d_model=64 is not divisible by n_heads=5"),
])
def test_unsupported_options_are_refused_by_name(folders, tmp_path, kind, changes, match):
    folder = _copy(folders, kind, tmp_path / kind)
    _edit_config(folder, **changes)
    with pytest.raises(ModelFolderError, match=match):
        from_pretrained(folder)
    info = tfviz.interop.inspect(folder)
    assert not info.ok and info.reason


def test_pickle_only_folder_is_refused_and_never_unpickled(folders, tmp_path, monkeypatch):
    folder = _copy(folders, "gpt2", tmp_path / "pickled")
    (folder / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")

    def boom(*a, **k):
        raise AssertionError("something tried to unpickle")
    monkeypatch.setattr(torch, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "load", boom)
    with pytest.raises(ModelFolderError, match=r"only in pytorch_model.bin, a PyTorch pickle.*never opens"):
        from_pretrained(folder)
    # a pickle renamed to model.safetensors is found out by its header, not unpickled
    (folder / "pytorch_model.bin").rename(folder / "model.safetensors")
    with pytest.raises(ModelFolderError, match="not a safetensors file"):
        from_pretrained(folder)
    assert not tfviz.interop.inspect(tmp_path / "nothing-here").ok


def test_other_refusals(folders, tmp_path):
    with pytest.raises(ModelFolderError, match="no config.json here"):
        from_pretrained(tmp_path)
    with pytest.raises(ModelFolderError, match="over the 0 MB limit for local models"):
        from_pretrained(folders["gpt2"][0], max_bytes=1000)
    folder = _copy(folders, "gpt2", tmp_path / "extra")
    from safetensors.torch import load_file, save_file
    tensors = load_file(folder / "model.safetensors")
    tensors["transformer.h.0.attn.rel_bias"] = torch.zeros(3)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFolderError, match=r"weight\(s\) that the GPT-2 mapping does not use "
                                               r"\(transformer.h.0.attn.rel_bias\)"):
        from_pretrained(folder)
    folder = _copy(folders, "gpt2", tmp_path / "wrong-shape")
    _edit_config(folder, n_inner=100)
    with pytest.raises(ModelFolderError, match="the weights do not fit config.json"):
        from_pretrained(folder)


def test_list_models(folders, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    _copy(folders, "gpt2", models / "gpt2-tiny")
    _copy(folders, "bert", models / "bert-tiny")
    (models / "notes").mkdir()
    bad = _copy(folders, "llama", models / "scaled-llama")
    _edit_config(bad, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    found = {m.name: m for m in list_models(models_dir=models, cache_dir=tmp_path / "no-cache")}
    assert set(found) == {"gpt2-tiny", "bert-tiny", "notes", "scaled-llama"}
    assert found["gpt2-tiny"].ok and found["gpt2-tiny"].family == "gpt2" and found["gpt2-tiny"].nbytes > 0
    assert found["bert-tiny"].ok and found["bert-tiny"].family == "bert"
    assert not found["notes"].ok and "no config.json" in found["notes"].reason
    assert not found["scaled-llama"].ok and "RoPE scaling 'yarn'" in found["scaled-llama"].reason


# ------------------------------------------------------------------------------------ CLI
def test_cli_import_writes_a_tfviz_checkpoint(folders, tmp_path, capsys):
    folder, hf = folders["llama"]
    assert cli(["import", str(folder), "--out", str(tmp_path / "tiny-llama")]) == 0
    assert "tiny-llama.safetensors" in capsys.readouterr().out
    ck = tfviz.load_checkpoint(tmp_path / "tiny-llama")
    assert ck.meta["extra"]["imported"]["family"] == "llama"
    _compare(ck, hf, _ids(ck))
    assert cli(["info", str(tmp_path / "tiny-llama")]) == 0
    out = capsys.readouterr().out
    assert "decoder, 2 layers, 4 heads (2 kv)" in out and "imported" in out
    assert cli(["import", str(tmp_path), "--out", str(tmp_path / "x")]) == 1
    assert "no config.json here" in capsys.readouterr().err


def test_local_size_limit_from_the_environment_and_the_cli(folders, tmp_path, monkeypatch, capsys):
    """$TFVIZ_LOCAL_MODEL_MAX_MB bounds from_pretrained, the picker's listing and the CLI;
    ``import --max-mb`` overrides it for one import. The size is checked before any tensor is read."""
    from safetensors.torch import load_file, save_file
    folder = _copy(folders, "gpt2", tmp_path / "big")
    tensors = load_file(folder / "model.safetensors")
    tensors["padding"] = torch.zeros(300_000)  # 1.2 MB more, and a tensor the mapping does not use
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    # without a limit in the way, the unused tensor is what refuses it: the size check passed
    with pytest.raises(ModelFolderError, match=r"does not use \(padding\)"):
        from_pretrained(folder)
    monkeypatch.setenv("TFVIZ_LOCAL_MODEL_MAX_MB", "1")
    assert tfviz.interop.local_max_bytes() == 2**20
    with pytest.raises(ModelFolderError, match=r"the weights are \d MB, over the 1 MB limit for local models"
                                               ".*set TFVIZ_LOCAL_MODEL_MAX_MB"):
        from_pretrained(folder)
    info = tfviz.interop.inspect(folder)
    assert not info.ok and "over the 1 MB limit for local models (TFVIZ_LOCAL_MODEL_MAX_MB)" in info.reason
    assert cli(["import", str(folder), "--out", str(tmp_path / "big-ck"), "--quiet"]) == 1
    assert "over the 1 MB limit for local models" in capsys.readouterr().err
    assert not (tmp_path / "big-ck.safetensors").exists()
    # --max-mb: one import's own limit, either way
    small = folders["gpt2"][0]
    assert cli(["import", str(small), "--out", str(tmp_path / "a"), "--quiet", "--max-mb", "0.1"]) == 1
    assert "over the 0 MB limit for local models" in capsys.readouterr().err
    monkeypatch.setenv("TFVIZ_LOCAL_MODEL_MAX_MB", "lots")
    with pytest.raises(ModelFolderError, match="TFVIZ_LOCAL_MODEL_MAX_MB='lots' must be a number"):
        from_pretrained(small)
    assert cli(["import", str(small), "--out", str(tmp_path / "b"), "--quiet", "--max-mb", "5"]) == 0
    assert tfviz.load_checkpoint(tmp_path / "b").meta["extra"]["imported"]["family"] == "gpt2"


# ------------------------------------------------------------------------------------ out
def _tiny(seed: int, **kw) -> tfviz.Transformer:
    """A small random tfviz model (GPT-2-shaped unless kw say otherwise), every parameter perturbed."""
    torch.manual_seed(seed)
    cfg = tfviz.ModelConfig(**{**dict(vocab_size=97, d_model=32, n_heads=4, n_layers=2, max_len=24,
                                      pad_id=None), **kw})
    model = tfviz.Transformer(cfg).eval()
    hf_folders.perturb(model, seed, 0.1)
    return model


LLAMA_SHAPED = dict(pos="rope", normalization="rmsnorm", activation="swiglu", bias=False)
BERT_SHAPED = dict(arch="encoder", norm="post", embed_norm=True, head="mlm")
EXPORTS = {  # name -> (tfviz options, the transformers class it becomes)
    "gpt2 tied": (dict(activation="gelu_new", tie_embeddings=True), "GPT2LMHeadModel"),
    "gpt2 untied": (dict(activation="gelu", tie_embeddings=False, layer_norm_eps=1e-6), "GPT2LMHeadModel"),
    "llama gqa interleaved": (dict(LLAMA_SHAPED, n_kv_heads=2), "LlamaForCausalLM"),
    "llama half tied": (dict(LLAMA_SHAPED, rope_pairs="half", tie_embeddings=True, rope_base=500.0,
                             layer_norm_eps=1e-6), "LlamaForCausalLM"),
    "llama mqa biases": (dict(LLAMA_SHAPED, n_kv_heads=1, bias=True), "LlamaForCausalLM"),
    "bert token types": (dict(BERT_SHAPED, n_token_types=2, tie_embeddings=True, layer_norm_eps=1e-12), "BertForMaskedLM"),
    "bert no types untied": (dict(BERT_SHAPED, activation="gelu_new"), "BertForMaskedLM"),
}


@pytest.mark.parametrize("name", list(EXPORTS))
def test_to_hf_round_trip(tmp_path, name):
    """tfviz -> to_hf -> save_pretrained -> transformers' from_pretrained: the same logits; ->
    tfviz.from_pretrained: the same logits again, and the same weights bit for bit (RoPE with
    interleaved pairs comes back half-split: q and k rows permuted, the same function)."""
    import transformers
    kw, cls = EXPORTS[name]
    model = _tiny(7, **kw)
    hf = to_hf(model)
    assert type(hf).__name__ == cls and not hf.training
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    ids[:, 4] = 0
    with torch.no_grad():
        want = model(ids)
        torch.testing.assert_close(hf(ids).logits, want, atol=1e-5, rtol=0)
    hf.save_pretrained(str(tmp_path / "out"))
    reloaded = getattr(transformers, cls).from_pretrained(str(tmp_path / "out")).eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, want, atol=1e-5, rtol=0)
    back = from_pretrained(tmp_path / "out")
    assert back.tokenizer is None and "no tokenizer.json" in back.meta["extra"]["imported"]["notes"][-1]
    cfg = back.config
    assert (cfg.arch, cfg.pos, cfg.normalization, cfg.activation, cfg.n_kv_heads, cfg.bias, cfg.tie_embeddings) == (
        model.config.arch, model.config.pos, model.config.normalization, model.config.activation,
        model.config.n_kv_heads, model.config.bias, model.config.tie_embeddings)
    with torch.no_grad():
        torch.testing.assert_close(back.model(ids), want, atol=1e-5, rtol=0)
    ours, theirs = model.state_dict(), back.model.state_dict()
    permuted = model.config.pos == "rope" and model.config.rope_pairs != "half"
    for key, value in ours.items():
        if permuted and "W_qkv" in key:
            continue
        assert torch.equal(theirs[key], value), key  # bit for bit
    if not model.config.n_token_types and model.config.arch == "encoder":  # one token type, zeros
        assert cfg.n_token_types == 1 and not theirs["token_type_embed.weight"].any()


def test_to_hf_names_what_no_family_can_express():
    model = _tiny(0, pos="alibi", normalization="rmsnorm", n_kv_heads=2, bias=False)
    with pytest.raises(ValueError, match=r"cannot be written as GPT-2: pos='alibi' \(GPT-2 has learned "
                                         r"positions\); normalization='rmsnorm'.*n_kv_heads=2.*bias=False"
                                         r".* — nor as BERT: arch='decoder'.*— nor as Llama-family: "
                                         r"pos='alibi' \(Llama rotates q and k: pos='rope'\); activation='gelu'"):
        to_hf(model)
    with pytest.raises(ValueError, match="a sliding window"):
        to_hf(_tiny(0, **LLAMA_SHAPED, window=4))
    with pytest.raises(ValueError, match="embed_norm=False"):
        to_hf(_tiny(0, **dict(BERT_SHAPED, embed_norm=False)))


def test_to_hf_refuses_an_export_that_would_read_back_differently(monkeypatch):
    """The export checks itself: a config transformers would write differently, or logits that
    differ, are refused rather than written."""
    from tfviz.interop import families
    model = _tiny(3, **LLAMA_SHAPED)
    real = families.Llama.hf_config.__func__
    monkeypatch.setattr(families.Llama, "hf_config",
                        classmethod(lambda cls, cfg: {**real(cls, cfg), "rms_norm_eps": 1e-3}))
    with pytest.raises(ValueError, match=r"would read back as another model \(layer_norm_eps: 1e-05 -> 0.001\)"):
        to_hf(model)
    monkeypatch.undo()
    monkeypatch.setattr(families.Llama, "canonical", classmethod(lambda cls, cfg, state: (
        cfg.replace(rope_pairs="half"), state)))  # "forgets" to permute q and k
    with pytest.raises(ValueError, match="logits differ from tfviz's"):
        to_hf(model)


def test_cli_export_a_shipped_checkpoint_with_its_tokenizer(tmp_path, capsys):
    """python -m tfviz export: the shipped pos-learned model (GPT-2-shaped) becomes a folder
    transformers opens (model and tokenizer: same logits, same ids) and tfviz imports back."""
    import transformers
    path = Path(__file__).resolve().parents[1] / "checkpoints" / "pos-learned.safetensors"
    ck = tfviz.load_checkpoint(path)
    assert cli(["export", str(path), "--out", str(tmp_path / "out")]) == 0
    assert "exported" in capsys.readouterr().out
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    text = "the cat sat on the mat"
    ids = ck.tokenizer.encode(text).ids
    assert tok(text, add_special_tokens=False)["input_ids"] == ids
    x = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(hf(x).logits, ck.model.eval()(x), atol=1e-4, rtol=1e-5)
    back = from_pretrained(tmp_path / "out")
    assert back.tokenizer.encode(text).ids == ids and back.tokenizer.pad_id == ck.tokenizer.pad_id
    with torch.no_grad():
        assert torch.equal(back.model(x), ck.model(x))
    assert cli(["export", str(path), "--out", str(tmp_path / "out")]) == 1  # never overwrites
    assert "already exists" in capsys.readouterr().err
    assert cli(["export", str(path.with_name("pos-rope.safetensors")), "--out", str(tmp_path / "rope")]) == 1
    assert "cannot be written as GPT-2: pos='rope'" in capsys.readouterr().err


def _bertviz_format_attention(attention):
    """bertviz.util.format_attention (1.4.1): each layer [1, head, q, k] squeezed and stacked."""
    assert all(len(a.shape) == 4 for a in attention)
    return torch.stack([a.squeeze(0) for a in attention])


def test_to_bertviz_single_stack():
    model = _tiny(1)
    ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(2))
    rec = tfviz.record(model, ids)
    out = rec.to_bertviz([f"t{i}" for i in range(9)])
    assert set(out) == {"attention", "tokens"} and len(out["attention"]) == 2
    stacked = _bertviz_format_attention(out["attention"])  # what head_view / model_view do with it
    assert stacked.shape == (2, 4, 9, 9) and stacked.dtype == torch.float32
    torch.testing.assert_close(stacked[1], rec["blocks.1.attn.hook_pattern"][0])
    assert len(out["tokens"]) == stacked.shape[-1]  # bertviz checks positions against tokens
    assert rec.to_bertviz()["tokens"] == [str(i) for i in range(9)]
    with pytest.raises(ValueError, match="one sequence: record a batch of 1, not 2"):
        tfviz.record(model, ids.repeat(2, 1)).to_bertviz()
    with pytest.raises(ValueError, match="needs every layer's self-attention pattern"):
        tfviz.record(model, ids, names=["blocks.0.hook_resid_post"]).to_bertviz()
    with pytest.raises(ValueError, match="3 tokens for 9 positions"):
        rec.to_bertviz(["a", "b", "c"])


def test_to_bertviz_encoder_decoder():
    torch.manual_seed(0)
    model = tfviz.Transformer(tfviz.ModelConfig(arch="encoder-decoder", vocab_size=40, d_model=32, n_heads=4,
                                                n_layers=2, max_len=16)).eval()
    src, tgt = torch.randint(1, 40, (1, 7)), torch.randint(1, 40, (1, 5))
    out = tfviz.record(model, src, tgt).to_bertviz(list("abcdefg"), decoder_tokens=list("vwxyz"))
    assert set(out) == {"encoder_attention", "decoder_attention", "cross_attention", "encoder_tokens",
                        "decoder_tokens"}
    assert _bertviz_format_attention(out["encoder_attention"]).shape == (2, 4, 7, 7)
    assert _bertviz_format_attention(out["decoder_attention"]).shape == (2, 4, 5, 5)
    assert _bertviz_format_attention(out["cross_attention"]).shape == (2, 4, 5, 7)  # [q: decoder, k: encoder]


# ------------------------------------------------------------------------------------ a real folder
@pytest.mark.skipif(not os.environ.get("TFVIZ_TEST_HF_DIR"), reason="set TFVIZ_TEST_HF_DIR to a real model folder")
def test_a_real_folder_smoke():
    """Any real folder (e.g. GPT-2 small): it loads, runs, records and, if transformers can read
    the same folder offline, agrees with it."""
    import transformers
    folder = Path(os.environ["TFVIZ_TEST_HF_DIR"])
    ck = from_pretrained(folder)
    text = "The quick brown fox jumps over the lazy dog because"
    ids = torch.tensor([ck.tokenizer.encode(text, template=True).ids])
    rec = tfviz.record(ck.model, ids)
    assert torch.isfinite(rec.output).all()
    arch = (ck.meta["extra"]["imported"]["architectures"] or [""])[0]
    cls = getattr(transformers, arch, None)
    if cls is not None:
        ref = cls.from_pretrained(str(ck.path), local_files_only=True, attn_implementation="eager",
                                  dtype=torch.float32).eval()
        MEASURED[f"real {folder.name}"] = _compare(ck, ref, ids)


def teardown_module(module):
    if MEASURED:
        print("\nmax |tfviz - transformers| per family:")
        for kind, d in MEASURED.items():
            print(f"  {kind:22} " + "  ".join(f"{k} {v:.2g}" for k, v in d.items()))


def test_bench_hf_says_plainly_when_transformers_is_missing(monkeypatch, capsys):
    import sys

    from tfviz.bench import hf as bench_hf
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers -> ImportError
    assert bench_hf.main(["--reps", "1"]) == 2
    assert "transformers, which is not installed" in capsys.readouterr().out
    assert bench_hf.gpt2_small_config().d_model == 768
