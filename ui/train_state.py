"""Streamlit-side helpers of the Train page: the form's state (filled from presets), turning it
into configs, naming runs, and describing a job's progress. The training itself runs in worker
processes of the run store (``tfviz.runs``: ``RunManager``, ``ui.jobs``) that never touch Streamlit;
everything here only reads snapshots."""
from __future__ import annotations

import json
import re
import threading
import time

import streamlit as st

from tfviz.model.hooks import parse_hook_name
from tfviz.train.presets import CPU, QUICK, build_configs, kinds_for, presets_for

from .jobs import job_manager, my_jobs, trained_dir
from .widgets import choice

P = "train_"  # widget key prefix (session_state is shared by every page)
MODEL_KEYS = ("arch", "pos", "d_model", "n_layers", "n_heads", "n_kv_heads", "window", "attn_only")
RECURRENT_KEYS = ("arch", "d_model", "d_hidden", "n_layers")  # + "attention" (rnn_attention)
RNN_ATTENTIONS = {"none": "none (one state)", "additive": "additive (Bahdanau)"}
TRAIN_KEYS = ("steps", "batch_size", "lr", "warmup", "seed")
ATTN_KINDS = ("MHA", "GQA", "MQA")


def trainable_tasks() -> list[str]:
    """The tasks the Train page offers: those with a preset (the form starts from one)."""
    from tfviz.tasks import TASKS
    from tfviz.train.presets import QUICK

    return [t for t in TASKS if t in QUICK]


@st.cache_resource
def cuda_available() -> bool:
    """Whether runs train on a CUDA GPU (the form then offers the GPU presets): this machine's,
    or on a Ray cluster (``TFVIZ_RAY_ADDRESS``) whether each run gets one of its GPUs."""
    from tfviz import limits

    if limits.ray_address():
        return bool(job_manager().executor.gpus)
    from tfviz.device import cuda_available

    return cuda_available()


def preset_task(pre):
    """The preset's task, shared by the server (built once, read-only: jobs may share it)."""
    from tfviz.tasks import cached_task

    with st.spinner("Generating the task's examples…"):
        return cached_task({"name": pre.task, **pre.task_params})


@st.cache_resource(max_entries=16, show_spinner=False)
def _preparing(spec_json: str, task_id: int, _task) -> threading.Thread:
    # keyed by the task object too: a task evicted from tasks.cached_task's bounded cache is a new
    # object, and a thread that built the old one must not stand for it
    thread = threading.Thread(target=_task.examples, args=("train",), daemon=True,
                              name=f"tfviz-prepare-{_task.name}")
    thread.start()
    return thread


def prepare(pre) -> threading.Thread:
    """Generate the preset task's examples in a background thread (once per server and task
    object) while the student reads the form, so that Start goes straight to the first step:
    building the coref task took 8.5 s at load average 12, all of it before the first loss point.
    A Start pressed sooner waits for the same build (tasks build once, under a lock). The run
    store's idle workers are asked to build it too (they train it, in their own processes)."""
    from tfviz.tasks import cached_task
    from tfviz.runs.store import StoreUnavailable

    spec = {"name": pre.task, **pre.task_params}
    try:
        job_manager().prepare(spec)
    except StoreUnavailable:
        pass  # only a hint: the runs panel says what is wrong with the store
    task = cached_task(spec)  # the very task preset_task returns
    return _preparing(json.dumps(spec, sort_keys=True), id(task), task)


FORM_KEYS = ("task", "kind", "preset", "arch", "pos", "d_model", "n_layers", "n_heads", "attn_kind",
             "n_kv_heads", "window", "attn_only", "d_hidden", "rnn_attention", "steps", "batch_size", "lr", "warmup",
             "seed", "name", "device", "compile")
DEVICES = {"cuda": "GPU", "cpu": "CPU"}  # the Train page's choice when a CUDA GPU is there


