"""Train: pick a task and a model, start a run, watch loss and accuracy live, then replay how the
heads learned. Runs are background jobs (ui.jobs), owned by this browser session (its id is in
the URL, so a reload finds them again); the page only reads their snapshots."""
import streamlit as st

from tfviz import viz
from tfviz.model.config import ARCHS, POS_SCHEMES
from tfviz.model.families import KIND_LABELS
from tfviz.model.recurrent import ARCHS as RECURRENT_ARCHS
from tfviz.tasks import TASKS
from tfviz.train.config import MAX_LR
from tfviz.train.presets import claim_for, kinds_for
from tfviz.runs.store import StoreUnavailable
from ui import export, finetune, phase, train_state as ts
from ui.figures import charts_later, show
from ui.jobs import job_manager, my_jobs, store_trouble

P = ts.P
st.title("Train")
f = ts.form()  # the form's values: what its fields show, and what Start trains
ts.restore()  # ... into the widgets' state on every run (see ui.train_state.FORM)
left, right = st.columns([1, 1], gap="large")  # the form's selectors readable at 1024 px


with left:
    st.subheader("New run")
    a = k = b = st  # one under another: side by side their values were cut ("Transf…")
    ts.pick(a, "Task", ts.trainable_tasks(), "task", on_change=ts.apply_preset)
    ts.pick(k, "Model type", kinds_for(f["task"]), "kind", on_change=ts.apply_preset,
            format_func=KIND_LABELS.get,
            help="A transformer, or a recurrent network (what came before attention): it reads the "
                 "tokens one at a time and carries what it knows in one hidden state")
    ts.pick(b, "Preset", ts.presets_for(f["task"], ts.cuda_available(), f["kind"]), "preset",
            on_change=ts.apply_preset)
    task_cls, pre = TASKS[f["task"]], ts.current_preset()
    recurrent = pre.kind != "transformer"
    if not recurrent:  # GPT-2- / Llama-shaped: a run that exports as a Hugging Face folder
        ts.shape_choice(st, task_cls, pre)
    ts.prepare(pre)  # its examples are generated while you read the form: Start trains at once
    st.caption(f"**Look for:** {pre.what}. Accuracy = {task_cls.metric}. {claim_for(pre)}")
    # Not an st.form: Enter in a form's field submits it (Enter in Steps or Name started a run).
    # Each field keeps its value in the form as it changes; only the button starts a run.
    with st.container(border=True, key="train_form"):  # tests find it as .st-key-train_form
        archs = [x for x in ARCHS if x in task_cls.archs and (not recurrent or x in RECURRENT_ARCHS)]
        ts.pick(st, "Architecture", archs, "arch")  # full width: "encoder-decoder" was cut at 1024
        if not recurrent:
            ts.pick(st, "Positions", POS_SCHEMES, "pos")
        m1, m2 = st.columns(2)
        if recurrent:  # a recurrent network has no heads, positions or window
            if "encoder-decoder" in archs:  # attention over a source: only where there is one
                ts.radio(m2, "Attention over the source", list(ts.RNN_ATTENTIONS), "rnn_attention",
                         format_func=ts.RNN_ATTENTIONS.get, horizontal=True,
                         help="encoder-decoder only: none = the decoder sees only the encoder's "
                              "final state; additive = Bahdanau attention over every encoder state")
            ts.number(m1, "Embedding size (d_model)", 2, 1024, "d_model")
            ts.number(m2, "Hidden size", 2, 2048, "d_hidden",
                      help="the numbers the hidden state holds: all it knows of the text so far")
            ts.number(m1, "Layers", 1, 12, "n_layers")
        else:
            ts.number(m1, "d_model", 2, 1024, "d_model")
            ts.number(m2, "Layers", 1, 12, "n_layers")
            ts.number(m1, "Heads", 1, 32, "n_heads")
            ts.radio(m2, "Attention", ts.ATTN_KINDS, "attn_kind",
                     horizontal=True, help="MHA: one K/V head per query head; GQA: groups of query "
                                           "heads share a K/V head; MQA: one K/V head for all")
            ts.number(m1, "K/V heads (GQA)", 1, 32, "n_kv_heads", disabled=f["attn_kind"] != "GQA",
                      help="MHA: as many as heads; MQA: one; GQA: your choice")
            ts.number(m2, "Window (0 = full)", 0, 4096, "window")
            ts.checkbox(st, "Attention only (no MLP)", "attn_only")
        t1, t2 = st.columns(2)
        ts.number(t1, "Steps", 1, 1_000_000, "steps")
        ts.number(t2, "Batch size", 1, 4096, "batch_size")
        ts.number(t1, "Learning rate", 0.0, MAX_LR, "lr", above=True, step=1e-4, format="%g")
        ts.number(t2, "Warmup steps", 0, 1_000_000, "warmup")
        ts.number(t1, "Seed", 0, 2**31 - 1, "seed")
        ts.text(t2, "Name", "name", max_chars=60)
        if ts.cuda_available():
            ts.radio(t1, "Run on", list(ts.DEVICES), "device", format_func=ts.DEVICES.get, horizontal=True)
            ts.checkbox(t2, "torch.compile", "compile",
                        help="Fused GPU kernels; the first steps pay for compiling (tens of seconds)")
        if started := ts.start_button(pre):  # refusals are said beside it, naming the field
            task, configs, job_id = started
            st.session_state[P + "job"] = st.session_state["_train_job"] = job_id
            if note := ts.cap_note(task, *configs):  # past the job time cap: said at once
                st.warning(note)
    if job_id := finetune.panel(ts.submit):  # an imported decoder on the student's own text
        st.session_state[P + "job"] = st.session_state["_train_job"] = job_id

