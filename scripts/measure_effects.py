"""Time the Effects tab's head grid on a GPT-2-small-shaped model (issue 24): every one of the 144
heads switched off on a 32-token input, the next-token loss measured each time — the library call
the page makes (``tfviz.analysis.effects.head_effects``), on two torch threads.

    .venv/bin/python scripts/measure_effects.py                 # builds the model in a temp folder
    .venv/bin/python scripts/measure_effects.py --folder /tmp/gpt2-random --keep

The model is built as ``scripts/measure_hf_app.py`` builds it (``GPT2Config()`` defaults, random
weights, a 50,257-token byte-level BPE trained here on made-up words; never committed) and opened
with ``tfviz.from_pretrained``. Printed: the grid's time (the target is 30 s on 2 CPU cores), the
time of one plain forward for scale, and the machine's load average (others' work on a shared
machine slows everything here).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

TARGET_S = 30.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, help="where the model folder is (built there when missing)")
    ap.add_argument("--keep", action="store_true", help="keep a folder this script built")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    from measure_hf_app import build, sentence_of

    tmp = Path(tempfile.mkdtemp(prefix="tfviz-effects-"))
    folder = args.folder or tmp / "gpt2-random"
    try:
        if not (folder / "config.json").is_file():
            t = time.perf_counter()
            build(folder)
            print(f"built {folder.name}: GPT2Config() defaults, random weights ({time.perf_counter() - t:.0f} s)")
        import torch

        import tfviz
        from tfviz.analysis import effects as ef

        torch.set_num_threads(args.threads)
        ck = tfviz.from_pretrained(folder)
        model, tok = ck.model.eval(), ck.tokenizer
        ids = tok.encode_ids(sentence_of(tok, 32))
        assert len(ids) == 32
        x = torch.tensor([ids])
        with torch.no_grad():
            model(x)  # warm-up
            t, cpu = time.perf_counter(), time.process_time()
            model(x)
            forward, forward_cpu = time.perf_counter() - t, time.process_time() - cpu
        times = []
        for _ in range(args.repeats):
            load = os.getloadavg()[0]
            t, cpu = time.perf_counter(), time.process_time()
            df = ef.head_effects(model, ef.input_probe(model, None, ids))
            times.append(time.perf_counter() - t)
            cpu = time.process_time() - cpu
            print(f"12 x 12 grid: {times[-1]:.1f} s wall, {cpu:.1f} s CPU over {args.threads} threads "
                  f"(load average {load:.1f})")
        assert len(df) == 144
        print(f"one plain forward of 32 tokens: {forward * 1000:.0f} ms wall, {forward_cpu * 1000:.0f} ms CPU; "
              f"{args.threads} torch threads")
        print(f"best {min(times):.1f} s, target {TARGET_S:.0f} s: {'met' if min(times) <= TARGET_S else 'NOT met'}")
        return 0 if min(times) <= TARGET_S else 1
    finally:
        if not args.keep and not args.folder:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