def preset_values(task: str, label: str = CPU, kind: str = "transformer") -> dict:
    """Every form field filled from ``task``'s preset ``label`` for a model ``kind`` (the kind's
    first preset if that one is not offered; a transformer if the kind cannot train on the task).
    A recurrent preset leaves the transformer's fields at the task's transformer preset (hidden,
    but valid when the kind is switched back)."""
    kind = kind if kind in kinds_for(task) else "transformer"
    offered = presets_for(task, cuda_available(), kind)
    label = label if label in offered else next(iter(offered))
    m, t = offered[label].model, offered[label].train
    tm = m if kind == "transformer" else QUICK[task].model
    return dict(task=task, kind=kind, preset=label, arch=m["arch"], pos=tm["pos"],
                d_model=m["d_model"], n_layers=m["n_layers"], n_heads=tm["n_heads"], attn_kind="MHA",
                n_kv_heads=tm["n_heads"], window=tm.get("window") or 0,  # MHA: a K/V head per head
                attn_only=tm.get("attn_only", False), d_hidden=m.get("d_hidden") or m["d_model"],
                rnn_attention=m.get("attention", "none"), steps=t.steps, batch_size=t.batch_size,
                lr=t.lr, warmup=t.warmup, seed=t.seed,
                name=f"{task}-{tm['pos'] if kind == 'transformer' else kind}-{time.strftime('%H%M%S')}",
                device="cuda" if cuda_available() else "cpu", compile=t.compile)


# The form's one copy of its values is FORM (session state, kept across pages). Every run writes
# each field's widget state from it before the widget is drawn, so the browser is told every
# field's value on every run; a field's change goes back into FORM by its on_change callback
# (``commit``), a preset's by ``apply_preset``; Start trains FORM. Before, the widgets took their
# value from session state only where Streamlit had dropped it: a run that drew them without a
# value (the charts' rerun in a new tab, ``ui.figures.charts_later``) left the browser showing
# each at its own default (task lm, positions none, d_model 2, ...) while the server held the
# preset, and a Start trained neither (issue 30).
FORM = "_train_form"
# A preset (or a reopened session's last run) just refilled the form, and the browser may still
# show, and send back, the values from before: PENDING until a request carries the refilled
# form's name (each refill gets a new one, ``_refilled``), BEFORE the values before the refill. A
# request that still carries the old name is stale: its fields' "changes" back to their values
# from before are not a student's edits (dropped), and a Start pressed with it is refused.
PENDING, BEFORE, STALE = "_train_pending", "_train_before", "_train_stale"
REFUSAL = "_train_refusal"  # (message, the form's values it was about): shown until a field changes
LIMITS = "_train_limits"  # field -> (label, low, high, above): the number boxes this run drew


def form(default_task: str = "coref") -> dict:
    """The form's values (``FORM``). A new session starts from its last run's settings (a reload
    or a reopened ``/train?sid=…`` shows what was trained last, and Start trains that again),
    else from ``default_task``'s preset."""
    ss = st.session_state
    if FORM not in ss:
        ss[FORM] = last_run_values() or preset_values(default_task)
        _refilled({})
    return ss[FORM]


def _refilled(before: dict) -> None:
    """The form was just refilled from a preset or a run; ``before``: its values until then."""
    f = form()
    if f["name"] == before.get("name"):  # the browser's name tells its form from the new one
        f["name"] = f"{f['name']}-b"
    st.session_state[PENDING], st.session_state[BEFORE] = True, before


def _stale_request() -> bool:
    """This request came from a browser that had not drawn the refilled form yet (see PENDING)."""
    ss = st.session_state
    before = ss.get(BEFORE, {}) if ss.get(PENDING) else {}
    return "name" in before and ss.get(P + "name") == before["name"] != form()["name"]


def restore() -> None:
    """Before the widgets are drawn, on every run: each field's widget state from the form's
    values (see ``FORM``). The widgets take their value from session state alone (no
    ``value=``/``index=``)."""
    ss, f = st.session_state, form()
    ss[STALE] = _stale_request()  # a Start in this request is refused (``start_button``)
    if ss.get(PENDING) and ss.get(P + "name") == f["name"]:
        ss.pop(PENDING)  # the browser has drawn the refilled form
    kv = {"MHA": f["n_heads"], "MQA": 1}.get(f["attn_kind"])
    if kv is not None:  # the K/V heads box shows the count MHA / MQA trains with
        f["n_kv_heads"] = kv
    for k in FORM_KEYS:
        ss[P + k] = f[k]
    ss[LIMITS] = {}


