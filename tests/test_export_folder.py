"""A tfviz model out as a Hugging Face folder, written without transformers (issue 30, item 4).

Every folder ``write_folder`` writes is checked against transformers here (a test dependency):
the tensors it holds are exactly those transformers' ``save_pretrained`` writes for that config
(names and shapes), transformers opens it with no missing, unexpected or mis-shaped weight, and
its logits equal tfviz's within float32 rounding — per family, attention-only models included
(whose MLPs of zeros add exactly 0, checked on transformers' own MLP outputs). The tokenizer files
give transformers the same ids and special tokens; tfviz_task.json brings the task back.
"""
from __future__ import annotations

import json
import sys

import pytest
import torch

import hf_folders
import tfviz
from tfviz.interop import export, from_pretrained, taskfile
from tfviz.interop.export import family_for, hf_tensors, write_checkpoint, write_folder

transformers = pytest.importorskip("transformers")
transformers.utils.logging.disable_progress_bar()
pytestmark = pytest.mark.usefixtures("one_thread")


def _tiny(seed: int, **kw) -> tfviz.Transformer:
    """A small random tfviz model, every parameter perturbed (ones and zeros hide mapping bugs)."""
    torch.manual_seed(seed)
    cfg = tfviz.ModelConfig(**{**dict(vocab_size=97, d_model=32, n_heads=4, n_layers=2, max_len=24), **kw})
    model = tfviz.Transformer(cfg).eval()
    hf_folders.perturb(model, seed, 0.1)
    return model


GPT2 = dict(arch="decoder", pos="learned")
LLAMA = dict(pos="rope", normalization="rmsnorm", activation="swiglu", bias=False)
BERT = dict(arch="encoder", pos="learned", norm="post", embed_norm=True, head="mlm")
CASES = {  # name -> (tfviz options, the transformers class the folder is)
    "gpt2 tied gelu_new": (dict(GPT2, activation="gelu_new", tie_embeddings=True), "GPT2LMHeadModel"),
    "gpt2 untied gelu": (dict(GPT2, layer_norm_eps=1e-6), "GPT2LMHeadModel"),
    "gpt2 attention-only": (dict(GPT2, attn_only=True, n_heads=2), "GPT2LMHeadModel"),  # induction's
    "llama gqa interleaved": (dict(LLAMA, n_kv_heads=2), "LlamaForCausalLM"),
    "llama half tied": (dict(LLAMA, rope_pairs="half", tie_embeddings=True, rope_base=500.0),
                        "LlamaForCausalLM"),
    "llama attention-only": (dict(LLAMA, attn_only=True, rope_pairs="half"), "LlamaForCausalLM"),
    "llama attention-only biases mqa": (dict(LLAMA, attn_only=True, bias=True, n_kv_heads=1),
                                        "LlamaForCausalLM"),
    "bert tied token types": (dict(BERT, n_token_types=2, tie_embeddings=True), "BertForMaskedLM"),
    "bert untied": (dict(BERT, activation="gelu_new"), "BertForMaskedLM"),
}


def _ids(n: int = 11) -> torch.Tensor:
    ids = torch.randint(0, 97, (2, n), generator=torch.Generator().manual_seed(1))
    ids[:, 4] = 0  # tfviz's pad id: a folder masks nothing by id, and these models had pad_id 0 ...
    return ids


def _no_transformers(monkeypatch) -> None:
    """``import transformers`` fails from here on (as in the app's own environment)."""
    monkeypatch.setitem(sys.modules, "transformers", None)


