"""Cost: full O(n²) attention against the O(n·w) sliding window — analytic FLOPs and memory beside
times and peak memory measured here from the model's own attention kernels; the KV cache of
MHA / GQA / MQA read from real cache tensors; generation with and without the cache."""
import time

import streamlit as st

from tfviz.bench import live
from tfviz.bench.attention import LABELS, analytic_frame, label
from tfviz.device import cpu_count
from tfviz.viz import cost_figure, kv_cache_figure, speed_figure
from ui import bench, cache
from ui.figures import show
from ui.picker import current_model

RESULT = "cost_result"

st.title("Cost")
st.caption("Full attention scores every (query, key) pair: O(n²) time and memory. A sliding window "
           "of w keys needs only n·(w+1) pairs: O(n·w). Below, the formulas (dashed) beside what "
           f"this machine measures running the model's own attention kernels on one layer "
           f"({live.HEADS} heads × d_head {live.D_HEAD}, batch {live.BATCH}, float32, causal).")
current_model(required=False)  # the sidebar picker, as on every page (not used here)
dev = bench.device()
gpu = dev == "cuda"

c = st.columns([3, 2, 2, 2, 2])
max_n = c[0].select_slider("largest n", [2 ** i for i in range(8, 18 if gpu else 15)],
                           16384 if gpu else 4096, key="cost_max_n")
window = c[1].select_slider("window w", [16, 32, 64, 128, 256], 128, key="cost_window")
pass_ = c[2].radio("pass", ["fwd", "fwd+bwd"], index=int(gpu), key="cost_pass",
                   format_func={"fwd": "forward", "fwd+bwd": "forward + backward"}.get)
repeats = c[3].slider("repeats", 1, 5, 2, key="cost_repeats", help="the median is reported")
threads = c[4].selectbox("CPU threads", range(1, cpu_count() + 1), live.default_threads(cpu_count()) - 1,
                         key="cost_threads", disabled=gpu,
                         help="On a busy machine (a class on one server) 1 thread gives steadier times.")
if not gpu and (max_n > 4096 or pass_ == "fwd+bwd"):
    st.warning(f"n up to {max_n:,}{' with the backward pass' if pass_ == 'fwd+bwd' else ''} can take "
               "a minute or more on a laptop CPU, and the class waits: variants predicted to pass "
               "the 2-minute limit, or 2 GiB of memory, are skipped (the figures say where).")
settings = live.Settings(max_n, window, pass_, repeats, threads, dev)
go = st.button("Measure now", key="measure", type="primary", icon=":material/timer:")
if (est := bench.estimate(settings)) is not None:  # said before it starts (it took 67 s unannounced)
    st.caption(f"Measure now takes about **{est.seconds:.0f} s** on this server now (attention "
               f"{est.attention_s:.0f} s, KV caches {est.kv_s:.0f} s), estimated {est.how}; other "
               "sessions' work changes it.")
if go:
    bar, t0 = st.progress(0.0, text="Starting…"), time.perf_counter()
    about = f" of about {est.seconds:.0f} s" if est is not None else ""
    try:
        st.session_state[RESULT] = bench.measure(settings, lambda f, t: bar.progress(
            f, text=f"{t} — {time.perf_counter() - t0:.0f} s{about}"))
    except bench.Busy as e:
        st.warning(str(e))
    except ValueError as e:
        st.error(f"Could not measure: {e}")
    bar.empty()

result = st.session_state.get(RESULT)
ref = None if result else bench.reference(dev)
if result:
    df, used = result["attention"], result["settings"]
    st.success(f"Measured on this machine: {live.describe(result['machine'])} — n = "
               f"{', '.join(map(str, used.ns))}, w = {used.window}, {used.repeats} repeat(s), "
               f"took {result['seconds']:.1f} s.", icon=":material/speed:")
    pass_shown, clock = used.pass_, live.time_column(used.device, used.threads, df.columns)
elif ref is not None:
    df, meta = ref
    st.info(f"Nothing measured in this session yet. Shown: a **reference** measured on "
            f"{live.describe(meta)}.\n\nCommand: `{meta.get('command', 'python -m tfviz.bench attention')}`"
            "\n\nPress **Measure now** for this machine's own numbers.", icon=":material/history:")
    pass_shown = pass_ if pass_ in set(df["pass"]) else df["pass"].iloc[0]
    clock = live.time_column(meta.get("device", "cpu"), meta.get("threads"), df.columns)
