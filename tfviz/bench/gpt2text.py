"""python -m tfviz.bench gpt2text — GPT-2 small's shape trained on real text for a fixed time.

The corpus is the Python standard library (``tasks.realtext``, ``--corpus``: stdlib-code by
default, the larger of the two), a byte-level BPE trained on its training split; the model is
GPT-2 small's architecture (12 layers, 12 heads, d_model 768, learned positions, GELU, pre-norm,
tied embeddings; the vocabulary is the corpus tokenizer's, so fewer parameters than 124M when it
is smaller than GPT-2's 50,257). Configs come from ``build_configs`` as the Train page's form
builds them; ``tfviz.train.train`` runs the loop the page's workers run: bf16 autocast,
torch.compile, evaluation every ``--eval-every`` steps, attention snapshots of the probe (what the
page draws live), stopped ``--seconds`` after the first logged step (compilation not counted). Reported: tokens/s and MFU (the loop's
own figures), the train and validation loss curves, the held-out test loss, head scores
(previous-token, duplicate-token, induction) measured on the test split and on the repeated-token
probe at every snapshot and at the end, and a generation from a test prompt. Writes a text report
(``--out``) and its JSON beside it.
"""
from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from ..analysis.heads.probes import score_model
from ..device import device_name
from ..tasks import make_task
from ..train import new_model, train
from ..train.presets import build_configs

