"""Command line: ``python -m tfviz train ...``, ``python -m tfviz info PATH``, ``python -m tfviz tasks``,
``python -m tfviz publish PATH`` (share a checkpoint with the class: tfviz.publish),
``python -m tfviz import FOLDER --out NAME`` (a Hugging Face model folder as a tfviz checkpoint),
``python -m tfviz export PATH --out FOLDER`` (a tfviz checkpoint as a GPT-2 / Llama / BERT folder).

    python -m tfviz train --task coref --arch decoder --pos rope --layers 2 --heads 4 \\
        --d-model 64 --steps 600 --batch-size 32 --lr 3e-3 --out checkpoints/coref
    python -m tfviz train --resume checkpoints/coref --steps 1200     # continue to step 1200
    torchrun --nproc_per_node=2 -m tfviz train ...                   # DistributedDataParallel
    python -m tfviz import models/gpt2 --out checkpoints/gpt2        # GPT-2 / BERT / Llama folder
    python -m tfviz export checkpoints/pos-learned --out models/mine # and back out (a folder)

Model flags left out take ModelConfig's defaults (vocab_size and max_len come from the task);
training flags left out take TrainConfig's (warmup defaults to min(100, steps / 10)).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from .device import cpu_count
from .interop import ModelFolderError, import_folder, local_max_bytes
from .interop.export import write_checkpoint
from .publish import publish
from .tasks import TASKS
from .train import TrainConfig, train
from .train.checkpoint import CheckpointError, load_checkpoint
from .train.distributed import init_distributed, shutdown_distributed
from .train.setup import as_task, model_config_for, new_model

MODEL_FLAGS = {  # flag -> (ModelConfig field, type)
    "arch": ("arch", str), "pos": ("pos", str), "layers": ("n_layers", int), "heads": ("n_heads", int),
    "kv_heads": ("n_kv_heads", int), "d_model": ("d_model", int), "d_ff": ("d_ff", int),
    "max_len": ("max_len", int), "norm": ("norm", str), "activation": ("activation", str),
    "dropout": ("dropout", float), "window": ("window", int),
}
TRAIN_FLAGS = {  # flag -> type (same name as the TrainConfig field)
    "steps": int, "batch_size": int, "lr": float, "weight_decay": float, "warmup": int, "schedule": str,
    "label_smoothing": float, "grad_clip": float, "seed": int, "device": str, "log_every": int,
    "eval_every": int, "eval_examples": int, "snapshot_every": int, "checkpoint_every": int,
    "patience": int, "min_delta": float,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfviz", description="Train and inspect small transformers.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a model on a generated task and save a checkpoint")
    t.add_argument("--task", help="task name (see `python -m tfviz tasks`)")
    t.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="task parameter, e.g. --task-arg n_train=2000 (repeatable)")
    for flag, (_, typ) in MODEL_FLAGS.items():
        t.add_argument("--" + flag.replace("_", "-"), type=typ, default=None)
    t.add_argument("--attn-only", action="store_true", default=None, help="attention-only blocks (no MLP)")
    t.add_argument("--tie", action="store_true", default=None, help="tie embedding and unembedding")
    for flag, typ in TRAIN_FLAGS.items():
        t.add_argument("--" + flag.replace("_", "-"), type=typ, default=None)
    t.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None, help="bf16 autocast on CUDA")
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training forward (worth it on a GPU)")
    t.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: (cores - 1) / processes, at most 4)")
    t.add_argument("--out", help="checkpoint path (NAME or NAME.safetensors)")
    t.add_argument("--resume", metavar="PATH", help="continue training from a checkpoint")
    t.add_argument("--quiet", action="store_true", help="no progress output")
    t.add_argument("--queue", action="store_true",
                   help="train through the run store of $TFVIZ_CHECKPOINT_DIR (like the app: a worker "
                        "process, the shared queue and quota; survives this command's end) and follow it")
    i = sub.add_parser("info", help="print a checkpoint's card")
    i.add_argument("path")
    sub.add_parser("tasks", help="list the available tasks")
    imp = sub.add_parser("import", help="convert a Hugging Face model folder (save_pretrained layout or a "
                                        "hub-cache entry; safetensors only) to a tfviz checkpoint")
    imp.add_argument("path", help="the folder holding config.json, or models--org--name in the cache")
    imp.add_argument("--out", required=True, help="checkpoint path (NAME or NAME.safetensors)")
    imp.add_argument("--max-mb", type=float, default=None,
                     help="largest weights to read, in MB (default: $TFVIZ_LOCAL_MODEL_MAX_MB or 2048)")
    imp.add_argument("--quiet", action="store_true", help="no progress output")
    exp = sub.add_parser("export", help="write a tfviz checkpoint as a Hugging Face model folder "
                                        "(GPT-2, Llama or BERT, whichever it matches; transformers "
                                        "is not needed), its task beside it (tfviz_task.json)")
    exp.add_argument("path", help="a tfviz checkpoint")
    exp.add_argument("--out", required=True, help="a new folder (save_pretrained layout, tokenizer.json)")
    pub = sub.add_parser("publish", help="validate a checkpoint and copy it to the class's published folder")
    pub.add_argument("path")
    pub.add_argument("--name", help="published name (default: the file's)")
    pub.add_argument("--dir", help="published folder (default: $TFVIZ_CHECKPOINT_DIR/published or "
                                   "checkpoints/published)")
    w = sub.add_parser("worker", help="train queued runs of a run store (started by the app's executor)")
    w.add_argument("--db", help="the run store (default: $TFVIZ_CHECKPOINT_DIR/runs/runs.sqlite)")
    w.add_argument("--idle", type=float, default=None,
                   help="exit after this many idle seconds (default: $TFVIZ_WORKER_IDLE_S or 600)")
    w.add_argument("--parent", type=int, default=None,
                   help="exit once idle after this process (the app server) has gone")
    w.add_argument("--once", action="store_true", help="train one run, then exit")
    return p


def _queue(task, model_config, cfg, out, resume, quiet: bool) -> int:
    """``train --queue``: the run goes to the run store (``tfviz.runs.manager``) and a worker trains
    it; this command follows its record (Ctrl-C asks it to stop, which saves a checkpoint)."""
    from pathlib import Path

    from . import limits
    from .paths import runs_db
    from .runs.executor import LocalProcessExecutor
    from .train.loop import Event
    from .runs.manager import RunManager
    from .runs.store import open_store, session_quota

    executor = LocalProcessExecutor(runs_db(), workers=limits.max_jobs())
    manager = RunManager(open_store(), executor, max_concurrent=limits.max_jobs(), quota=session_quota(),
                         torch_threads=max(1, (cpu_count() - 1) // limits.max_jobs()), supervise=True)
    try:
        run_id = manager.submit(model_config, task, cfg, checkpoint=out, resume=resume,
                                name=Path(str(out)).stem)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    progress, seen = Progress(cfg.steps, quiet=quiet), 0
    job = manager.get(run_id)
    if not quiet:
        print(f"queued as run {run_id} in {runs_db()}; checkpoint -> {out}")
    try:
        while (s := job.snapshot()).active:
            for m in s.history[seen:]:
                progress(Event("metrics", int(m["step"]), metrics=m))
            seen = len(s.history)
            time.sleep(0.5)
    except KeyboardInterrupt:
        manager.stop(run_id)
        job.wait(120)
        s = job.snapshot()
    progress.close()
    print(s.error or s.message)
    return 0 if s.state in ("done", "stopped") else 1


def _worker(args) -> int:
    """A training worker (``tfviz.runs.worker``): reads model folders for fine-tuning with
    ``tfviz.interop.from_pretrained`` (training sits below interop and is given it)."""
    from .interop import from_pretrained
    from .paths import runs_db
    from .runs.worker import serve

    serve(args.db or runs_db(), open_folder=from_pretrained, idle_s=args.idle, parent=args.parent,
          once=args.once)
    return 0


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


class Progress:
    """``\\r`` progress line on a terminal; one line per evaluation otherwise."""

    def __init__(self, total: int, stream=sys.stdout, quiet: bool = False):
        self.total, self.stream, self.quiet = total, stream, quiet
        self.tty = stream.isatty()

    def __call__(self, event) -> None:
        if self.quiet or event.kind != "metrics":
            return
        m = event.metrics
        if not self.tty and "val_loss" not in m:
            return
        done = int(20 * m["step"] / self.total)
        acc = f" val_acc {m['val_accuracy']:.3f}" if "val_accuracy" in m else ""
        line = (f"step {m['step']:>6}/{self.total} [{'#' * done}{'.' * (20 - done)}] loss {m['train_loss']:.4f}"
                f"{acc} lr {m['lr']:.2e} {m['tokens_per_s']:.0f} tok/s {m['elapsed']:.0f}s ETA {m['eta']:.0f}s")
        self.stream.write(("\r" + line + "\033[K") if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\n")


def _train(args, parser: argparse.ArgumentParser) -> int:
    given = {f: getattr(args, f) for f in TRAIN_FLAGS if getattr(args, f) is not None}
    for flag in ("bf16", "compile"):
        if getattr(args, flag) is not None:
            given[flag] = getattr(args, flag)
    d = init_distributed(given.get("device", "auto"))
    # Small models gain little from many threads and lose a lot when threads outnumber free
    # cores (measured: 10x slower with 2 threads on a busy 2-core machine): default to
    # (cores - 1) / processes, at most 4.
    given["num_threads"] = args.threads or max(1, min(4, (cpu_count() - 1) // d.world))
    resume = None
    try:
        if args.resume:
            resume = load_checkpoint(args.resume)
            task, model = resume.build_task(), resume.model
            cfg = (resume.train_config or TrainConfig()).replace(**given)
            out = args.out or resume.path
        else:
            if not args.task or not args.out:
                parser.error("train needs --task and --out (or --resume PATH)")
            task_args = dict(kv.split("=", 1) for kv in args.task_arg if "=" in kv)
            if len(task_args) != len(args.task_arg):
                parser.error("--task-arg takes KEY=VALUE")
            task_args = {k: _value(v) for k, v in task_args.items()}
            if args.arch and args.task in TASKS and "arch" in TASKS[args.task].defaults:
                task_args.setdefault("arch", args.arch)
            task = as_task(args.task, **task_args)
            fields = {field: getattr(args, flag) for flag, (field, _) in MODEL_FLAGS.items()
                      if getattr(args, flag) is not None}
            fields.update({k: True for k, flag in (("attn_only", "attn_only"), ("tie_embeddings", "tie"))
                           if getattr(args, flag)})
            mcfg = model_config_for(task, **fields)
            steps = given.get("steps", TrainConfig.steps)
            given.setdefault("warmup", min(TrainConfig.warmup, steps // 10))
            cfg = TrainConfig(**given)
            model = new_model(mcfg, cfg.seed)
            out = args.out
    except ValueError as e:
        shutdown_distributed()
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.queue:
        return _queue(task, model.config, cfg, out, args.resume if resume is not None else None, args.quiet)
    quiet = args.quiet or not d.main
    progress = Progress(cfg.steps, quiet=quiet)
    if not quiet:
        n = sum(p.numel() for p in model.parameters())
        print(f"training {model.config.arch} ({n:,} parameters) on {task.name} for {cfg.steps} steps"
              f"{f' from step {resume.step}' if resume else ''}"
              f"{f' on {d.world} processes' if d.active else ''}; checkpoint -> {out}")
    t0 = time.perf_counter()
    try:
        result = train(model, task, cfg, [progress], checkpoint=out, resume=resume)
    except ValueError as e:  # e.g. --device cuda without a GPU
        progress.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        progress.close()
        shutdown_distributed()
    if d.main and not args.quiet:
        f = result.final
        accs = ", ".join(f"{k.replace('_', ' ')} {f[k]:.3f}" for k in ("val_accuracy", "test_accuracy") if k in f)
        print(f"{result.status}: {result.step} steps in {time.perf_counter() - t0:.1f} s on {result.device}"
              f"{' — ' + accs if accs else ''}")
        if result.checkpoint:
            print(f"checkpoint: {result.checkpoint}")
    if not result.ok:
        print(f"error: {result.message}", file=sys.stderr)
        return 1
    return 0


def _import(args) -> int:
    shown = [-1]

    def progress(fraction: float, message: str) -> None:
        step = int(fraction * 10)
        if not args.quiet and step != shown[0]:
            shown[0] = step
            print(f"{fraction:4.0%} {message}", file=sys.stderr)

    t0 = time.perf_counter()
    try:
        max_bytes = None if args.max_mb is None else int(args.max_mb * 2**20)
        path = import_folder(args.path, args.out, max_bytes=max_bytes, progress=progress)
    except ValueError as e:  # ModelFolderError, CheckpointError: the message says why
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"imported in {time.perf_counter() - t0:.1f} s: {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(args, parser)
    if args.command == "info":
        try:  # a file on this machine: the local limit, not the upload limit
            print(load_checkpoint(args.path, max_bytes=max(local_max_bytes(), 200 * 2**20)).card())
        except (CheckpointError, ModelFolderError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args.command == "import":
        return _import(args)
    if args.command == "export":
        try:
            ck = load_checkpoint(args.path, max_bytes=max(local_max_bytes(), 200 * 2**20))
            out = write_checkpoint(ck, args.out)
        except ValueError as e:  # no family fits, an existing folder
            print(f"error: {e}", file=sys.stderr)
            return 1
        except OSError as e:  # anything else the disk says: one line, never a traceback
            print(f"error: cannot export to {args.out}: {e.strerror or e}", file=sys.stderr)
            return 1
        print(f"exported: {out}")
        return 0
    if args.command == "worker":
        return _worker(args)
    if args.command == "publish":
        try:
            print(f"published: {publish(args.path, args.dir, name=args.name)}")
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    for name, cls in TASKS.items():
        print(f"{name:10} {', '.join(cls.archs):28} {cls.metric}")
    return 0
