"""Real text with nothing downloaded: the Python standard library this process runs on.

Two corpora (``CORPORA``), built at run time from the stdlib's ``.py`` files (site-packages and the
test suites left out):

    stdlib-docs   every module, class and function docstring (English written by people),
                  ``ast.get_docstring(clean=True)``, at least ``MIN_DOC_CHARS`` long, each kept once
    stdlib-code   the source files themselves, each distinct file once

Deterministic for a given Python version: files in sorted order, and each file goes to one split
by a hash of its path inside the stdlib (``split_of``: about 90% train, 5% validation, 5% test), so
no test text is ever trained on and a file's text never straddles two splits. A missing or tiny
standard library raises one ``ValueError`` sentence.

    c = build("stdlib-docs")
    c.texts["train"], c.files["test"], c.describe()
"""
from __future__ import annotations

import ast
import functools
import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

CORPORA = ("stdlib-docs", "stdlib-code")
SPLITS = ("train", "validation", "test")
SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__",
                       "turtledemo"})
MIN_DOC_CHARS = 40
MAX_FILE_BYTES = 2_000_000  # a generated table, not prose or code a person wrote
MIN_CHARS = 20_000  # below this in the training split there is nothing to learn from
SEPARATOR = "\n\n"


@dataclass(frozen=True)
class Corpus:
    kind: str
    root: str
    python: str
    texts: dict[str, str]   # split -> the split's text, its pieces joined by SEPARATOR
    files: dict[str, int]   # split -> files that gave it text
    pieces: dict[str, int]  # split -> docstrings (stdlib-docs) or files (stdlib-code)

    def describe(self) -> str:
        sizes = ", ".join(f"{s} {len(self.texts[s]):,} characters from {self.files[s]:,} files"
                          for s in SPLITS)
        what = "docstrings" if self.kind == "stdlib-docs" else "source files"
        return (f"{self.kind}: the {what} of Python {self.python}'s standard library ({self.root}), "
                f"split by file: {sizes}")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(root: Path) -> list[Path]:
    """The stdlib's own .py files under ``root``, sorted by their path inside it."""
    if not root.is_dir():
        return []
    out = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if SKIP_DIRS.intersection(rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        try:
            if not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
                continue
        except OSError:
            continue
        out.append(path)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def split_of(rel: str) -> str:
    """The split a file belongs to, from a hash of its path inside the stdlib (stable across runs
    and machines): 90% train, 5% validation, 5% test."""
    bucket = int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % 100
    return "train" if bucket < 90 else "validation" if bucket < 95 else "test"


def docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of one file, in the order they appear."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= MIN_DOC_CHARS:
                out.append(doc.strip())
    return out


def build(kind: str = "stdlib-docs", root: str | Path | None = None, max_chars: int | None = None) -> Corpus:
    """The corpus ``kind`` read from ``root`` (default: this Python's stdlib). ``max_chars``: stop
    adding text to a split once it holds that many characters (a small slice for tests)."""
    if kind not in CORPORA:
        raise ValueError(f"corpus {kind!r} is not one of {', '.join(CORPORA)}")
    return _build(kind, str(stdlib_root() if root is None else root), max_chars)


@functools.lru_cache(maxsize=4)
def _build(kind: str, root: str, max_chars: int | None) -> Corpus:
    base = Path(root)
    parts: dict[str, list[str]] = {s: [] for s in SPLITS}
    files = {s: 0 for s in SPLITS}
    size = {s: 0 for s in SPLITS}
    seen: set[str] = set()
    for path in source_files(base):
        rel = path.relative_to(base).as_posix()
        split = split_of(rel)
        if max_chars is not None and size[split] >= max_chars:
            continue
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        pieces = docstrings(source) if kind == "stdlib-docs" else [source.strip()]
        kept = 0
        for piece in pieces:
            key = hashlib.sha256(piece.encode()).hexdigest()
            if not piece or key in seen:  # each text once (a docstring copied between modules)
                continue
            seen.add(key)
            parts[split].append(piece)
            size[split] += len(piece) + len(SEPARATOR)
            kept += 1
        files[split] += kept > 0
    texts = {s: SEPARATOR.join(parts[s]) for s in SPLITS}
    if len(texts["train"]) < min(MIN_CHARS, max_chars or MIN_CHARS) or not texts["validation"] or not texts["test"]:
        raise ValueError(f"the Python standard library at {root} is missing or too small for the "
                         f"{kind} corpus ({len(texts['train']):,} training characters from "
                         f"{files['train']} files); use a Python installed with its standard library, "
                         f"or paste a text instead")
    python = ".".join(map(str, sys.version_info[:3]))
    return Corpus(kind, root, python, texts, files, {s: len(parts[s]) for s in SPLITS})
