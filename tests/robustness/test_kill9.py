"""kill -9 during checkpoint writes: a child process saves one checkpoint path over and over (every
save a new version, all weights = the version number) and SIGKILLs are aimed by the writer's own
progress, not by the clock, so the test asserts the same thing on a fast or a busy machine.

The child reports each step of every save through a pipe: the temp file opened, half of it
written, all of it written (before fsync), before the rename, after the rename, save returned.
In most rounds it also *stops* at one chosen step of one chosen save and the parent kills it
there, so every stage of an atomic write is hit on purpose. Other rounds kill it a random moment
after it reported a save under way (wherever that lands). After every kill:

- the checkpoint loads and is one whole version (never a mix of two);
- it is exactly the last version whose rename the writer reported, or the one being renamed
  (a kill between rename and report) — never older: the last complete save always survives;
- a kill before the rename leaves a temp file, which is never listed as a model.

Children are forked from a forkserver that imported torch once, so a round takes well under a
second on an idle machine; the only time limit is a generous deadline per wait.
"""
from __future__ import annotations

import builtins
import io
import multiprocessing as mp
import os
import random
import signal
import time

import torch

CFG = dict(vocab_size=64, d_model=128, n_heads=4, n_layers=2, max_len=64, pos="learned")  # ~1.7 MB a file
# The stages of one save, in order, as the writer reports them.
STAGES = ("opened", "half", "written", "renaming", "renamed", "saved")
BEFORE_RENAME = {"opened", "half", "written", "renaming"}  # a kill here leaves the temp file
ROUNDS_PER_STAGE = 2  # aimed kills: every stage twice (at the 1st and the 2nd save of a child)
RANDOM_ROUNDS = 6     # kills at a random moment after a save began
DEADLINE_S = 120      # per wait for the child's next report: generous for a loaded 2-core machine


def _model(version: int, model=None):
    """``model`` (built once) with every weight set to ``version``."""
    from tfviz import ModelConfig, Transformer

    model = model or Transformer(ModelConfig(**CFG))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(version))
    return model


class _Reporter:
    """In the child: report each stage of the current save; block forever at the target stage."""

    def __init__(self, conn, stop_at: tuple[int, str] | None) -> None:
        self.conn, self.stop_at, self.version = conn, stop_at, 0

    def __call__(self, stage: str) -> None:
        self.conn.send((stage, self.version))
        if self.stop_at == (self.version, stage):
            while True:  # the parent kills us here
                time.sleep(60)