@pytest.mark.parametrize("name", list(CASES))
def test_a_written_folder_is_what_transformers_writes_and_computes(tmp_path, monkeypatch, name):
    kw, cls = CASES[name]
    model = _tiny(3, **{**kw, "pad_id": None})
    with monkeypatch.context() as m:
        _no_transformers(m)
        with pytest.raises(ImportError):
            import transformers as _  # noqa: F401
        folder = write_folder(model, tmp_path / "out")
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["config.json", "model.safetensors"] + (["generation_config.json"] if kw.get("arch") != "encoder" else []))
    ex = hf_tensors(model)

    # the tensors are those transformers itself writes for this config
    ref = getattr(transformers, cls)(transformers.AutoConfig.for_model(**ex.family.hf_config(ex.config)))
    ref.save_pretrained(str(tmp_path / "ref"))
    from safetensors import safe_open
    shapes = {}
    for f in (tmp_path / "ref", folder):
        with safe_open(str(f / "model.safetensors"), "pt") as st:
            shapes[f] = {k: tuple(st.get_slice(k).get_shape()) for k in st.keys()}
    assert shapes[folder] == shapes[tmp_path / "ref"]

    hf, info = getattr(transformers, cls).from_pretrained(str(folder), output_loading_info=True)
    assert type(hf).__name__ == cls
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    hf.eval()
    ids = _ids()
    with torch.no_grad():
        want = model(ids)
        got = hf(ids).logits
    torch.testing.assert_close(got, want, atol=1e-5 * max(1.0, float(want.abs().max())), rtol=1e-5)
    auto = (transformers.AutoModelForMaskedLM if kw.get("arch") == "encoder"
            else transformers.AutoModelForCausalLM).from_pretrained(str(folder)).eval()
    with torch.no_grad():
        assert torch.equal(auto(ids).logits, got)  # the Auto class opens the same model

    if kw.get("attn_only"):  # the MLPs transformers runs add exactly zero, on every position
        outs = []
        mlps = [layer.mlp for layer in (hf.transformer.h if cls.startswith("GPT2") else hf.model.layers)]
        hooks = [mlp.register_forward_hook(lambda mod, i, o: outs.append(o)) for mlp in mlps]
        with torch.no_grad():
            hf(ids)
        for h in hooks:
            h.remove()
        assert len(outs) == model.config.n_layers and all(torch.equal(o, torch.zeros_like(o)) for o in outs)


def test_the_train_presets_export_as_their_family(tmp_path):
    """Both Train presets of issue 30: induction (attention-only, learned positions) is a GPT-2
    as it stands; coref (RoPE, LayerNorm, GELU) is none until trained GPT-2- or Llama-shaped."""
    from tfviz.train.presets import QUICK

    induction = tfviz.ModelConfig(vocab_size=50, max_len=64, **QUICK["induction"].model)
    assert family_for(induction).name == "gpt2"
    coref = tfviz.ModelConfig(vocab_size=50, max_len=64, **QUICK["coref"].model)
    with pytest.raises(ValueError, match="cannot be written as GPT-2: pos='rope'.*Llama-family: "
                                         "normalization='layernorm'"):
        family_for(coref)
    for adapter in export.shapes():
        for name, preset in QUICK.items():
            fields = {**preset.model, "vocab_size": 50, "max_len": 64}
            if adapter.shape["arch"] != fields["arch"]:
                continue
            shaped = adapter.shaped(fields)
            cfg = tfviz.ModelConfig(**shaped)
            assert adapter.problems(cfg) == [], (adapter.label, name)
            assert family_for(cfg) is adapter
            # what the preset had and the shape does not touch is kept
            assert (cfg.d_model, cfg.n_layers, cfg.n_heads) == (
                preset.model["d_model"], preset.model["n_layers"], preset.model["n_heads"])
            if adapter.name != "bert":
                assert cfg.attn_only == preset.model.get("attn_only", False)