def _stale(key: str, value) -> bool:
    """A field's change that is the browser's value from before the last refill (see PENDING)."""
    return _stale_request() and value == st.session_state[BEFORE].get(key)


def commit(key: str) -> None:
    """on_change of a field: its new value into the form."""
    value = st.session_state[P + key]
    if not _stale(key, value):
        form()[key] = value


def current_preset():
    f = form()
    return presets_for(f["task"], cuda_available(), f.setdefault("kind", "transformer"))[f["preset"]]


def apply_preset(key: str = "task") -> None:
    """on_change of task / model type / preset: every other field from the preset (a callback runs
    before the rerun, so the widgets are drawn with the new values)."""
    ss, f = st.session_state, form()
    value = ss[P + key]
    if _stale(key, value):
        return
    before = dict(f)
    f[key] = value
    f.update(preset_values(f["task"], f["preset"], f["kind"]))
    _refilled(before)


def last_run_values() -> dict | None:
    """The form as it was for this session's newest run that the form can show again, or None."""
    for job in reversed(my_jobs()):
        if (values := run_values(job)) is not None:
            return values
    return None


def run_values(job) -> dict | None:
    """Every form field as ``job`` was trained (a fresh name), or None for a run the form cannot
    start again (a fine-tuned import, a task or a kind without a preset). The hidden settings
    (evaluation, snapshots, the task's size) come from the preset whose own match the run's."""
    from tfviz.model.families import kind_of

    cfg, tc, spec = job.spec.get("model_config"), job.spec.get("train_config"), job.spec.get("task")
    try:
        task, kind = spec["name"], kind_of(cfg)
        if task not in trainable_tasks() or kind not in kinds_for(task):
            return None
    except (KeyError, TypeError, ValueError):
        return None
    offered = presets_for(task, cuda_available(), kind)
    hidden = ("eval_every", "eval_examples", "patience", "log_every", "checkpoint_every")

    def matches(pre) -> int:
        same_task = all(spec.get(k) == v for k, v in pre.task_params.items())
        return same_task * (1 + sum(getattr(pre.train, k) == getattr(tc, k) for k in hidden))

    label = max(offered, key=lambda name: matches(offered[name]))  # the first of equals
    v = preset_values(task, label, kind)
    v.update(arch=cfg.arch, d_model=cfg.d_model, n_layers=cfg.n_layers, steps=tc.steps,
             batch_size=tc.batch_size, lr=tc.lr, warmup=tc.warmup, seed=tc.seed, compile=tc.compile)
    if kind == "transformer":
        v.update(pos=cfg.pos, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, window=cfg.window or 0,
                 attn_only=cfg.attn_only, attn_kind=attention_kind(cfg.n_heads, cfg.n_kv_heads))
        v["shape"] = run_shape(cfg, offered[label])  # where its hidden settings (norm, ...) came from
    else:
        v.update(d_hidden=cfg.d_hidden, rnn_attention=cfg.attention)
    if tc.device in DEVICES:
        v["device"] = tc.device
    return v


def run_shape(cfg, pre) -> str:
    """The "Architecture shape" a run's config was trained as: "tfviz (any setting)" when the
    settings the form does not show (norm, activation, biases, ...) are the preset ``pre``'s own;
    else the family it is exactly a model of (those settings come from that shape at Start)."""
    import dataclasses

    from tfviz.interop.export import family_for
    from tfviz.model import ModelConfig

    base = {**{x.name: x.default for x in dataclasses.fields(ModelConfig)}, **pre.model}
    if all(getattr(cfg, k, None) == base.get(k) for k in HIDDEN):
        return ANY
    try:
        adapter = family_for(cfg)
    except ValueError:
        return ANY
    label = getattr(adapter, "shape_label", None)
    return label if label in _shapes() else ANY


