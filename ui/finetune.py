"""The Train page's "Fine-tune a local model" panel: a decoder opened from a Hugging Face folder
(``ui.models``' local sources) trained further on the student's own text, with the model's own
tokenizer (the lm task with ``tokenizer="given"``), through the same job manager as every run
(``RunManager.submit(init=folder)``, ``ui.jobs.job_manager``: the job reads the folder again, so the model the explorer
shares is never changed). The result is a *trained* model of this session, like any other run.
"""
from __future__ import annotations

import streamlit as st

from .models import load_model, local_models, local_refs

P = "ft_"  # widget keys
DECODER_FAMILIES = ("gpt2", "llama")  # families whose folders are decoders (BERT is an encoder)
DEFAULT_TEXT = ("Attention lets every token look at the tokens before it. Each head learns where "
                "to look: some heads look at the previous token, some at the first token, some at "
                "the token after an earlier copy of the current one. ") * 8


def decoder_refs() -> list:
    """The local folders that open and hold a decoder (fine-tuning needs next-token targets)."""
    decoders = {str(i.path) for i in local_models() if i.ok and i.family in DECODER_FAMILIES}
    return [r for r in local_refs() if r.path in decoders]


def panel(submit) -> str | None:
    """The panel; ``submit(task, model_config, train_config, name, init)`` queues the job and returns its id
    (the Train page's own submit, so the run shows up in "Your runs"). -> the new job's id."""
    refs = decoder_refs()
    with st.expander("Fine-tune a local model on your text", icon=":material/tune:",
                     expanded=bool(refs) and st.session_state.get(P + "open", False)):
        if not refs:
            st.info("No local decoder to fine-tune: put a GPT-2 or Llama-family folder (as "
                    "`save_pretrained` writes it) under `models/` on the server, or in its Hugging "
                    "Face cache. It then appears here and in every page's model picker.")
            return None
        st.caption("The model keeps its own tokenizer and vocabulary and learns to continue *your* "
                   "text (next-token prediction, the `lm` task). A GPU is recommended: on a CPU, "
                   "only small models train in reasonable time (a 124M-parameter GPT-2 takes "
                   "seconds per step; its resumable checkpoint needs about 1.5 GB, so "
                   "TFVIZ_CHECKPOINT_MB must allow it).")
        paths = [r.path for r in refs]
        from tfviz.tasks.common import MAX_TEXT_CHARS  # the lm task's text param: 1,000,000

        with st.container(border=True):  # not an st.form: Enter in its fields started a run
            path = st.selectbox("Model", paths, key=P + "model",
                                format_func=lambda p: refs[paths.index(p)].label)
            text = st.text_area("Your text", DEFAULT_TEXT, key=P + "text", height=140, max_chars=MAX_TEXT_CHARS,
                                help="At least a few hundred tokens: it is cut into windows, some "
                                     "kept apart to measure the loss on text the model never trained on.")
            c = st.columns(4)
            block = c[0].number_input("Window (tokens)", 8, 1024, 64, key=P + "block")
            steps = c[1].number_input("Fine-tuning steps", 1, 100_000, 30, key=P + "steps")
            batch = c[2].number_input("Batch size", 1, 256, 4, key=P + "batch")
            lr = c[3].number_input("Learning rate", 1e-6, 1e-2, 1e-4, format="%g", key=P + "lr")
            go = st.button("Start fine-tuning", type="primary", key=P + "start")
        if go:
            st.session_state[P + "open"] = True
            ref = refs[paths.index(path)]
            try:
                job_id = start(ref, text, int(block), int(steps), int(batch), float(lr), submit)
            except ValueError as e:
                st.error(f"Not started: {e}")
            else:
                st.success("Started: it shows under **Your runs**.")
                return job_id
    return None


def start(ref, text: str, block: int, steps: int, batch: int, lr: float, submit) -> str:
    """Build the lm task on ``text`` with the model's tokenizer, check that the run fits, queue
    it. ValueError (with the reason) when it cannot start."""
    from tfviz.tasks import make_task
    from tfviz.train import TrainConfig
    from tfviz.train.budget import check_training

    lm = load_model(ref)  # shared and cached: for its tokenizer and config only
    if lm.config.arch != "decoder":
        raise ValueError(f"{ref.label} is not a decoder: fine-tuning on a text predicts next tokens")
    if lm.tokenizer is None:
        raise ValueError("the folder has no tokenizer.json, so the text cannot be read as its tokens")
    block = min(block, lm.config.max_len - 1) if lm.config.max_len else block
    task = make_task({"name": "lm", "tokenizer": "given", "text": text, "block": block},
                     given_tokenizer=lm.tokenizer)
    task.examples("train")  # a text too short says so now, not in the job
    cfg = TrainConfig(steps=steps, batch_size=batch, lr=lr, warmup=max(1, min(steps // 10, 100)),
                      log_every=1, eval_every=max(1, steps // 5), eval_examples=64,
                      snapshot_every=max(1, steps // 10), checkpoint_every=0)
    check_training(lm.config, cfg, positions=block)  # BudgetError (a ValueError): would not fit
    name = ref.label.split(" (")[0] + "-finetuned"
    return submit(task, lm.config, cfg, name, ref.path)

