"""Issue 29, items 1 and 11, measured: a tokenizer that grows a text without bound, or backtracks.

    .venv/bin/python scripts/measure_tokenizer_bounds.py                  # this tree
    .venv/bin/python scripts/measure_tokenizer_bounds.py --repo /tmp/before   # e.g. `git archive` of main

Each case runs in its own process (a case that aborts cannot take this script with it), its
memory capped by ``--cap-gb`` (RLIMIT_AS, so a shared machine is not pushed into swap), and is
reported with its wall time, the child's peak RSS and how it ended:

  typed      the shipped ``lm`` weights with the normalizer Replace "a" -> "a" x 10,000 (the file a
             student uploads, 463 kB), loaded as the app loads a checkpoint, then 20,000 typed 'a's
             through ``explorer.prepare_text`` (what the Attention explorer does with a text area)
  panic      the same weights with the pre-tokenizer Split((a|aa)+$), then 31 'a's and '!'
  tokens     the Tokens page (AppTest, ``--repo``'s app.py) with a GPT-2 folder whose tokenizer.json
             has that normalizer, under TFVIZ_MODELS_DIR: each visit's time (first, then reruns)

Print: one line per case. Say the machine's load (printed) with any number you quote.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GROW = {"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 10000}
BACKTRACK = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}

WRITE = r"""
import json, sys
repo, out, part, rule = sys.argv[1:5]
sys.path.insert(0, repo)
from tfviz.train.checkpoint import load_checkpoint, save_checkpoint
c = load_checkpoint(repo + "/checkpoints/lm.safetensors")
data = json.loads(c.tokenizer.to_json())
data["tokenizer"][part] = json.loads(rule)
class AsWritten:  # the JSON as a student writes it (no tfviz Tokenizer is built from it here)
    def to_json(self):
        return json.dumps(data)
save_checkpoint(out, c.model, tokenizer=AsWritten(), task=c.task, train_config=c.train_config,
                history=c.history)
"""

READ = r"""
import sys, time
repo, path, text = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, repo)
from tfviz.train.checkpoint import load_checkpoint
from tfviz.analysis import explorer
t = time.perf_counter()
try:
    c = load_checkpoint(path)
except Exception as e:
    print(f"RESULT refused at load in {time.perf_counter() - t:.3f} s: {str(e)[:300]}")
    sys.exit(0)
print(f"loaded in {time.perf_counter() - t:.3f} s", flush=True)
t = time.perf_counter()
text = eval(text)
try:
    p = explorer.prepare_text(c.tokenizer, text, [], [], 256)
    print(f"RESULT encoded {len(text):,} characters in {time.perf_counter() - t:.2f} s: {len(p.ids)} ids")
except ValueError as e:
    print(f"RESULT refused in {time.perf_counter() - t:.3f} s: {str(e)[:300]}")
"""

PAGE = r"""
import os, sys, time
repo, folder = sys.argv[1], sys.argv[2]
sys.path.insert(0, repo)
sys.path.insert(0, repo + "/tests")
from apptest_helpers import open_page, messages
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(repo + "/app.py", default_timeout=600)
at.session_state["model_path"] = folder
at.run()
times = []
for i in range(4):
    t = time.perf_counter()
    at.switch_page("app_pages/tokens.py").run() if i == 0 else at.run()
    times.append(time.perf_counter() - t)
shown = [str(e.value)[:160] for e in at.exception] or messages(at).splitlines()[:3]
box = next(s for s in at.sidebar.selectbox if s.label == "Model")
notes = [e.label for e in at.sidebar.expander if "cannot open" in e.label]
print("RESULT Tokens page visits: " + ", ".join(f"{t:.2f} s" for t in times) + f"; model shown: "
      f"{box.value.split('/')[-1]!r}; sidebar: {notes}; messages: {shown}")
"""


def child(args: list[str], cap_gb: float, env=None) -> tuple[str, float, float, int]:
    """(its output, seconds, peak RSS MB, return code) of ``python -c`` args in a fresh process."""
    cap = int(cap_gb * 2**30)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, preexec_fn=limit, env={**os.environ, **(env or {}), "RUST_BACKTRACE": "0"})
    output = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)  # this child's own peak, not the largest of all children
    wall = time.perf_counter() - t
    rc = os.waitstatus_to_exitcode(status)
    out = "\n".join(line for line in output.splitlines()
                    if line.startswith("RESULT") or "Error" in line or "Exception" in line
                    or "memory allocation" in line or "panicked" in line)
    return out, wall, usage.ru_maxrss / 1024, rc


def bad_folder(root: Path, repo: Path) -> Path:
    sys.path.insert(0, str(repo / "tests"))
    import hf_folders

    folder = root / "models" / "grows"
    hf_folders.build("gpt2", folder)
    spec = json.loads((folder / "tokenizer.json").read_text())
    spec["normalizer"] = GROW
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=REPO, help="the tfviz tree to measure (default: this one)")
    ap.add_argument("--cap-gb", type=float, default=8.0, help="address-space cap of each case's process")
    ap.add_argument("--cases", default="typed,panic,tokens")
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    print(f"tree {repo}; load average {os.getloadavg()[0]:.1f} ({os.cpu_count()} CPUs)")
    tmp = Path(tempfile.mkdtemp(prefix="tfviz-tok-"))
    cases = args.cases.split(",")
    for case, part, rule, text in (("typed", "normalizer", GROW, "'a' * 20000"),
                                   ("panic", "pre_tokenizer", BACKTRACK, "'a' * 31 + '!'")):
        if case not in cases:
            continue
        path = tmp / f"{case}.safetensors"
        subprocess.run([sys.executable, "-c", WRITE, str(repo), str(path), part, json.dumps(rule)],
                       check=True, capture_output=True)
        out, wall, peak, rc = child([READ, str(repo), str(path), text], args.cap_gb)
        print(f"{case}: {wall:.2f} s wall, peak RSS {peak:,.0f} MB, exit {rc}: {out}")
    if "tokens" in cases:
        folder = bad_folder(tmp, repo)
        env = {"TFVIZ_MODELS_DIR": str(folder.parent), "HF_HUB_CACHE": str(tmp / "hub"),
               "TFVIZ_CHECKPOINT_DIR": str(repo / "checkpoints")}
        out, wall, peak, rc = child([PAGE, str(repo), str(folder)], args.cap_gb, env)
        print(f"tokens: {wall:.2f} s wall, peak RSS {peak:,.0f} MB, exit {rc}: {out}")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