def attention_kind(n_heads: int, n_kv_heads: int) -> str:
    return "MHA" if n_kv_heads == n_heads else "MQA" if n_kv_heads == 1 else "GQA"


def configs_from_form(task):
    """(model config, TrainConfig) from the form's values (what its fields show): a transformer's
    ModelConfig or a recurrent kind's RecurrentConfig; ValueError with the configs' own message."""
    f = form()
    kind = f["kind"]
    if kind == "transformer":
        model = {k: f[k] for k in MODEL_KEYS}
        if f["attn_kind"] == "GQA" and model["n_kv_heads"] in (1, model["n_heads"]):  # MQA / MHA
            raise ValueError(f"GQA shares each K/V head between a group of query heads: set K/V heads "
                             f"between 1 and {model['n_heads']} (exclusive), dividing the heads")
        model = shaped_fields(model)  # the "Architecture shape": GPT-2-shaped, ... (issue 30)
    else:  # the transformer-only fields are hidden and not used
        model = {k: f[k] for k in RECURRENT_KEYS}
        model["attention"] = f["rnn_attention"]
    pre = current_preset()
    train = {**pre.train.to_dict(), **{k: f[k] for k in TRAIN_KEYS}}
    if cuda_available():  # the device choice and the compile switch exist only then
        train.update({k: f[k] for k in ("device", "compile")})
    train["snapshot_every"] = max(1, train["steps"] // 20)
    train["eval_every"] = max(1, min(train["eval_every"], train["steps"] // 4 or 1))
    return build_configs(task, model, train, kind)


def problems() -> list[str]:
    """Each number box (drawn this run) whose value is outside its range, as a sentence naming the
    field and the range: the boxes have no min/max of their own, which turned a field red and
    left Start doing nothing, without a word."""
    f, out = form(), []
    for key, (label, lo, hi, above) in st.session_state.get(LIMITS, {}).items():
        v = f.get(key)
        low = f"above {_num(lo)}" if above else f"from {_num(lo)}"
        if v is None or not ((lo < v) if above else (lo <= v)) or v > hi:
            out.append(f"**{label}** must be {low} {'and at most' if above else 'to'} {_num(hi)}"
                       f" (it is {'empty' if v is None else _num(v)}).")
    return out


def _num(x) -> str:
    """1,000,000 / 0.003 / -1 / 1e+20, as a student typed them."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        x = int(x)
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def start_button(pre):
    """The Start button and, beside it, why a press was refused: a field out of range, a setting
    the configs refuse, the server's limits, or a form the browser had not redrawn yet (see
    PENDING). A refusal stays until a field changes. -> (task, configs, job id) of a started run,
    or None."""
    ss, f = st.session_state, form()
    stale, bad = ss.pop(STALE, False), problems()
    started = None
    if st.button("Start training", type="primary", key=P + "start"):
        ss.pop(REFUSAL, None)
        if stale:
            why = ("the form was being refilled from the preset when Start was pressed; it now shows "
                   "what Start trains: check it and press Start again")
        elif bad:
            why = None  # said below, field by field
        else:
            why = None
            try:  # a bad setting, or beyond the server's limits (memory, disk, jobs per session)
                task = preset_task(pre)
                configs = configs_from_form(task)
                started = task, configs, submit(task, *configs, f["name"])
            except ValueError as e:
                why = str(e)
        if why:
            ss[REFUSAL] = (f"Not started: {why}", dict(f))
        if bad:
            st.error("Not started: " + " ".join(bad))
    elif bad:
        st.error("Start trains once these are fixed: " + " ".join(bad))
    refusal = ss.get(REFUSAL)
    if refusal is not None and refusal[1] == f:
        st.error(refusal[0])
    else:
        ss.pop(REFUSAL, None)  # a field changed since: the message no longer applies
    return started


def unique_name(name: str) -> str:
    """A safe file stem not used by another checkpoint or job of this session."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", name.strip())[:60].strip("._") or "model"
    taken = {p.stem for p in trained_dir().glob("*.safetensors")} | {j.name for j in my_jobs()}
    out, i = stem, 2
    while out in taken:
        out, i = f"{stem}-{i}", i + 1
    return out


def submit(task, model_config, train_config, name: str, init: str | None = None) -> str:
    """Start a job of this session; ValueError (JobLimitError, BudgetError, QuotaError) when the
    server's limits refuse it, with the reason. ``init``: fine-tune the model of that folder
    (``ui.finetune``; ``model_config`` is its config, for the estimates). Its checkpoint's
    estimate is reserved in the disk ledger as it is queued (``tfviz.runs.store``)."""
    from ui.session import client_id, session_id

    name = unique_name(name)
    return job_manager().submit(model_config, task, train_config, owner=session_id(), name=name,
                                checkpoint=trained_dir() / f"{name}.safetensors", init=init,
                                client=client_id())


def cap_note(task, model_config, train_config) -> str | None:
    """Said when a run is started: its steps cannot finish before the server's job time cap
    (``tfviz.runs.timecap``), or None."""
    from tfviz.runs.timecap import expectation, idle_pace

    return expectation(train_config.steps, idle_pace(task, model_config, train_config),
                       job_manager().max_seconds)


# ------------------------------------------------------------------------------ job display
def open_in(job) -> tuple[str, str]:
    """(page, its name) where a finished run opens: the Attention explorer, or for a model without
    self-attention (a recurrent network) the Tokens & embeddings page (its learned embeddings),
    since every attention page would only say it has no heads."""
    from tfviz.model.families import lacks

    config = job.spec.get("model_config")  # None: a fine-tuned imported decoder (a transformer)
    if config is not None and lacks(config, "self_attention"):
        return "app_pages/tokens.py", "Tokens & embeddings"
    return "app_pages/attention.py", "the Attention explorer"


def status(snap) -> str:
    if snap.state == "queued":
        return f"queued — position {snap.queue_position}"
    if snap.state == "running":
        return f"running — step {snap.step} of {snap.total_steps}"
    return {"done": "done", "stopped": f"stopped at step {snap.step}",
            "failed": "failed"}.get(snap.state, snap.state)


def last(history: list[dict], key: str):
    return next((h[key] for h in reversed(history) if h.get(key) is not None), None)


def device_of(job) -> str:
    from tfviz.device import device_label, resolve_device

    try:
        return device_label(resolve_device(job.spec["train_config"].device))
    except ValueError as e:
        return str(e)


def jobs_table(jobs, owners: bool = False):
    """One row per job, newest first; ``owners``: a "session" column (the first characters of the
    owner's session id: enough to tell sessions apart, not to open one)."""
    import pandas as pd

    rows = []
    for j in reversed(jobs):
        s = j.snapshot()
        acc = last(s.history, "val_accuracy")
        task = j.spec["task"]
        rows.append({"run": s.name, "task": task.get("name", "?") if isinstance(task, dict)
                     else getattr(task, "name", str(task)),
                     "state": status(s), "progress": s.step / max(s.total_steps, 1),
                     "val acc": None if acc is None else round(acc, 3)})
        if owners:
            rows[-1] = {"session": f"{(j.owner or '?')[:4]}…", **rows[-1]}
    return pd.DataFrame(rows)


def seconds(x) -> str:
    if x is None:
        return "–"
    x = float(x)
    return f"{x:.0f} s" if x < 120 else f"{x / 60:.1f} min"


def metrics(job, s) -> None:
    """Two rows of numbers for a job snapshot ``s``: losses and accuracy, speed, ETA, device."""
    h, latest = s.history, s.latest
    c = st.columns(3) + st.columns(3)
    c[0].metric("Train loss", f"{latest['train_loss']:.3f}" if latest else "–")
    val_loss, val_acc = last(h, "val_loss"), last(h, "val_accuracy")
    c[1].metric("Validation loss", "–" if val_loss is None else f"{val_loss:.3f}")
    c[2].metric("Validation accuracy", "–" if val_acc is None else f"{val_acc:.1%}")
    c[3].metric("Tokens/s", f"{latest['tokens_per_s']:,.0f}" if latest else "–")
    c[4].metric("ETA", seconds(latest.get("eta")) if s.state == "running" else "–")
    c[5].metric("Device", device_of(job))
    if s.state == "running" and latest:  # the ETA against the job time cap, as soon as it is known
        from tfviz.runs.timecap import outlook

        cap = job_manager().max_seconds
        if note := outlook(s.step, s.total_steps, latest.get("elapsed"), latest.get("eta"), cap):
            st.warning(note)
    if "gpu_memory_gib" in latest:  # trained on a CUDA GPU
        g = st.columns(3)
        mfu = latest.get("mfu")
        g[0].metric("MFU", "–" if mfu is None else f"{mfu:.1%}",
                    help="model FLOPs utilisation: the training FLOPs done per second over the GPU's "
                         "bf16 peak (its datasheet figure); – when bf16 is off or the GPU is unknown")
        g[1].metric("GPU memory", f"{latest['gpu_memory_gib']:.2f} GiB",
                    help="the most memory tensors took on the GPU since the previous update")
        g[2].metric("bf16", "on" if latest.get("bf16") else "off", help="bfloat16 autocast")


def pick(where, label: str, options, key: str, on_change=None, **kw):
    """The form's selectbox for field ``key`` (its value kept in the form, see ``FORM``); a kept
    value that is no longer an option becomes the first one, in the form too."""
    options, f = list(options), form()
    if f[key] not in options:
        f[key] = st.session_state[P + key] = options[0]
    return where.selectbox(label, options, key=P + key, on_change=on_change or commit, args=(key,), **kw)


def number(where, label: str, lo, hi, key: str, *, above: bool = False, **kw):
    """The form's number box for field ``key``, from ``lo`` (above ``lo`` with ``above``) to
    ``hi``: a value outside is refused beside Start with this label and range (``problems``)."""
    st.session_state.setdefault(LIMITS, {})[key] = (label, lo, hi, above)
    if isinstance(lo, int):
        kw.setdefault("step", 1)  # a whole number (without bounds Streamlit would make it a float)
    return where.number_input(label, key=P + key, on_change=commit, args=(key,), **kw)


def radio(where, label: str, options, key: str, **kw):
    """The form's radio for field ``key``."""
    return where.radio(label, options, key=P + key, on_change=commit, args=(key,), **kw)


def checkbox(where, label: str, key: str, **kw):
    """The form's checkbox for field ``key``."""
    return where.checkbox(label, key=P + key, on_change=commit, args=(key,), **kw)


def text(where, label: str, key: str, **kw):
    """The form's text box for field ``key``."""
    return where.text_input(label, key=P + key, on_change=commit, args=(key,), **kw)


def run_picker(jobs) -> str:
    """The "Run" selector over this session's jobs, newest first; the run shown before (on another
    page, or in this tab) stays selected -> its job id."""
    ids = [j.id for j in reversed(jobs)]
    if st.session_state.get(P + "job") not in ids:  # a new tab, or back from another page
        kept = st.session_state.get("_train_job")
        st.session_state[P + "job"] = kept if kept in ids else ids[0]
    names = {j.id: j.name for j in jobs}
    st.session_state["_train_job"] = st.selectbox("Run", ids, format_func=names.get, key=P + "job")
    return st.session_state["_train_job"]


def replay(job, name: str) -> None:
    """Watch the heads learn: one head's attention on the task's probe example, one frame per
    snapshot the job recorded while training (tfviz.viz.snapshot_player)."""
    from tfviz import viz

    from .figures import show

    snaps = job.attention_snapshots()
    if not snaps:
        return
    st.subheader("Watch the heads learn")
    kinds = pattern_kinds(snaps[-1])
    k1, k2, k3 = st.columns(3)
    tpl = kinds[choice(k1, "Attention", list(kinds), P + "replay_kind")]
    stacks = [s.layers(tpl) for s in snaps]  # each [layer, head, q_pos, k_pos]
    layer = choice(k2, "Layer", list(range(stacks[0].shape[0])), P + "replay_layer")
    head = choice(k3, "Head", list(range(stacks[0].shape[1])), P + "replay_head")
    first = snaps[0]
    q_tok = first.src_tokens if tpl.startswith("encoder.") else first.tokens
    k_tok = first.src_tokens if "cross_attn" in tpl or tpl.startswith("encoder.") else None
    fig = viz.snapshot_player(stacks, [s.step for s in snaps], q_tok, layer=layer, head=head,
                              k_tokens=k_tok)
    show(fig, P + "replay", filename=f"{name}-L{layer}-H{head}-replay")
    st.caption("Press ▶ to replay: one frame per snapshot of the probe example's attention, "
               "recorded from the model at that step.")


def pattern_kinds(snapshot) -> dict[str, str]:
    """label -> per-layer template ("blocks.{l}.attn.hook_pattern") present in a snapshot."""
    out = {}
    for name in snapshot.patterns:
        where = parse_hook_name(name)
        label = ("cross-attention (decoder → source)" if where.attention == "cross_attn" else
                 f"{where.stack} self-attention" if where.stack else "self-attention")
        out.setdefault(label, where.template)
    # the order a reader meets them (a checkpoint stores the names sorted): encoder, decoder, cross
    rank = {"encoder self-attention": 0, "decoder self-attention": 1, "self-attention": 1}
    return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], 2)))


