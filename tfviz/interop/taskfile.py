"""``tfviz_task.json``: the task a model was trained on, travelling with its Hugging Face folder.

transformers reads config.json, the weights and the tokenizer files, and ignores any other file;
tfviz writes this one beside them when it exports a trained model (``tfviz.interop.export``) and
``tfviz.from_pretrained`` reads it back, so a model reopened from its folder has its task again:
its examples (regenerated from the spec: the same ones, the same ids), the probes that need them
(the pronoun probe of a coref model, the induction probe) and a default text in its vocabulary.

    {"format": "tfviz-task", "format_version": 1,
     "task": {"name": "coref", "seed": 0, ...},        the spec (tfviz.tasks.make_task rebuilds it)
     "vocab_sha256": "...",                            the tokenizer the examples' ids belong to
     "metric": "...", "examples": [{"text": ...}],     for a person reading the folder (not read back)
     "tfviz_config": {...}, "tfviz_version": "..."}    the model as tfviz trained it

Read bounded (size, brackets, depth) and checked like a checkpoint's task (``tasks.check_spec``).
A file that does not fit the folder — another tokenizer, a spec this tfviz cannot rebuild — is
not an error: the model opens without a task, and a note says why.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..tasks import cached_task, check_spec
from ..tasks.common import MAX_TEXT_CHARS
from ..version import __version__
from .folder import ModelFolderError, file_in, read_json

TASK_FILE = "tfviz_task.json"
FORMAT, FORMAT_VERSION = "tfviz-task", 1
EXAMPLES = 5              # example texts written for a person reading the folder
EXAMPLE_CHARS = 500       # each cut to this many characters
MAX_BYTES = 256 * 2**10 + 12 * MAX_TEXT_CHARS  # the lm task's corpus, JSON-escaped, and the rest
MAX_CONTAINERS = 10_000


def vocab_digest(tokenizer) -> str:
    """A hash of the tokenizer's token -> id map (added tokens included): equal exactly when the
    same text gets the same ids from the same vocabulary."""
    vocab = sorted(tokenizer.backend.get_vocab(with_added_tokens=True).items())
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()


def record(spec: dict, tokenizer, model_config=None) -> dict:
    """The file's content for a model trained on the task ``spec`` with ``tokenizer``: a few of
    the task's validation examples are included as text (the spec alone rebuilds them all)."""
    spec = check_spec(spec)
    given = tokenizer if spec.get("tokenizer") == "given" else None
    task = cached_task(spec, given)
    examples = [{"text": e.text[:EXAMPLE_CHARS]} for e in task.examples("validation")[:EXAMPLES]]
    out = {"format": FORMAT, "format_version": FORMAT_VERSION,
           "about": "the tfviz task this model was trained on; transformers ignores this file, "
                    "tfviz.from_pretrained reads it to rebuild the task's examples and probes",
           "task": spec, "metric": getattr(type(task), "metric", ""), "examples": examples,
           "tfviz_version": __version__}
    if tokenizer is not None:
        out["vocab_sha256"] = vocab_digest(tokenizer)
    if model_config is not None:
        out["tfviz_config"] = model_config.to_dict()
    return out


def write(folder: Path, spec: dict, tokenizer, model_config=None) -> Path:
    from .. import storage

    path = folder / TASK_FILE
    storage.atomic_write(path, json.dumps(record(spec, tokenizer, model_config), indent=1,
                                          ensure_ascii=False).encode())
    return path


def read(root: Path, tokenizer) -> tuple[dict | None, dict, list[str]]:
    """(task spec or None, the file's content, notes) for the folder ``root`` whose tokenizer is
    ``tokenizer`` (None: the folder has none). No file: (None, {}, []). A file that cannot be
    used gives (None, {...}, [why]), as does one that cannot be read safely (too large, too deep,
    not JSON, a link out of the folder): the model itself opens either way."""
    try:
        if file_in(root, TASK_FILE) is None:
            return None, {}, []
        data = read_json(root, TASK_FILE, max_bytes=MAX_BYTES, max_containers=MAX_CONTAINERS)
    except ModelFolderError as e:
        return None, {}, [f"{TASK_FILE} cannot be read ({str(e).replace(str(root), '').strip(': ')[:200]}): "
                          "opened without a task"]
    if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
        return None, {}, [f"{TASK_FILE} is not a tfviz task file of format version {FORMAT_VERSION}: "
                          "opened without a task"]
    try:
        spec = check_spec(data.get("task"))
    except ValueError as e:
        return None, data, [f"{TASK_FILE}: its task cannot be rebuilt ({str(e)[:200]}): opened without it"]
    if tokenizer is None:
        return None, data, [f"{TASK_FILE} names the task {spec['name']!r}, but the folder has no "
                            "tokenizer.json to read its examples with: opened without it"]
    if data.get("vocab_sha256") != vocab_digest(tokenizer):
        return None, data, [f"{TASK_FILE} names the task {spec['name']!r}, but tokenizer.json is not the "
                            "tokenizer it was trained with (another vocabulary): opened without it"]
    return spec, data, [f"its tfviz task came with it ({TASK_FILE}: {spec['name']}): examples and probes"]


__all__ = ["TASK_FILE", "read", "record", "vocab_digest", "write"]