with right:
    st.subheader("Your runs")
    try:  # the run store locked, read-only, on a full disk or unreadable: a sentence, not a box
        jobs = my_jobs()
        job = job_manager().get(ts.run_picker(jobs)) if jobs else None
        polling = any(j.snapshot().active for j in jobs)
    except StoreUnavailable as e:
        st.error(store_trouble(e))
        st.stop()
    if not jobs:
        st.info("No runs yet in this session: choose a task and press **Start training**.")
        st.stop()
    later = charts_later()  # a new tab: the runs list first, the charts a moment later

    def live() -> None:
        """Re-runs every second while one of this session's jobs is active; one full rerun when
        they have all ended (so the page stops polling and shows the results)."""
        try:
            show_live()
        except StoreUnavailable as e:
            st.warning(store_trouble(e))

    def show_live() -> None:
        all_jobs = my_jobs()
        st.dataframe(ts.jobs_table(all_jobs), hide_index=True, key=P + "table",
                     column_config={"progress": st.column_config.ProgressColumn(min_value=0, max_value=1,
                                                                                width="small")})
        s = job.snapshot()
        if s.state == "queued":
            st.info(f"**{s.name}**: {ts.status(s)} — it starts when a running job ends.")
        else:
            st.progress(s.step / max(s.total_steps, 1), text=f"**{s.name}**: {ts.status(s)}")
        ts.metrics(job, s)
        if s.active and st.button("Stop", key=P + "stop", icon=":material/stop:"):
            job_manager().stop(job.id)
        if s.history and not later:
            show(viz.loss_curves(s.history, title=f"{s.name}: loss and accuracy"), P + "curves",
                 filename=f"{s.name}-curves")
        if polling and not any(j.snapshot().active for j in all_jobs):
            st.rerun()

    st.fragment(live, run_every=1 if polling else None)()

    try:
        snap = job.snapshot()
    except StoreUnavailable:
        st.stop()  # the fragment above says why
    if snap.state == "failed":
        st.error(f"Training failed: {snap.error}")
    elif snap.state in ("done", "stopped") and snap.checkpoint:
        st.success(f"{snap.message}. Saved as **{snap.name}** (listed as *trained* in the sidebar).")
        page, where = ts.open_in(job)
        if st.button(f"Open in {where}", key=P + "open", type="primary"):
            st.session_state["model_path"] = snap.checkpoint
            st.switch_page(page)
        if page != "app_pages/attention.py":  # a recurrent run: no attention maps to explore
            st.page_link("app_pages/why.py", label="Why attention: RNN and LSTM against the "
                         "transformer, measured on shipped models", icon="🧭")
        export.run_panel(snap.checkpoint, snap.name, P + "export")

    if later:
        st.caption("Loading the charts…")

if not later and not snap.active:  # full width under both columns: readable at 1024 px
    ts.replay(job, snap.name)
    phase.replay_section(snap)  # an induction run: the phase change it recorded