else:
    df = None
    st.info("Nothing measured yet: the curves below are the formulas only. Press **Measure now**.")

if df is not None:
    show(cache.figure(cost_figure, "time", df, pass_shown, LABELS, time_col=clock[0],
                      y_title=f"{clock[1]} per call (s)"), key="cost_time", data=df, filename="attention-time")
    show(cache.figure(cost_figure, "memory", df, pass_shown, LABELS), key="cost_memory", data=df,
         filename="attention-memory")
    st.caption(f"Solid: measured ({clock[2]}; peak memory the call allocated). Dashed: analytic "
               "— memory from the formula as is; time = FLOPs at the variant's own measured speed "
               "(only the slope is predicted). Log-log: slope 2 = O(n²), slope 1 = O(n·w).")
    ratios, windows = bench.summaries(df, pass_shown, clock[0])
    st.dataframe(ratios, hide_index=True, key="cost_ratios", column_config={
        **{k: st.column_config.NumberColumn(name, format="%.2f×") for k, name in (
            ("time", f"{clock[1]} (measured)"), ("flops", "FLOPs (analytic)"),
            ("peak", "peak memory (measured)"), ("bytes_analytic", "memory (analytic)"))}})
    skipped = df[(df["pass"] == pass_shown) & (df["skipped"].astype(str) != "")]
    for _, r in skipped.drop_duplicates(["n", "variant"]).iterrows():
        st.caption(f"n = {r['n']}, {label(r['variant'])}: {r['skipped']}")
    st.markdown(windows)
else:
    frame = analytic_frame(settings.ns, window, live.HEADS, live.D_HEAD, live.BATCH, passes=(pass_,),
                           device=dev)
    show(cache.figure(cost_figure, "flops", frame, pass_, LABELS), key="cost_flops", data=frame)
    show(cache.figure(cost_figure, "bytes", frame, pass_, LABELS), key="cost_bytes", data=frame)
    st.markdown(live.honest_windows(frame, pass_))

st.subheader("KV cache: MHA vs GQA vs MQA")
st.caption("Generating token t reuses the keys and values of tokens 0…t−1 from a cache instead of "
           "recomputing them. The cache holds 2 (k and v) · layers · kv heads · d_head · positions "
           "· batch · bytes: grouped-query (GQA) and multi-query (MQA) attention share kv heads "
           "between query heads, so their caches are 2× and 4× smaller here.")
if result:
    sizes, speed = result["sizes"], result["speed"]
    models = ", ".join(sizes.drop_duplicates("kind")["model"])
    st.caption(("Shipped models: " if result["shipped"] else
                "The shipped lm / lm-gqa / lm-mqa checkpoints are not here, so these are small "
                "**untrained** decoders of the three kinds (the cache size does not depend on "
                "the weights): ") + models + ". Bytes read from `cache.nbytes` while stepping each "
            "model one token at a time (on the CPU).")
    show(cache.figure(kv_cache_figure, sizes), key="cost_kv", data=sizes, filename="kv-cache")
    last = sizes.sort_values("pos").groupby("kind", sort=False).tail(1)
    st.dataframe(last.assign(equal=last["measured_bytes"] == last["analytic_bytes"])[
        ["kind", "model", "n_layers", "n_heads", "n_kv_heads", "d_head", "pos", "measured_bytes",
         "analytic_bytes", "equal"]], hide_index=True, key="cost_kv_table",
        column_config={"measured_bytes": "cache.nbytes",
                       "analytic_bytes": "2·L·n_kv·d_head·pos·B·bytes"})
    show(cache.figure(speed_figure, speed), key="cost_speed", data=speed, filename="generation-speed")
    st.caption("Without the cache every new token re-runs the whole sequence; with it, one token "
               "per step. On models this small, fixed per-step overheads hide part of the gap; it "
               "grows with the model and the sequence.")
else:
    st.info("Press **Measure now** to step the MHA, GQA and MQA models token by token and read "
            "their real caches, and to time generation with and without the cache.")