# ------------------------------------------------------------------ the architecture shape (issue 30)
# "GPT-2-shaped", "Llama-shaped", "BERT-shaped": the settings that make a run exactly a model of a
# Hugging Face family (``Adapter.shape``, ``tfviz.interop.export.shapes``), so its finished run
# exports as a folder (``ui.export``). "tfviz (any setting)": the preset as it is.
ANY = "tfviz (any setting)"


def _shapes() -> dict:
    """label -> adapter of every family the Train page can train as ("GPT-2-shaped": GPT2, ...)."""
    from tfviz.interop.export import shapes

    return {a.shape_label: a for a in shapes()}


def shape_options(archs, arch: str | None = None) -> list[str]:
    """"tfviz (any setting)", then the shapes a task of ``archs`` can train as (those of the
    preset's ``arch`` first)."""
    fits = [(label, a) for label, a in _shapes().items() if a.shape["arch"] in archs]
    return [ANY] + [label for label, a in sorted(fits, key=lambda x: x[1].shape["arch"] != arch)]


def _form_model(ss) -> dict:
    """The transformer fields the form holds now, as ``configs_from_form`` reads them."""
    model = {k: ss.get(P + k) for k in MODEL_KEYS}
    kind = ss.get(P + "attn_kind", "MHA")
    model["n_kv_heads"] = {"MHA": model["n_heads"], "MQA": 1}.get(kind, model["n_kv_heads"])
    model["window"] = model["window"] or None
    return model


