"""Malformed Hugging Face model folders (issue 22, items 2 and 6): whatever is wrong with a folder,
``from_pretrained`` raises ``ModelFolderError`` with the reason, ``list_models`` (the picker) lists it
as one line with that reason — never another exception, never at the cost of the other folders —
in both places tfviz looks: a folder under TFVIZ_MODELS_DIR and a hub-cache entry
(``models--org--name/snapshots/<rev>/`` whose files link into the repository's ``blobs/``).

Every folder is ``hf_folders.tiny_gpt2`` (a few kB, written without transformers) broken in one
way; the oversize cases lower the limit instead of writing megabytes.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

import hf_folders
from tfviz import limits, storage
from tfviz.interop import ModelFolderError, discover, from_pretrained, list_models
from tfviz.interop.folder import CONFIG_FIELDS, resolve

OUTSIDE = "outside"  # a folder beside the models: links into it lead out of a model's folder


def _write(folder: Path, name: str, data) -> None:
    path = folder / name
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def _config(folder: Path, **changes) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    _write(folder, "config.json", cfg)


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _index(folder: Path, weight_map, **extra) -> None:
    _write(folder, "model.safetensors.index.json", {"metadata": {}, "weight_map": weight_map, **extra})


def _sharded(folder: Path) -> dict:
    """model.safetensors renamed to one shard + its index (a valid sharded folder)."""
    names = list(storage.read_header(folder / "model.safetensors")[0])
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    wmap = {n: "model-00001-of-00001.safetensors" for n in names}
    _index(folder, wmap)
    return wmap


def _link_out(folder: Path, name: str) -> None:
    """``name`` replaced by a link to a copy of itself outside the folder."""
    outside = folder.parent.parent / OUTSIDE / f"{folder.name}-{name}"
    outside.parent.mkdir(exist_ok=True)
    shutil.copy(folder / name, outside)
    (folder / name).unlink()
    (folder / name).symlink_to(outside)


def _dir_instead(folder: Path, name: str) -> None:
    _write(folder, name, b"")
    (folder / name).unlink()
    (folder / name).mkdir()
    (folder / name / "inside").write_text("{}")


def _tokenizer(folder: Path, change) -> None:
    spec = json.loads((folder / "tokenizer.json").read_text())
    change(spec)
    _write(folder, "tokenizer.json", spec)


def _more_words(spec: dict) -> None:
    spec["model"]["vocab"].update({f"w{i}": 100 + i for i in range(50)})


BAD_TYPES = {"a string": {"gelu": 1}, "a list of strings": "GPT2LMHeadModel", "an object {...}": [1, 2],
             "true or false": "yes", "a whole number": "8", "a number": [0.5]}

# id -> (break the folder, the reason's pattern, where it is found: "both" | "load" (from_pretrained
# only: the listing reads no tensor data and does not build the tokenizer))
CASES = {
    # ---- config.json
    "config-deep-3000": (lambda f: _write(f, "config.json", '{"model_type": "gpt2", "x": ' + _deep(3000) + "}"),
                         r"config.json nests deeper than 32 levels", "both"),
    "config-deep-200000": (lambda f: _write(f, "config.json", _deep(200_000)),
                           r"config.json has 200,000 JSON objects/arrays; tfviz reads at most 100,000", "both"),
    "config-brackets": (lambda f: _write(f, "config.json", '{"model_type": "gpt2", "x": [' + "[]," * 100_000 + "[]]}"),
                        r"JSON objects/arrays; tfviz reads at most 100,000", "both"),
    "config-model-type-list": (lambda f: _config(f, model_type=["gpt2"]),
                               r'"model_type" must be a string, not a list \(\[\'gpt2\'\]\)', "both"),
    "config-model-type-object": (lambda f: _config(f, model_type={"gpt2": 1}),
                                 r'"model_type" must be a string, not an object', "both"),
    "config-model-type-number": (lambda f: _config(f, model_type=2), r'"model_type" must be a string', "both"),
    "config-model-type-unknown": (lambda f: _config(f, model_type="t5"), r"model_type 't5' is not supported", "both"),
    "config-no-model-type": (lambda f: _write(f, "config.json", {"n_layer": 1}), r"model_type None is not supported",
                             "both"),
    "config-architectures-string": (
        lambda f: _config(f, architectures="GPT2LMHeadModel"),
        r'"architectures" must be a list of strings \(e.g. \["GPT2LMHeadModel"\]\), not a string '
        r"\('GPT2LMHeadModel'\)", "both"),
    "config-architectures-numbers": (lambda f: _config(f, architectures=[1, 2]),
                                     r'"architectures" must be a list of strings', "both"),
    "config-architectures-other": (lambda f: _config(f, architectures=["BertForMaskedLM"]),
                                   r"architectures \['BertForMaskedLM'\] is not supported", "both"),
    **{f"config-{key}-wrong-type": (lambda f, key=key, kind=kind: _config(f, **{key: BAD_TYPES[kind]}),
                                    rf'"{key}" must be {re.escape(kind)}', "both")
       for key, kind in CONFIG_FIELDS.items()},
    **{f"config-{key}-{what}": (lambda f, key=key, v=v: _config(f, **{key: v}), rf"{key}=.* must be a number", "both")
       for key in ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions", "layer_norm_epsilon")
       for what, v in (("string", "8"), ("list", [8]), ("object", {"a": 8}), ("flag", True))},
    "config-n-layer-huge": (lambda f: _config(f, n_layer=10**30), r"n_layers=\d+ is too large \(at most 256\)",
                            "both"),
    "config-not-an-object": (lambda f: _write(f, "config.json", [1, 2]),
                             r"config.json must be a JSON object \{...\}, not a list", "both"),
    "config-null": (lambda f: _write(f, "config.json", "null"), r"config.json must be a JSON object", "both"),
    "config-truncated": (lambda f: _write(f, "config.json", '{"model_type": "gp'), r"config.json is not valid JSON",
                         "both"),
    "config-empty": (lambda f: _write(f, "config.json", b""), r"config.json is not valid JSON", "both"),
    "config-latin-1": (lambda f: _write(f, "config.json", '{"model_type": "gpt2", "name": "café"}'.encode("latin-1")),
                       r"config.json is not UTF-8 text \(byte 35 is 0xe9\)", "both"),
    "config-utf-16": (lambda f: _write(f, "config.json", '{"model_type": "gpt2"}'.encode("utf-16")),
                      r"config.json is not UTF-8 text", "both"),
    "config-a-folder": (lambda f: _dir_instead(f, "config.json"), r"config.json is a folder, not a file", "both"),
    "config-link-out": (lambda f: _link_out(f, "config.json"), r"config.json is a link to a file outside the "
                                                               r"model's folder", "both"),
    "config-broken-link": (lambda f: (f / "config.json").unlink() or (f / "config.json").symlink_to("nowhere"),
                           r"config.json cannot be read \(No such file or directory; a broken link\?\)", "both"),
    "config-link-loop": (lambda f: (f / "config.json").unlink() or (f / "config.json").symlink_to("config.json"),
                         r"config.json cannot be read \((a loop of links|Too many levels of symbolic links)", "both"),
    "config-a-pipe": (lambda f: (f / "config.json").unlink() or os.mkfifo(f / "config.json"),
                      r"config.json is not a regular file", "both"),
    # ---- the weights
    "weights-truncated": (lambda f: _write(f, "model.safetensors", (f / "model.safetensors").read_bytes()[:-100]),
                          r"truncated or corrupt: the header claims", "both"),
    "weights-header-truncated": (lambda f: _write(f, "model.safetensors", (f / "model.safetensors").read_bytes()[:50]),
                                 r"truncated: the header says it is", "both"),
    "weights-empty": (lambda f: _write(f, "model.safetensors", b""), r"only 0 bytes", "both"),
    "weights-garbage": (lambda f: _write(f, "model.safetensors", os.urandom(64)), r"not a safetensors file", "both"),
    "weights-a-folder": (lambda f: _dir_instead(f, "model.safetensors"), r"model.safetensors is a folder, not a file",
                         "both"),
    "weights-link-out": (lambda f: _link_out(f, "model.safetensors"),
                         r"model.safetensors is a link to a file outside the model's folder", "both"),
    "weights-missing": (lambda f: (f / "model.safetensors").unlink(), r"no model.safetensors and no "
                                                                      r"model.safetensors.index.json", "both"),
    "weights-shape-off-config": (lambda f: _config(f, n_embd=16), r"the weights do not fit config.json", "load"),
    # ---- the shard index
    "index-missing-shard": (lambda f: _index(f, {"wte.weight": "model-00002-of-00002.safetensors"}),
                            r"shard\(s\) model-00002-of-00002.safetensors named in model.safetensors.index.json "
                            r"are missing", "both"),
    "index-outside-path": (lambda f: _index(f, {"wte.weight": "../other/model.safetensors"}),
                           r"shard names must be plain .safetensors file names in the same folder", "both"),
    "index-absolute-path": (lambda f: _index(f, {"wte.weight": "/etc/model.safetensors"}),
                            r"shard names must be plain .safetensors file names", "both"),
    "index-shard-link-out": (lambda f: _sharded(f) and _link_out(f, "model-00001-of-00001.safetensors"),
                             r"model-00001-of-00001.safetensors is a link to a file outside the model's folder",
                             "both"),
    "index-shard-a-folder": (lambda f: _sharded(f) and _dir_instead(f, "model-00001-of-00001.safetensors"),
                             r"model-00001-of-00001.safetensors is a folder, not a file", "both"),
    "index-names-what-shards-lack": (lambda f: _index(f, {**_sharded(f), "h.7.attn.c_attn.weight":
                                                          "model-00001-of-00001.safetensors"}),
                                     r"names tensors its shards do not hold \(h.7.attn.c_attn.weight\)", "both"),
    "index-weight-map-list": (lambda f: _index(f, ["wte.weight"]), r'needs a "weight_map" of tensor name -> file',
                              "both"),
    "index-weight-map-numbers": (lambda f: _index(f, {"wte.weight": 1}), r'needs a "weight_map"', "both"),
    "index-not-an-object": (lambda f: _write(f, "model.safetensors.index.json", "[]"),
                            r"model.safetensors.index.json must be a JSON object", "both"),
    "index-truncated": (lambda f: _write(f, "model.safetensors.index.json", '{"weight_map": {"wte.weight": "mo'),
                        r"model.safetensors.index.json is not valid JSON", "both"),
    "index-deep": (lambda f: _write(f, "model.safetensors.index.json", '{"metadata": ' + _deep(5000) + "}"),
                   r"model.safetensors.index.json nests deeper than 32 levels", "both"),
    "index-not-utf-8": (lambda f: _write(f, "model.safetensors.index.json", b'{"weight_map": {"\xff": "a"}}'),
                        r"model.safetensors.index.json is not UTF-8 text", "both"),
    "index-a-folder": (lambda f: _dir_instead(f, "model.safetensors.index.json"),
                       r"model.safetensors.index.json is a folder, not a file", "both"),
    "index-too-many-entries": (lambda f: _index(f, {f"t{i}": "model.safetensors" for i in range(100_001)}),
                               r"names 100,001 tensors; a model has at most 100,000", "both"),
    # ---- the tokenizer
    "tokenizer-truncated": (lambda f: _write(f, "tokenizer.json", (f / "tokenizer.json").read_text()[:100]),
                            r"tokenizer.json is not valid JSON", "both"),
    "tokenizer-not-utf-8": (lambda f: _write(f, "tokenizer.json", b"\xfe\xff" + (f / "tokenizer.json").read_bytes()),
                            r"tokenizer.json is not UTF-8 text \(byte 0 is 0xfe\)", "both"),
    "tokenizer-deep": (lambda f: _tokenizer(f, lambda s: s.update(normalizer=json.loads(_deep(40)))),
                       r"tokenizer.json nests deeper than 32 levels", "both"),
    "tokenizer-model-a-list": (lambda f: _tokenizer(f, lambda s: s.update(model=[1])),
                               r'not a tokenizer.json \(it needs a "model" object\)', "both"),
    "tokenizer-not-an-object": (lambda f: _write(f, "tokenizer.json", "[]"), r'it needs a "model" object', "both"),
    "tokenizer-more-words-than-embeddings": (lambda f: _tokenizer(f, _more_words),
                                             r"tokenizer.json has 62 tokens but the model only 12 embeddings", "both"),
    "tokenizer-far-more-words": (lambda f: _tokenizer(f, lambda s: s["model"]["vocab"].update(
        {f"w{i}": 100 + i for i in range(20_000)})), r"tokenizer.json holds about 20,0\d\d strings; a tokenizer "
                                                    r"for the model's 12 embeddings needs at most 10,096", "both"),
    "tokenizer-a-folder": (lambda f: _dir_instead(f, "tokenizer.json"), r"tokenizer.json is a folder, not a file",
                           "both"),
    "tokenizer-link-out": (lambda f: _link_out(f, "tokenizer.json"),
                           r"tokenizer.json is a link to a file outside the model's folder", "both"),
    "tokenizer-unknown-model": (lambda f: _tokenizer(f, lambda s: s["model"].update(type="Nonsense")),
                                r"the tokenizer's model is of type 'Nonsense', which tfviz does not read",
                                "both"),  # issue 40: a component tfviz does not know, named in the listing
    "tokenizer-config-a-list": (lambda f: _write(f, "tokenizer_config.json", "[1]"),
                                r"tokenizer_config.json must be a JSON object", "both"),
    "tokenizer-config-truncated": (lambda f: _write(f, "tokenizer_config.json", '{"bos_token": '),
                                   r"tokenizer_config.json is not valid JSON", "both"),
    "special-tokens-map-deep": (lambda f: _write(f, "special_tokens_map.json", '{"a": ' + _deep(100) + "}"),
                                r"special_tokens_map.json nests deeper than 32 levels", "both"),
    "tokenizer-config-odd-values": (lambda f: _write(f, "tokenizer_config.json", {"bos_token": [1], "eos_token": {}}),
                                    None, "both"),  # ignored values: the folder opens
    "config-odd-token-ids": (lambda f: _config(f, bos_token_id=-5, eos_token_id=10**40, pad_token_id=[1, 2]),
                             None, "both"),  # ignored values: the folder opens
}


def _as_cache(src: Path, hub: Path, name: str) -> Path:
    """``src`` as the hub cache lays it out: models--t--NAME/{refs/main, snapshots/<rev>/*, blobs/*},
    every file a relative link into blobs/ (a link out of ``src`` stays that link; a folder or a
    pipe where a file belongs is a blob too)."""
    repo = hub / f"models--t--{name}"
    snap, blobs = repo / "snapshots" / "abc123", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    for i, f in enumerate(sorted(src.iterdir())):
        if f.is_symlink():
            (snap / f.name).symlink_to(os.readlink(f))
            continue
        blob = blobs / f"{i:04d}{f.name.encode().hex()[:16]}"
        if f.is_dir():
            shutil.copytree(f, blob)
        elif f.is_fifo():
            os.mkfifo(blob)
        else:
            shutil.copy(f, blob)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    return repo


@pytest.fixture(params=["models", "hf-cache"])
def layout(request) -> str:
    return request.param


def _place(tmp_path: Path, layout: str, *folders: Path) -> tuple[Path, Path, dict[str, Path]]:
    """(models dir, hub dir, {name: what to open}) with ``folders`` in the chosen place."""
    models, hub = tmp_path / "models", tmp_path / "hub"
    models.mkdir(exist_ok=True)
    hub.mkdir(exist_ok=True)
    where = {}
    for f in folders:
        if layout == "models":
            where[f.name] = f.rename(models / f.name)
        else:
            where[f"t/{f.name}"] = _as_cache(f, hub, f.name)
    return models, hub, where


def _broken(tmp_path: Path, case: str, layout: str, monkeypatch) -> tuple[dict, dict[str, Path]]:
    """A good folder and ``case``'s broken one, placed; -> (list_models by name, name -> path)."""
    src = tmp_path / "src"
    good, bad = hf_folders.tiny_gpt2(src / "good"), hf_folders.tiny_gpt2(src / "bad", seed=1)
    CASES[case][0](bad)
    models, hub, where = _place(tmp_path, layout, good, bad)
    found = {m.name: m for m in list_models(models, hub)}
    return found, where


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_folder_is_a_reason_never_an_exception(tmp_path, monkeypatch, case, layout):
    _, match, where_seen = CASES[case]
    found, where = _broken(tmp_path, case, layout, monkeypatch)
    bad = "bad" if layout == "models" else "t/bad"
    good = "good" if layout == "models" else "t/good"
    assert found[good].ok, found[good].reason  # the other folder is listed as it is
    if match is None:  # values tfviz ignores: the folder opens
        assert found[bad].ok, found[bad].reason
        assert from_pretrained(where[bad]).config.vocab_size == 12
        return
    info = found[bad]
    if where_seen == "both":
        assert not info.ok and re.search(match, info.reason), info.reason
        assert "\n" not in info.reason and len(info.reason) <= 400
        assert str(tmp_path) not in info.reason  # the picker names the folder; no server path
    else:
        assert info.ok, info.reason  # found when the tensors / the tokenizer are read
    with pytest.raises(ModelFolderError, match=match):
        from_pretrained(where[bad])


def test_oversize_files_are_refused_before_they_are_read(tmp_path, monkeypatch, layout):
    """config.json, the index, tokenizer_config.json by ``limits.FOLDER_JSON_MB``, tokenizer.json by
    $TFVIZ_TOKENIZER_MAX_MB: refused by their size, never opened (``open`` would say otherwise)."""
    src = tmp_path / "src"
    folders = [hf_folders.tiny_gpt2(src / n, seed=i) for i, n in enumerate(("config", "index", "tokcfg", "tok"))]
    _config(folders[0], padding="x" * 3000)
    _sharded(folders[1])
    _write(folders[1], "model.safetensors.index.json",
           json.loads((folders[1] / "model.safetensors.index.json").read_text()) | {"pad": "x" * 3000})
    _write(folders[2], "tokenizer_config.json", {"pad": "x" * 3000})
    _write(folders[3], "tokenizer.json", json.dumps(json.loads((folders[3] / "tokenizer.json").read_text()), indent=8))
    big_tokenizer = (folders[3] / "tokenizer.json").stat().st_size
    assert big_tokenizer > 1000 > (folders[0] / "tokenizer.json").stat().st_size
    models, hub, where = _place(tmp_path, layout, *folders)
    where = {name.split("/")[-1]: path for name, path in where.items()}
    monkeypatch.setattr(limits, "FOLDER_JSON_MB", 2000 / limits.MB)  # 2,000 bytes
    monkeypatch.setenv("TFVIZ_TOKENIZER_MAX_MB", str(1000 / limits.MB))  # 1,000 bytes
    big = {"config": "config.json", "index": "model.safetensors.index.json", "tokcfg": "tokenizer_config.json",
           "tok": "tokenizer.json"}
    big_paths = {str(resolve(where[name]) / file) for name, file in big.items()}
    opened = []
    real_open = open

    def spy(file, *a, **k):
        opened.append(str(file))
        return real_open(file, *a, **k)
    monkeypatch.setattr("builtins.open", spy)
    found = {m.name.split("/")[-1]: m for m in list_models(models, hub)}
    want = {"config": r"config.json is 3,\d\d\d bytes; tfviz reads at most 2,000",
            "index": r"model.safetensors.index.json is 3,\d\d\d bytes; tfviz reads at most 2,000",
            "tokcfg": r"tokenizer_config.json is 3,\d\d\d bytes; tfviz reads at most 2,000",
            "tok": rf"tokenizer.json is {big_tokenizer:,} bytes, over the 1,000-byte limit for a tokenizer "
                   r".*set TFVIZ_TOKENIZER_MAX_MB"}
    for name, match in want.items():
        assert not found[name].ok and re.search(match, found[name].reason), found[name].reason
    for name, match in want.items():
        with pytest.raises(ModelFolderError, match=match):
            from_pretrained(where[name])
    assert any(o.endswith("config.json") for o in opened)  # the spy sees what is read
    assert not big_paths & set(opened), big_paths & set(opened)  # refused by size: never opened


def test_a_big_vocabulary_is_refused_before_tokenizers_builds_it(tmp_path, monkeypatch):
    """The tokenizers library is never handed a vocabulary larger than the model's."""
    from tfviz.interop import tokenizer as tok_module

    folder = hf_folders.tiny_gpt2(tmp_path / "m")
    _tokenizer(folder, _more_words)
    built = []
    monkeypatch.setattr(tok_module.HFTokenizer, "from_str", lambda text: built.append(text))
    with pytest.raises(ModelFolderError, match="has 62 tokens but the model only 12 embeddings"):
        from_pretrained(folder)
    assert not built


def test_the_hub_cache_links_into_its_own_blobs_and_nowhere_else(tmp_path):
    """The cache's snapshots/<rev>/* -> ../../blobs/* links are the repository's own files; a
    snapshot file linked into another repository's blobs is outside, and refused."""
    src = tmp_path / "src"
    a, b = hf_folders.tiny_gpt2(src / "a"), hf_folders.tiny_gpt2(src / "b", seed=1)
    hub = tmp_path / "hub"
    repo_a, repo_b = _as_cache(a, hub, "a"), _as_cache(b, hub, "b")
    assert from_pretrained(repo_a).config.vocab_size == 12
    weights_b = repo_b / "snapshots" / "abc123" / "model.safetensors"
    weights_b.unlink()  # now a link into repository a's blobs: the same bytes, another repository
    weights_b.symlink_to(os.path.relpath((repo_a / "snapshots" / "abc123" / "model.safetensors").resolve(),
                                         weights_b.parent))
    with pytest.raises(ModelFolderError, match="model.safetensors is a link to a file outside"):
        from_pretrained(repo_b)
    models = tmp_path / "models"
    models.mkdir()
    (models / "linked").symlink_to(repo_a / "snapshots" / "abc123")  # a models/ entry linking a snapshot
    found = {m.name: m for m in list_models(models, hub)}
    assert found["t/a"].ok and not found["t/b"].ok and found["linked"].ok
    assert from_pretrained(models / "linked").config.vocab_size == 12


def test_refs_main_of_any_size_or_encoding(tmp_path):
    folder = hf_folders.tiny_gpt2(tmp_path / "src" / "m")
    repo = _as_cache(folder, tmp_path / "hub", "m")
    (repo / "refs" / "main").write_bytes(b"\xff" * 5_000_000)  # not a revision: the newest snapshot
    assert from_pretrained(repo).path == repo / "snapshots" / "abc123"
    (repo / "refs" / "main").unlink()
    (repo / "refs" / "main").mkdir()
    assert list_models(tmp_path / "none", tmp_path / "hub")[0].ok


def test_each_folder_is_inspected_on_its_own(tmp_path, monkeypatch):
    """An error nobody foresaw in one folder is that folder's reason; the others are listed."""
    models = tmp_path / "models"
    for i, name in enumerate(("a", "b", "c")):
        hf_folders.tiny_gpt2(models / name, seed=i)
    real = discover._inspect

    def flaky(p, source, name):
        if p.name == "b":
            raise RecursionError("maximum recursion depth exceeded")
        return real(p, source, name)
    monkeypatch.setattr(discover, "_inspect", flaky)
    found = {m.name: m for m in list_models(models, tmp_path / "hub")}
    assert found["a"].ok and found["c"].ok
    assert not found["b"].ok
    assert found["b"].reason == "cannot be read (RecursionError: maximum recursion depth exceeded)"


def test_inspections_are_kept_per_folder_until_its_files_change(tmp_path, monkeypatch):
    models = tmp_path / "models"
    good, bad = hf_folders.tiny_gpt2(models / "good"), hf_folders.tiny_gpt2(models / "bad", seed=1)
    _write(bad, "config.json", _deep(3000))
    calls = []
    real = discover.inspect
    monkeypatch.setattr(discover, "inspect", lambda p, *a: calls.append(p.name) or real(p, *a))
    first = list_models(models, tmp_path / "hub")
    assert sorted(calls) == ["bad", "good"]
    calls.clear()
    assert list_models(models, tmp_path / "hub") == first and calls == []  # failures are kept too
    _config(good, model_type="t5")  # another config: read again (and refused)
    again = {m.name: m for m in list_models(models, tmp_path / "hub")}
    assert calls == ["good"] and not again["good"].ok
    (models / "new").mkdir()
    calls.clear()
    list_models(models, tmp_path / "hub")
    assert calls == ["new"]
    monkeypatch.setenv("TFVIZ_LOCAL_MODEL_MAX_MB", "0.001")  # another limit: every folder again
    calls.clear()
    assert not any(m.ok for m in list_models(models, tmp_path / "hub")) and len(calls) == 3


def test_the_catalogue_lists_off_the_callers_thread(tmp_path, monkeypatch):
    """``Catalogue.models()`` returns the last listing at once; folders are read in its own thread
    (never the page's), a refresh at a time, and a listing that is slow never holds a caller."""
    models = tmp_path / "models"
    hf_folders.tiny_gpt2(models / "a")
    threads, gate = [], threading.Event()
    real = discover.inspect

    def watched(p, *a):
        threads.append(threading.current_thread().name)
        if p.name == "slow":
            gate.wait(60)
        return real(p, *a)
    monkeypatch.setattr(discover, "inspect", watched)
    cat = discover.Catalogue(models, tmp_path / "hub", refresh_s=0.0)
    assert [m.name for m in cat.models()] == ["a"]  # the first listing is waited for
    assert threads == ["tfviz-model-discovery"]
    hf_folders.tiny_gpt2(models / "slow")
    assert [m.name for m in cat.models()] == ["a"]  # the refresh is stuck on "slow": the last listing
    assert [m.name for m in cat.models()] == ["a"]
    stuck = cat._running
    assert stuck is not None and stuck.is_alive() and not gate.is_set()  # returned while it is stuck
    gate.set()
    cat.refresh(block=True)
    assert [m.name for m in cat.models(wait=0)] in (["a", "slow"], ["a"])
    cat.refresh(block=True, force=True)
    assert [m.name for m in cat.models(wait=0)] == ["a", "slow"]
    assert set(threads) == {"tfviz-model-discovery"}


def test_a_new_folder_is_listed_on_the_next_call(tmp_path):
    """Issue 30: a folder added to models/ (by an export, a copy, the CLI) is listed by the very
    next ``models()`` (the folder's own stat changed: it lists again and waits for that, at most
    ``CHANGE_WAIT_S``), not the one after; one removed is gone as soon."""
    models = tmp_path / "models"
    hf_folders.tiny_gpt2(models / "a")
    cat = discover.Catalogue(models, tmp_path / "hub", refresh_s=3600.0)  # no refresh by age
    assert [m.name for m in cat.models()] == ["a"]
    hf_folders.tiny_gpt2(models / "b")
    assert [m.name for m in cat.models()] == ["a", "b"]
    shutil.rmtree(models / "a")
    assert [m.name for m in cat.models()] == ["b"]
    assert [m.name for m in cat.models()] == ["b"]  # unchanged: no listing, the last one at once


def test_a_page_with_bad_folders_shows_one_line_each(tmp_path, monkeypatch):
    """AppTest: the Attention page, with a good local folder selected and malformed ones beside it
    in both places, renders without an exception; the sidebar lists each bad folder once, in one
    line with its reason; none of them can be selected."""
    from apptest_helpers import open_page

    src = tmp_path / "src"
    good = hf_folders.tiny_gpt2(src / "tiny-good")
    broken = {"deep-config": "config-deep-3000", "listed-type": "config-model-type-list",
              "lettered": "config-architectures-string", "cut-weights": "weights-truncated",
              "linked-out": "weights-link-out", "huge-index": "index-too-many-entries"}
    for name, case in broken.items():
        CASES[case][0](hf_folders.tiny_gpt2(src / name))
    models, hub = tmp_path / "models", tmp_path / "hub"
    models.mkdir()
    good = good.rename(models / good.name)
    for i, name in enumerate(broken):  # half in the models folder, half in the hub cache
        if i % 2:
            (src / name).rename(models / name)
        else:
            _as_cache(src / name, hub, name)
    (tmp_path / "checkpoints").mkdir()
    for k, v in {"TFVIZ_MODELS_DIR": models, "HF_HUB_CACHE": hub,
                 "TFVIZ_CHECKPOINT_DIR": tmp_path / "checkpoints"}.items():
        monkeypatch.setenv(k, str(v))
    at = open_page("attention", good, att_text="the cat sat on the mat")
    assert not at.exception and not at.error, [e.value for e in at.error]
    box = next(s for s in at.sidebar.selectbox if s.label == "Model")
    assert [o for o in box.options] == [next(o for o in box.options if o.startswith("tiny-good (local · GPT-2"))]
    bad = next(e for e in at.sidebar.expander if "cannot open" in e.label)
    assert bad.label == "6 local model folders cannot open"
    lines = [re.sub(r"\\(.)", r"\1", x) for x in bad.markdown[0].value.split("\n")]  # markdown unescaped
    assert len(lines) == 6
    for name, case in broken.items():
        line = next(x for x in lines if f"**{name} (local)**" in x or f"**t/{name} (hf-cache)**" in x)
        assert re.search(CASES[case][1], line), line
    assert at.get("plotly_chart"), "the page's charts are drawn"


def test_from_pretrained_turns_anything_unforeseen_into_a_model_folder_error(tmp_path, monkeypatch):
    from tfviz.interop import families

    folder = hf_folders.tiny_gpt2(tmp_path / "m")

    def broken(cls, cfg, w):
        raise KeyError("h.0.attn.c_attn.weight")
        yield
    monkeypatch.setattr(families.GPT2, "state_dict", classmethod(broken))
    with pytest.raises(ModelFolderError, match=r"cannot be opened as a model folder \(KeyError: "
                                               r"'h.0.attn.c_attn.weight'\)"):
        from_pretrained(folder)
