"""A run in the app stops after ``tfviz.limits.job_max_seconds()`` (``TFVIZ_JOB_MAX_MINUTES``, 30 by
default; it then saves a resumable checkpoint). This module says so before it happens:

* ``expectation`` — when a run is submitted: whether its steps can finish within the cap even on
  an idle core, at the pace its task's quick preset was *measured* at (``preset_timings.json``:
  CPU seconds per step on one core) scaled by the work of one step (``step_work``: batch ×
  positions × (6·parameters + 12·layers·d_model·positions)); if not, the estimate, the cap and
  the step it will stop near.
* ``outlook`` — while it runs: the live ETA against the time the cap leaves; when the run will
  hit the cap first, one sentence saying at which step it will stop.

UI-free: the Train page shows what these return.
"""
from __future__ import annotations

from ..model.families import kind_of, lacks, parameter_count


def _minutes(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:,.1f} h"
    return f"{seconds / 60:,.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def step_work(model_config, batch_size: int) -> float:
    """Floating-point operations of one training step, about (the PaLM / nanoGPT count, as
    ``analysis.cost.train_flops_per_token``, from the config alone): batch × positions tokens,
    each 6·N plus, for self-attention, 12·layers·d_model·positions."""
    pos = int(model_config.max_len)
    per_token = 6.0 * parameter_count(model_config)
    if not lacks(model_config, "self_attention"):
        per_token += 12.0 * model_config.n_layers * model_config.d_model * pos
    return float(batch_size) * pos * per_token


def idle_pace(task, model_config, train_config) -> tuple[float, str] | None:
    """(seconds per step on one idle core, about; where that number comes from) for training
    ``model_config`` with ``train_config`` on ``task``: the task's quick preset's measured CPU
    seconds per step, scaled by ``step_work``. None when nothing measured applies (no stored
    measurement, or a GPU run: the CPU's pace says nothing about it)."""
    from ..train import presets

    if train_config.device not in ("cpu", "auto") or (train_config.device == "auto" and _cuda()):
        return None
    try:
        pre = next(iter(presets.presets_for(task.name, kind=kind_of(model_config)).values()))
    except (ValueError, KeyError):
        return None
    name = pre.task if pre.kind == "transformer" else presets.name_of(pre)
    m = presets.timings().get(name) if name else None
    if not m or not m.get("steps"):
        return None
    base_model, base_train = presets.build_configs(task, pre.model, pre.train.to_dict(), pre.kind)
    measured = m["cpu_seconds"] / m["steps"]
    scale = step_work(model_config, train_config.batch_size) / step_work(base_model, base_train.batch_size)
    source = (f"the {name} preset's measured {measured:.3f} s a step on one idle core"
              + ("" if abs(scale - 1) < 1e-9 else f", × {scale:.3g} for this model's work per step"))
    return measured * scale, source


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def expectation(steps: int, pace: tuple[float, str] | None, cap_s: float | None) -> str | None:
    """When a run is submitted: one sentence when ``steps`` at ``pace`` (``idle_pace``) cannot
    finish within the cap ``cap_s`` (seconds; None: no cap) — the estimate, the cap, the step it
    will stop near. None when it fits, or when there is no cap or no measured pace."""
    if cap_s is None or pace is None:
        return None
    seconds, source = pace
    need = steps * seconds
    if need <= cap_s:
        return None
    return (f"{steps:,} steps would take about {_minutes(need)} even on an idle core ({source}), "
            f"but a run in the app stops after {_minutes(cap_s)} (TFVIZ_JOB_MAX_MINUTES): this one "
            f"will stop near step {int(cap_s / seconds):,} at best and save a resumable checkpoint. "
            f"Fewer steps finish; the command line (`python -m tfviz train`) has no cap.")


def outlook(step: int, total_steps: int, elapsed_s: float | None, eta_s: float | None,
            cap_s: float | None) -> str | None:
    """While a run trains: None when its ETA ends within the cap ``cap_s`` (seconds; None: no
    cap), else one sentence — the ETA against the time left, and the step it will stop near (at
    the pace so far) with a resumable checkpoint."""
    if cap_s is None or eta_s is None or elapsed_s is None or step <= 0:
        return None
    left = max(cap_s - elapsed_s, 0.0)
    if eta_s <= left:
        return None
    pace = eta_s / max(total_steps - step, 1)  # seconds a step, as the loop measures its ETA
    stop = min(total_steps, step + int(left / pace)) if pace > 0 else step
    return (f"ETA {_minutes(eta_s)} is past the {_minutes(cap_s)} cap on a run "
            f"(TFVIZ_JOB_MAX_MINUTES): at this pace it stops in about {_minutes(left)}, near step "
            f"{stop:,} of {total_steps:,}, and saves a resumable checkpoint.")