VISIBLE = {"arch": "Architecture", "pos": "Positions", "window": "Window", "attn_only": "Attention only",
           "n_kv_heads": "K/V heads"}  # model fields the form shows -> their label there
HIDDEN = {"norm": "norm placement", "normalization": "normalization", "activation": "activation",
          "bias": "biases", "tie_embeddings": "tied embeddings", "rope_pairs": "RoPE pairs",
          "embed_norm": "a norm on the embeddings", "head": "output head"}


def _fmt(value) -> str:
    return {None: "none", True: "on", False: "off"}.get(value, str(value)) if not isinstance(value, str) \
        else value


def _widgets(field: str, value, ss) -> dict:
    """The form's widget values (key without prefix -> value) that show ``field`` = ``value``."""
    if field == "window":
        return {"window": value or 0}
    if field == "n_kv_heads":
        return {"attn_kind": "MHA", "n_kv_heads": value} if value == ss.get(P + "n_heads") else {}
    return {field: value}


def apply_shape() -> None:
    """on_change of the shape: the form's fields that the family fixes take its values (Positions,
    Window, Attention only, K/V heads, Architecture); the others are kept. Going back to
    "tfviz (any setting)" puts back what the shape changed."""
    ss, f = st.session_state, form()
    adapter = _shapes().get(ss.get(P + "shape"))
    ss["_train_shape_for"] = _preset_id(ss)
    before = ss.pop("_train_shape_before", {})
    if before and adapter is None:  # back to the preset's own settings, where the shape changed them
        ss.update({P + k: v for k, v in before.items()})
        f.update(before)
    ss["_train_shape_changed"] = []
    if adapter is None:
        return
    if before:  # from one shape to another: start from what the form had before either
        ss.update({P + k: v for k, v in before.items()})
        f.update(before)  # the form's one copy (``restore`` writes it into the fields)
    model = _form_model(ss)
    want = adapter.shaped(model)
    changed, kept = [], {}
    for field, label in VISIBLE.items():
        if field in want and want[field] != model[field]:
            for k, v in _widgets(field, want[field], ss).items():
                kept.setdefault(k, ss.get(P + k))
                ss[P + k] = f[k] = v
            changed.append((label, model[field], want[field]))
    ss["_train_shape_before"], ss["_train_shape_changed"] = kept, changed