class _TempFile:
    """A temp-file handle that reports 'opened', writes each chunk in two halves and reports
    'half' after the first half reached the OS (so a kill leaves a partly written file)."""

    def __init__(self, f, report) -> None:
        self._f, self._report, self._halved = f, report, False
        report("opened")

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        if self._halved or len(view) < 2:
            return self._f.write(view)
        mid = len(view) // 2
        n = self._f.write(view[:mid])
        self._f.flush()
        self._halved = True
        self._report("half")
        return n + self._f.write(view[mid:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

    def __getattr__(self, name):
        return getattr(self._f, name)


def writer(path: str, start: int, conn, stop_at: tuple[int, str] | None) -> None:
    """Child: save versions start, start + 1, … to ``path`` until killed, reporting every stage.
    The hooks wrap only what an atomic write must do (open a temp file, write, fsync, rename):
    they work whatever the library's internal names are."""
    from tfviz.train.checkpoint import save_checkpoint

    torch.set_num_threads(1)
    report = _Reporter(conn, stop_at)
    real_open, real_fsync, real_replace = builtins.open, os.fsync, os.replace

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return _TempFile(f, report) if str(file).endswith(".tmp") and "w" in mode else f

    def fsync(fd):
        if not os.path.isdir(f"/proc/self/fd/{fd}"):  # the temp file's fsync, not the folder's
            report("written")
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        report("renaming")
        real_replace(src, dst, *args, **kwargs)
        report("renamed")

    builtins.open = io.open = open_  # Path.open calls io.open
    os.fsync, os.replace = fsync, replace
    model, version = _model(start), start
    while True:
        report.version = version
        save_checkpoint(path, _model(version, model), extra={"version": version}, sidecar=False)
        report("saved")
        version += 1


def _next(conn, child) -> tuple[str, int]:
    if not conn.poll(DEADLINE_S):
        raise AssertionError(f"the writer sent nothing for {DEADLINE_S} s (alive: {child.is_alive()})")
    return conn.recv()


def _plan(rng: random.Random) -> list[tuple[int, str] | None]:
    """(save number within the child, stage) to stop at, or None for a random moment."""
    aimed = [(n, stage) for stage in STAGES for n in range(1, ROUNDS_PER_STAGE + 1)]
    rounds = aimed + [None] * RANDOM_ROUNDS
    rng.shuffle(rounds)
    return rounds


def test_kill_minus_9_during_writes_always_leaves_a_whole_checkpoint(tmp_path):
    from tfviz.classroom.disk import sweep_temp_files
    from tfviz.train.checkpoint import load_checkpoint, save_checkpoint
    from ui.models import _scan

    path = tmp_path / "run.safetensors"
    save_checkpoint(path, _model(0), extra={"version": 0}, sidecar=False)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "tfviz.train.checkpoint", "tfviz.model", __name__])
    rng = random.Random(1234)
    seen, stages_hit, temps_left, t_start = 0, set(), 0, time.perf_counter()
    for aim in _plan(rng):
        start = seen + 1
        parent_end, child_end = ctx.Pipe(duplex=False)
        stop_at = None if aim is None else (start + aim[0] - 1, aim[1])
        child = ctx.Process(target=writer, args=(str(path), start, child_end, stop_at), daemon=True)
        child.start()
        child_end.close()
        reports = []
        if stop_at is not None:  # wait until the writer stands at the chosen stage
            while not reports or reports[-1] != (stop_at[1], stop_at[0]):
                reports.append(_next(parent_end, child))
        else:  # a random moment once a save is under way
            reports.append(_next(parent_end, child))
            time.sleep(rng.uniform(0, 0.05))
        os.kill(child.pid, signal.SIGKILL)
        child.join(DEADLINE_S)
        assert child.exitcode == -signal.SIGKILL
        try:  # whatever else it reported before it died (small sends are atomic: whole or none)
            while parent_end.poll():
                reports.append(parent_end.recv())
        except EOFError:
            pass
        parent_end.close()

        renamed = [v for stage, v in reports if stage == "renamed"]
        renaming = [v for stage, v in reports if stage == "renaming"]
        last_stage, last_version = reports[-1]
        stages_hit.add(last_stage)
        ck = load_checkpoint(path)  # never raises: the last complete version is there
        version = ck.meta["extra"]["version"]
        for name, t in ck.model.state_dict().items():  # one whole version, never a mix
            assert bool((t == float(version)).all()), f"{name} is not all {version}"
        low = max(renamed, default=seen)
        high = max(renaming, default=low)  # killed between the rename and its report
        assert low <= version <= high, (f"after {reports[-3:]} the checkpoint holds version "
                                        f"{version}, expected {low}..{high}")
        if stop_at is not None:
            assert version == (stop_at[0] - 1 if stop_at[1] in BEFORE_RENAME else stop_at[0])
        temps = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
        if stop_at is not None and stop_at[1] in BEFORE_RENAME:
            assert temps, f"killed at {stop_at[1]!r}, yet no temp file was left"
        temps_left += bool(temps)
        assert [r.path for r in _scan(tmp_path, "trained")] == [str(path)]  # temps never listed
        seen = version
        if temps:  # the server's sweep (tfviz.classroom.disk) deletes what a killed writer left
            assert sorted(sweep_temp_files([tmp_path], older_than=0)) == sorted(temps)
            assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
            assert load_checkpoint(path).meta["extra"]["version"] == version
    took = time.perf_counter() - t_start
    rounds = len(STAGES) * ROUNDS_PER_STAGE + RANDOM_ROUNDS
    print(f"\nkill -9: {rounds} kills in {took:.1f} s at stages {sorted(stages_hit)}, {temps_left} "
          f"left a temp file; last complete version {seen}")
    assert set(STAGES) <= stages_hit  # every stage of a save was hit by a kill at least once
    # complete saves happened between the kills: at least those the aimed kills let through
    assert seen >= sum(n - (stage in BEFORE_RENAME) for stage in STAGES
                       for n in range(1, ROUNDS_PER_STAGE + 1))
