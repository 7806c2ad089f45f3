"""Every ```python block of README.md and of the docs pages its examples moved to (issue 41:
docs/library.md, docs/huggingface.md; every docs/*.md is read) runs as written (issue 25, item 10).

Each block is written to its own .py file and run with this interpreter in a fresh process (a
fresh namespace: a block must import and define everything it uses), from one scratch folder
shared by the blocks in reading order (README, library, Hugging Face, the other pages) — so a block may open a file an earlier block wrote (the
offline GPT-2 folder, a checkpoint), never use a name an earlier block defined. Nothing is written
into the repository: the working directory is a temp folder, every ``TFVIZ_*_DIR`` named in
``tfviz/paths.py`` points inside it (the shipped ``checkpoints/`` copied there, so a block may read
``checkpoints/…`` relative paths), the Hugging Face cache is an empty temp folder and offline.

A block that cannot run here says so on its first line, ``# not run: <why>`` (e.g. ``# not run:
needs a CUDA GPU``); it is skipped with that reason. Keep them few: a reader copies these blocks.
A failure names the block by its page, line and first line.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
# where the README's examples are, in reading order: a later page's block may open an earlier one's files
PAGES = [README, REPO / "docs" / "library.md", REPO / "docs" / "huggingface.md"]
PAGES += sorted(set((REPO / "docs").glob("*.md")) - set(PAGES))
NOT_RUN = "# not run:"  # a block's first line: skipped, with the rest of the line as the reason
BLOCK_TIMEOUT_S = 300   # a guard against a hang on a loaded 2-core machine, not a speed limit


@dataclass(frozen=True)
class Block:
    line: int   # the page's line of the first code line (after the ```python fence)
    code: str
    page: str = "README.md"

    @property
    def first(self) -> str:
        return next((s.strip() for s in self.code.splitlines() if s.strip()), "")

    @property
    def skip_reason(self) -> str | None:
        return self.first[len(NOT_RUN):].strip() or "marked not run" if self.first.startswith(NOT_RUN) else None

    def __str__(self) -> str:
        return f"{self.page} line {self.line} (```python block starting {self.first!r})"


def python_blocks(text: str, page: str = "README.md") -> list[Block]:
    """The ```python (or ```py) fenced blocks of a Markdown text, with their line numbers; an
    unclosed fence is an error (it would hide every block after it)."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*(\w*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                    and not lines[j].strip()[len(fence):].strip()), None)
        if end is None:
            raise ValueError(f"{page} line {i + 1}: a {fence} fence is never closed")
        if lang in ("python", "py"):
            body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:end]]
            blocks.append(Block(i + 2, "\n".join(body) + "\n", page))
        i = end + 1
    return blocks


BLOCKS = [b for p in PAGES for b in python_blocks(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))]


def _folder_variables() -> list[str]:
    """Every folder's environment variable, as tfviz/paths.py names them (one place for folders)."""
    return sorted(set(re.findall(r"\bTFVIZ_[A-Z0-9_]*DIR\b", (REPO / "tfviz" / "paths.py").read_text())))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("readme")
    shutil.copytree(REPO / "checkpoints", work / "checkpoints")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFVIZ_", "HF_"))}
    env.update({v: str(work / ("checkpoints" if v in ("TFVIZ_CHECKPOINT_DIR", "TFVIZ_ZOO_DIR")
                                 else v.removeprefix("TFVIZ_").lower()))
                for v in _folder_variables()})
    env.update(PYTHONPATH=str(REPO), HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MPLBACKEND="Agg",
               PYTHONDONTWRITEBYTECODE="1")
    before = _repo_changes()
    yield work, env
    after = _repo_changes()
    assert after <= before, f"README blocks wrote into the repository: {sorted(after - before)}"


def _repo_changes() -> set[str]:
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return set(out.stdout.splitlines()) if out.returncode == 0 else set()


def test_readme_blocks_found():
    """The parser sees every block (a README always has some), and few are marked not run."""
    assert len(BLOCKS) >= 4, [str(b) for b in BLOCKS]
    skipped = [str(b) for b in BLOCKS if b.skip_reason]
    assert len(skipped) <= max(2, len(BLOCKS) // 4), f"too many README blocks not run: {skipped}"


def test_parser_lines_and_marker():
    text = "# t\n\n```python\nx = 1\n```\n\n  ```py\n  # not run: needs a CUDA GPU\n  y = 2\n  ```\n```bash\nls\n```\n"
    a, b = python_blocks(text)
    assert (a.line, a.code, a.skip_reason) == (4, "x = 1\n", None)
    assert (b.line, b.skip_reason, b.code.splitlines()[1]) == (8, "needs a CUDA GPU", "y = 2")
    with pytest.raises(ValueError, match="line 1"):
        python_blocks("```python\nx = 1\n")


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{Path(b.page).stem}-line{b.line}" for b in BLOCKS])
def test_readme_block_runs(block: Block, scratch):
    if block.skip_reason:
        pytest.skip(f"{block}: {block.skip_reason}")
    work, env = scratch
    script = work / f"{Path(block.page).stem}_line{block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    try:
        done = subprocess.run([sys.executable, str(script)], cwd=work, env=env, capture_output=True,
                              text=True, timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block} ran past {BLOCK_TIMEOUT_S} s")
    if done.returncode != 0:
        pytest.fail(f"{block} failed (exit {done.returncode}); its code is in {script}:\n"
                    f"{done.stderr[-3000:]}", pytrace=False)


def test_the_readme_is_the_teachers_first_page():
    """Issue 41, item 5: what tfviz is, the two commands, then how to teach the lecture (the key,
    the class link, Present to the class, one measured follow figure); a page read in five minutes
    (at most 250 lines), the details on docs pages that exist."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250, len(lines)
    first = "\n".join(lines[:70])
    for must in ("bash scripts/app.sh", "bash scripts/test.sh", "## Teach the lecture", "TFVIZ_TEACHER_KEY",
                 "lesson?follow=1", "Present to the class", "p95"):
        assert must in first, must
    assert text.index("## Teach the lecture") < text.index("## What else is in it")
    assert re.search(r"about \d+-\d+ minutes", text)  # the suite's time, stated once up front
    for link in re.findall(r"\]\(((?:docs|checkpoints)/[^)#]+)", text):
        assert (REPO / link).is_file(), link
    for page in (REPO / "docs").glob("*.md"):
        for link in re.findall(r"\]\((?!https?:)([^)#\s]+)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"{page.name}: {link}"