GPT2_SMALL = dict(arch="decoder", d_model=768, n_heads=12, n_layers=12, d_ff=3072, pos="learned",
                  norm="pre", activation="gelu", dropout=0.0, tie_embeddings=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfviz.bench gpt2text", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="stdlib-code", choices=["stdlib-code", "stdlib-docs"])
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--block", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seconds", type=float, default=240.0)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--snapshot-every", type=int, default=100)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--corpus-chars", type=int, default=None, help="cap each split (a quick check)")
    p.add_argument("--out", default="docs/bench/gpt2_text_cuda.txt")
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    lines: list[str] = []

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:  # the report is rewritten at every line: a time box cuts it, never loses it
        print(text, flush=True)
        lines.append(text)
        out_path.write_text("\n".join(lines) + "\n")

    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    say(f"# python -m tfviz.bench gpt2text {' '.join(argv or [])}")
    say(f"device: {device_name(torch.device('cuda')) if cuda else 'CPU'}; torch {torch.__version__}; {when}")
    t0 = time.perf_counter()
    task = make_task("lm", corpus=args.corpus, tokenizer="bpe", vocab_size=args.vocab, block=args.block,
                     **({} if args.corpus_chars is None else {"corpus_chars": args.corpus_chars}))
    corpus = task.real_corpus()
    sizes = {s: len(task.examples(s)) for s in ("train", "validation", "test")}
    say(corpus.describe())
    say(f"task built in {time.perf_counter() - t0:.1f} s: BPE vocabulary {task.tokenizer.vocab_size:,}; "
        f"windows of {args.block} tokens: train {sizes['train']:,} ({sizes['train'] * args.block:,} tokens), "
        f"validation {sizes['validation']:,}, test {sizes['test']:,}")
    train_fields = dict(steps=1_000_000, batch_size=args.batch, lr=args.lr, warmup=100, eval_every=args.eval_every,
                        eval_examples=128, snapshot_every=args.snapshot_every, checkpoint_every=0, log_every=20,
                        bf16=True if cuda else None, compile=cuda and not args.no_compile,
                        device="cuda" if cuda else "cpu")
    mcfg, tcfg = build_configs(task, {**GPT2_SMALL, "max_len": args.block}, train_fields)
    model = new_model(mcfg, tcfg.seed)
    params = sum(q.numel() for q in model.parameters())
    say(f"model: GPT-2 small's shape, {params / 1e6:.1f}M parameters (vocabulary {mcfg.vocab_size:,}); "
        f"batch {args.batch} x {args.block}; bf16 {tcfg.bf16}; compile {tcfg.compile}; lr {args.lr}")
    metrics, snapshots = [], []
    deadline = [None]  # the clock starts at the first logged step: compilation is not counted

    def watch(event) -> None:
        if event.kind == "metrics":
            m = {k: v for k, v in event.metrics.items() if isinstance(v, (int, float))}
            metrics.append(m)
            if deadline[0] is None:
                deadline[0] = time.perf_counter() + args.seconds
            if "val_loss" in m:
                print(f"  step {m['step']:>6}  train {m.get('train_loss', float('nan')):.3f}  "
                      f"val {m['val_loss']:.3f}  {m.get('tokens_per_s', 0):,.0f} tok/s  "
                      f"MFU {m.get('mfu', float('nan')):.1%}", flush=True)
        elif event.kind == "snapshot":
            snapshots.append(getattr(event, "step", None))

    def stop() -> bool:
        return deadline[0] is not None and time.perf_counter() > deadline[0]

    result = train(model, task, tcfg, [watch], stop=stop)
    logged = [m for m in metrics if "tokens_per_s" in m]
    steady = logged[len(logged) // 3:] or logged  # after compilation and warm-up
    tps = sorted(m["tokens_per_s"] for m in steady)
    mfus = sorted(m["mfu"] for m in steady if "mfu" in m)
    evals = [(m["step"], round(m["val_loss"], 4)) for m in metrics if "val_loss" in m]
    train_curve = [(m["step"], round(m["train_loss"], 4)) for m in logged if "train_loss" in m]
    say(f"trained {result.step:,} steps in {result.elapsed:.0f} s ({result.status}): "
        f"{result.step * args.batch * args.block:,} tokens; "
        f"steady tokens/s median {tps[len(tps) // 2] if tps else float('nan'):,.0f}; "
        f"MFU median {mfus[len(mfus) // 2] if mfus else float('nan'):.1%} (the loop's own figure)")
    say(f"validation loss (step, nats/token): {evals}")
    say(f"train loss every {max(1, len(train_curve) // 20)}th log: {train_curve[::max(1, len(train_curve) // 20)]}")
    test = task.evaluate(model, "test", max_examples=256, batch_size=8)
    say(f"held-out test files: loss {test.get('loss', float('nan')):.3f} nats/token, "
        f"next-token accuracy {test.get('accuracy', float('nan')):.3f}")
    model.eval()
    # 2 windows: every head's [pos, pos] pattern is recorded (12 x 12 x 1024^2 floats a window)
    scores = score_model(model, task, split="test", n_examples=2, half=32)
    cols = [c for c in ("prev_token", "duplicate_token", "induction") if c in scores.columns]
    for c in cols:
        top = scores.sort_values(c, ascending=False).head(3)
        say(f"top heads by {c} (held-out test files / repeated-token probe): "
            + ", ".join(f"L{int(r.layer)}H{int(r.head)} {getattr(r, c):.2f}" for r in top.itertuples()))
    n_prompt = min(48, args.block // 4)
    prompt_ids = task.examples("test")[0].tokens[:n_prompt]
    x = torch.tensor([prompt_ids], device=next(model.parameters()).device)
    out = model.generate(x, min(160, args.block - n_prompt), temperature=0.8, top_k=40, generator=torch.Generator(device=x.device).manual_seed(0))
    say("generation (temperature 0.8, top-k 40) from a held-out prompt:")
    say("  PROMPT: " + repr(task.tokenizer.decode(prompt_ids)))
    say("  MODEL:  " + repr(task.tokenizer.decode(out[0, len(prompt_ids):].tolist())))
    say(f"attention snapshots taken while it trained (what the Train page draws live): {len(snapshots)}")
    out_path.with_suffix(".json").write_text(json.dumps(dict(
        metrics=metrics, evals=evals, test=test, params=params, steps=result.step,
        elapsed_s=result.elapsed, scores=scores.to_dict(orient="records")), default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