def test_refused_exports_leave_nothing(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="cannot be written as GPT-2: pos='alibi'"):
        write_folder(_tiny(0, pos="alibi"), tmp_path / "a")
    with pytest.raises(ValueError, match="attn_only=True \\(every BERT layer has an MLP\\)"):
        write_folder(_tiny(0, **BERT, attn_only=True), tmp_path / "b")
    # a layout that "forgets" to permute RoPE pairs: the read-back logits differ, nothing is kept
    from tfviz.interop import families
    monkeypatch.setattr(families.Llama, "canonical", classmethod(lambda cls, cfg, state: (
        cfg.replace(rope_pairs="half"), state)))
    with pytest.raises(ValueError, match="logits differ from tfviz's"):
        write_folder(_tiny(3, **LLAMA), tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no hidden temp folder
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("mine")
    with pytest.raises(ValueError, match="already exists and is not an empty folder"):
        write_folder(_tiny(0), tmp_path / "d")
    assert (tmp_path / "d" / "x").read_text() == "mine"
    lstm = _recurrent()
    with pytest.raises(ValueError, match="needs a tfviz.Transformer, not RecurrentModel"):
        write_folder(lstm, tmp_path / "e")
    with pytest.raises(ValueError, match="is not a transformer"):
        family_for(lstm.config)


def _recurrent():
    from tfviz.model.families import build_model, config_from_dict

    cfg = config_from_dict({"family": "recurrent", "cell": "lstm", "vocab_size": 20, "d_model": 8,
                            "d_hidden": 8, "n_layers": 1, "arch": "decoder"})
    return build_model(cfg)


# ------------------------------------------------------------------------- a trained model
def _trained(task_name: str, steps: int = 4, **model):
    """A real (briefly) trained checkpoint of ``task_name`` as the Train page saves one."""
    from tfviz.tasks import make_task
    from tfviz.train import TrainConfig, train

    task = make_task(task_name)
    torch.manual_seed(0)
    cfg = tfviz.ModelConfig(vocab_size=task.tokenizer.vocab_size, d_model=32, n_layers=2, max_len=64,
                            **model)
    return tfviz.Transformer(cfg), task, TrainConfig(steps=steps, batch_size=8, warmup=1, eval_every=0,
                                                     eval_examples=8, snapshot_every=0, checkpoint_every=0,
                                                     device="cpu"), train


@pytest.fixture(scope="module")
def coref_gpt2(tmp_path_factory):
    """A coref model trained GPT-2-shaped (the Train page's choice), saved as a tfviz checkpoint."""
    from tfviz.interop.families import GPT2

    model, task, tc, train = _trained("coref", **{k: v for k, v in GPT2.shaped(
        dict(arch="decoder", pos="rope", n_heads=4)).items() if k != "n_kv_heads"})
    path = tmp_path_factory.mktemp("ck") / "coref-gpt2.safetensors"
    train(model, task, tc, checkpoint=path)
    return tfviz.load_checkpoint(path), task


def test_a_reopened_folder_has_its_task_back(coref_gpt2, tmp_path, monkeypatch):
    """tfviz_task.json travels with the folder: the reopened model has the same task (the same
    examples, ids for ids), a default text in its vocabulary, and the pronoun probe."""
    from tfviz.analysis import effects, explorer

    ck, task = coref_gpt2
    with monkeypatch.context() as m:
        _no_transformers(m)
        folder = write_checkpoint(ck, tmp_path / "coref")
    written = json.loads((folder / taskfile.TASK_FILE).read_text())
    assert written["task"] == ck.task and written["examples"][0]["text"] == task.examples("validation")[0].text
    back = from_pretrained(folder)
    assert back.task == ck.task
    assert any("its tfviz task came with it" in n for n in back.meta["extra"]["imported"]["notes"])
    ours, theirs = task.examples("validation"), back.shared_task().examples("validation")
    assert [e.tokens for e in theirs] == [e.tokens for e in ours] and [e.meta for e in theirs] == [e.meta for e in ours]
    text, _ = explorer.default_texts(back.shared_task(), back.tokenizer, back.config)
    assert "[UNK]" not in back.tokenizer.encode(text).tokens and back.tokenizer.unk_id not in back.tokenizer.encode(text).ids
    assert explorer.probe_unavailable("coref", back.shared_task()) is None
    e = theirs[0]  # the reopened model's own example: its pronoun probe, the same numbers
    probe = effects.input_probe(back.model, back.task["name"], e.tokens, e.meta)
    assert probe.kind == "coref"
    with torch.no_grad():
        want, got = ck.model.eval()(*probe.inputs), back.model(*probe.inputs)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for name, metric in probe.metrics.items():
        assert metric(got) == pytest.approx(metric(want), abs=1e-5), name
    # transformers reads the same folder's tokenizer: the same ids, the same special tokens
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert tok(e.text, add_special_tokens=False)["input_ids"] == ck.tokenizer.encode(e.text).ids
    assert (tok.pad_token, tok.unk_token, tok.bos_token) == ("[PAD]", "[UNK]", "[BOS]")
    gen = transformers.GenerationConfig.from_pretrained(str(folder))
    assert gen.bos_token_id == ck.tokenizer.special_id("bos")


def test_an_attention_only_model_comes_back_attention_only(tmp_path):
    """The induction preset's model: written as GPT-2 with MLPs of zeros, read back as the
    attention-only model it was (the same tensors, bit for bit), with its task."""
    model, task, tc, train = _trained("induction", arch="decoder", pos="learned", n_heads=2, attn_only=True)
    path = tmp_path / "induction.safetensors"
    train(model, task, tc, checkpoint=path)
    ck = tfviz.load_checkpoint(path)
    folder = write_checkpoint(ck, tmp_path / "induction")
    back = from_pretrained(folder)
    assert back.config.attn_only and back.task == ck.task
    assert any("attention-only, as tfviz trained it" in n for n in back.meta["extra"]["imported"]["notes"])
    mine, theirs = ck.model.state_dict(), back.model.state_dict()
    assert sorted(mine) == sorted(theirs) and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_a_task_file_that_does_not_fit_is_a_note(coref_gpt2, tmp_path):
    ck, _ = coref_gpt2
    folder = write_checkpoint(ck, tmp_path / "coref")
    spec = json.loads((folder / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = sorted(k for k in vocab if not k.startswith("["))[:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # another vocabulary: the examples' ids would be wrong
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    back = from_pretrained(folder)
    assert back.task is None and any("not the tokenizer it was trained with" in n
                                     for n in back.meta["extra"]["imported"]["notes"])
    (folder / taskfile.TASK_FILE).write_text("[" * 100_000)  # unreadable: still only a note
    back = from_pretrained(folder)
    assert back.task is None and any("cannot be read" in n for n in back.meta["extra"]["imported"]["notes"])
    (folder / taskfile.TASK_FILE).write_text(json.dumps({"format": "tfviz-task", "format_version": 1,
                                                         "task": {"name": "nope"}}))
    assert from_pretrained(folder).task is None


def test_zip_holds_the_folder(coref_gpt2, tmp_path):
    import io
    import zipfile

    ck, _ = coref_gpt2
    data = export.export_zip(ck, "coref-gpt2")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = sorted(z.namelist())
        z.extractall(tmp_path)
    assert names == sorted(f"coref-gpt2/{n}" for n in (
        "config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
        "tfviz_task.json", "tokenizer.json", "tokenizer_config.json"))
    back = from_pretrained(tmp_path / "coref-gpt2")
    assert back.task == ck.task


def test_cli_export_needs_no_transformers(coref_gpt2, tmp_path, monkeypatch, capsys):
    from tfviz.cli import main as cli

    ck, _ = coref_gpt2
    _no_transformers(monkeypatch)
    assert cli(["export", str(ck.path), "--out", str(tmp_path / "out")]) == 0
    assert "exported" in capsys.readouterr().out
    assert from_pretrained(tmp_path / "out").task == ck.task



@pytest.mark.parametrize("shape, task_name", [("Llama-shaped", "coref"), ("BERT-shaped", "mlm")])
def test_each_shape_the_train_page_offers_trains_and_exports(tmp_path, shape, task_name):
    """The Train page's path for the other shapes: the preset's fields shaped, configs built as
    the page builds them, a few real steps, then the folder: transformers' logits are tfviz's."""
    from tfviz.tasks import make_task
    from tfviz.train import train
    from tfviz.train.presets import QUICK, build_configs

    adapter = {a.shape_label: a for a in export.shapes()}[shape]
    preset = QUICK[task_name]
    task = make_task(preset.task, **preset.task_params)
    train_fields = {**preset.train.to_dict(), "steps": 3, "warmup": 1, "eval_every": 0,
                    "snapshot_every": 0, "batch_size": 8, "device": "cpu"}
    mc, tc = build_configs(task, adapter.shaped({**preset.model, "window": None}), train_fields)
    assert family_for(mc) is adapter
    path = tmp_path / f"{task_name}.safetensors"
    torch.manual_seed(0)
    train(tfviz.Transformer(mc), task, tc, checkpoint=path)
    ck = tfviz.load_checkpoint(path)
    folder = write_checkpoint(ck, tmp_path / "out")
    back = from_pretrained(folder)
    assert back.task == ck.task
    e = task.examples("validation")[0]
    x = torch.tensor([e.tokens])
    auto = (transformers.AutoModelForMaskedLM if mc.arch == "encoder"
            else transformers.AutoModelForCausalLM).from_pretrained(str(folder)).eval()
    with torch.no_grad():
        want = ck.model.eval()(x)
        torch.testing.assert_close(back.model(x), want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(auto(x).logits, want, atol=1e-5, rtol=1e-5)