def _preset_id(ss) -> tuple:
    return ss.get(P + "task"), ss.get(P + "kind"), ss.get(P + "preset")


def shape_choice(where, task_cls, pre) -> None:
    """The Train form's "Architecture shape" (outside the form: a choice updates the form's
    fields at once), and a caption saying what it sets and what it changed. A preset applied
    while a shape is chosen gets the shape again; a task no shape fits resets it."""
    ss, f = st.session_state, form()
    key = P + "shape"
    ss.setdefault(key, f.get("shape", ANY))  # Streamlit drops a widget's state on other pages
    options = shape_options(task_cls.archs, pre.model.get("arch"))
    if ss[key] not in options:
        ss[key] = ANY
        ss.pop("_train_shape_before", None)
    elif ss[key] != ANY and ss.get("_train_shape_for") != _preset_id(ss):
        ss.pop("_train_shape_before", None)  # a new preset: the shape applies to it afresh
        apply_shape()
    choice(where, "Architecture shape", options, key, on_change=apply_shape,
           help="GPT-2- / Llama- / BERT-shaped: the settings that make the trained model exactly "
                "that family's model, so it can be exported as a Hugging Face folder when it has "
                "trained. tfviz (any setting): the preset as it is.")
    f["shape"] = ss[key]
    adapter = _shapes().get(ss[key])
    if adapter is None:
        if len(options) == 1:
            where.caption("No Hugging Face family tfviz writes has this task's architecture "
                          f"({', '.join(task_cls.archs)}): a run of it stays in tfviz.")
        return
    import dataclasses

    from tfviz.model import ModelConfig

    base = {**{x.name: x.default for x in dataclasses.fields(ModelConfig)}, **pre.model}
    sets = [f"{HIDDEN[k]} {_fmt(base.get(k))} → {_fmt(v)}" for k, v in adapter.shape.items()
            if k in HIDDEN and base.get(k) != v]
    changed = [f"{label} {_fmt(a)} → {_fmt(b)}" for label, a, b in ss.get("_train_shape_changed", [])]
    where.caption(f"**{adapter.shape_label}**: the run is exactly a {adapter.label} model "
                  f"(`{adapter.exports_as}`), exportable when it has trained. "
                  + (f"Set here (the form does not show them): {'; '.join(sets)}. " if sets else "")
                  + (f"Changed in the form: {'; '.join(changed)}. " if changed else "")
                  + "Everything else is the preset's.")


def shaped_fields(model: dict) -> dict:
    """At Start: the form's model fields with the chosen shape's hidden settings added; a field
    of the form that the shape fixes otherwise is refused by name (the form shows what trains)."""
    adapter = _shapes().get(st.session_state.get(P + "shape", ANY))
    if adapter is None:
        return model
    want = adapter.shaped(model)
    wrong = [(VISIBLE.get(k, k), model[k], want[k]) for k in model
             if k in want and (model[k] or None) != (want[k] or None)]
    if wrong:
        raise ValueError(f"{adapter.shape_label} needs " + ", ".join(
            f"{label} = {_fmt(w)} (the form has {_fmt(h)})" for label, h, w in wrong)
            + f": set {'it' if len(wrong) == 1 else 'them'}, or choose “{ANY}”")
    return want
