"""Measure the app on a GPT-2-small-shaped local model (issue 12 item 4): load, the Attention
explorer's first render of a 32-token sentence, head switches.

    .venv/bin/python scripts/measure_hf_app.py                 # builds the model in a temp folder
    .venv/bin/python scripts/measure_hf_app.py --folder /tmp/gpt2-random --keep

The model: ``transformers``' ``GPT2Config()`` defaults (12 layers, 12 heads, d_model 768, 1,024
positions, 124M parameters) with random weights, saved with ``save_pretrained`` (475 MiB of
float32 safetensors) next to a byte-level BPE ``tokenizer.json`` of 50,257 tokens trained here on
made-up words (<|endoftext|> at 50256, as GPT-2's) — no download, no real weights. It is never
committed: it goes to a temp folder (or ``--folder``).

Measured, each in this one process (the app runs in-process through Streamlit's AppTest, so the
times are the server's script runs, without a browser drawing the figures):
  1. ``tfviz.from_pretrained`` of the folder (torch already imported);
  2. the app's load: the Attention explorer opened on the folder picked in the model picker
     (``TFVIZ_MODELS_DIR`` points at its parent) — from_pretrained behind the progress bar, into
     the shared model cache, plus the first render of the page's default sentence;
  3. after the load, the explorer's first render of a 32-token sentence (typed into the text box:
     one recorded forward of every layer's attention, the heatmap of layer 0 head 0);
  4. head switches (the same sentence, another head: the recording is cached, the heatmap redrawn);
  5. every other page's first render on the same model (their default inputs), to show they
     work on a 124M model with a 50,257-token vocabulary (no target: reported as measured).
The machine's load average (``os.getloadavg``) is printed with the figures: other people's work
on a shared machine slows everything here.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TARGETS = {"load": 15.0, "first_render": 5.0, "head_switch": 1.0}  # seconds (issue 12)
SENTENCE = ("The teacher opened the model in the app and the whole class watched each head of "
            "every layer decide which earlier words to look at while it read the sentence slowly")


def gpt2_tokenizer(folder: Path) -> int:
    """A byte-level BPE of 50,257 tokens (GPT-2's size and layout) trained on made-up words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(0)
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + list("aeiou")
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(300_000)]
    words += SENTENCE.lower().split() * 50
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator((" ".join(words[i:i + 1000]) for i in range(0, len(words), 1000)),
                            trainers.BpeTrainer(vocab_size=50_256, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens(["<|endoftext|>"])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                            unk_token="<|endoftext|>").save_pretrained(str(folder))
    return tok.get_vocab_size()


def build(folder: Path) -> None:
    import torch
    import transformers as tf

    tf.utils.logging.disable_progress_bar()
    folder.mkdir(parents=True, exist_ok=True)
    vocab = gpt2_tokenizer(folder)
    torch.manual_seed(0)
    cfg = tf.GPT2Config()  # the defaults: GPT-2 small
    assert cfg.vocab_size == vocab, (cfg.vocab_size, vocab)
    tf.GPT2LMHeadModel(cfg).save_pretrained(str(folder))


def sentence_of(tok, n: int = 32) -> str:
    """A text that the folder's tokenizer reads as exactly ``n`` tokens."""
    ids = tok.encode(SENTENCE * 3).ids
    for cut in range(n, len(ids)):
        text = tok.decode(ids[:cut]).strip()
        if len(tok.encode(text).ids) == n:
            return text
    raise RuntimeError(f"no {n}-token prefix found")


def run_timed(at) -> float:
    t = time.perf_counter()
    at.run()
    seconds = time.perf_counter() - t
    if at.exception:
        raise RuntimeError([e.value for e in at.exception])
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, help="where the model folder is (built there when missing)")
    ap.add_argument("--keep", action="store_true", help="keep a folder this script built")
    ap.add_argument("--switches", type=int, default=6, help="head switches to time")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="tfviz-measure-"))
    folder = args.folder or tmp / "models" / "gpt2-random"
    built = not (folder / "config.json").is_file()
    if built:
        t = time.perf_counter()
        build(folder)
        print(f"built {folder.name}: GPT2Config() defaults, random weights ({time.perf_counter() - t:.0f} s)")
    os.environ["TFVIZ_MODELS_DIR"] = str(folder.parent)
    os.environ["TFVIZ_CHECKPOINT_DIR"] = str(tmp / "checkpoints")  # no other model to list or load
    os.environ["HF_HUB_CACHE"] = str(tmp / "hub")
    (tmp / "checkpoints").mkdir(exist_ok=True)
    try:
        import torch  # noqa: F401  (imported before any clock starts, as in a running server)
        from streamlit.testing.v1 import AppTest

        import tfviz

        loads = [os.getloadavg()[0]]
        t = time.perf_counter()
        ck = tfviz.from_pretrained(folder)
        lib_load = time.perf_counter() - t
        n_params = sum(p.numel() for p in ck.model.parameters())
        weights = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
        text = sentence_of(ck.tokenizer)
        del ck

        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
        at.session_state["model_path"] = str(folder.resolve())
        at.run()
        at.switch_page("app_pages/attention.py")
        app_load = run_timed(at)
        loads.append(os.getloadavg()[0])
        shown = [s.value for s in at.selectbox if s.label == "Model"]
        assert shown and Path(shown[0]) == folder.resolve(), f"the picker shows {shown}, not the folder"
        at.session_state["att_text"] = text
        first = run_timed(at)
        tokens = next(c.value for c in at.caption if c.value.startswith("Input — "))
        assert tokens.startswith("Input — 32 tokens"), tokens
        switches = []
        for h in range(1, args.switches + 1):
            at.session_state["att_head"] = h % 12
            switches.append(run_timed(at))
        loads.append(os.getloadavg()[0])
        pages = {}
        for page in ("positional", "masks", "generate", "tokens", "attention"):
            at.switch_page(f"app_pages/{page}.py")
            pages[page] = run_timed(at)
            assert not at.error, [e.value for e in at.error]
        loads.append(os.getloadavg()[0])
    finally:
        if built and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"\nmodel: {n_params / 1e6:.1f}M parameters, {weights / 2**20:.0f} MiB of safetensors; "
          f"{os.cpu_count()} CPU cores, torch threads {__import__('torch').get_num_threads()}")
    print(f"load average (1 min) during the run: {', '.join(f'{x:.1f}' for x in loads)}\n")
    rows = [("tfviz.from_pretrained (library)", lib_load, TARGETS["load"]),
            ("app: open the folder in the explorer (load + default sentence)", app_load, TARGETS["load"]),
            ("app: first render of a 32-token sentence after load", first, TARGETS["first_render"]),
            (f"app: head switch (median of {len(switches)}; max {max(switches):.2f} s)",
             statistics.median(switches), TARGETS["head_switch"])]
    for what, seconds, target in rows:
        print(f"{what:<72} {seconds:6.2f} s   target <= {target:g} s {'ok' if seconds <= target else 'OVER'}")
    for page, seconds in pages.items():
        print(f"{'app: first render of the ' + page + ' page (its default input)':<72} {seconds:6.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
