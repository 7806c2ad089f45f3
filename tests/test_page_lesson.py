"""Lesson page in AppTest (issue 32): every step renders in the lecture's order from the shipped
models; a step's "what to notice" is written from its view's numbers (another model, another
sentence; the numbers against an independent recording); presenting keeps the session id out of
the URL; a follower draws the leader's step and may step away and come back; the whole lesson
as one HTML file."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from apptest_helpers import arr, chart, head_zeroed, heatmap_z, ok, rerun
from streamlit.testing.v1 import AppTest

import tfviz
from tfviz.lesson import PARTS
from tfviz.paths import SHIPPED
from tfviz.train.checkpoint import load_checkpoint
from ui.lesson_steps import BY_ID, STEPS

APP = str(__import__("apptest_helpers").APP)


@pytest.fixture(autouse=True)
def real_zoo(monkeypatch):
    """The steps open on the shipped zoo (checkpoints/), whatever TFVIZ_CHECKPOINT_DIR says."""
    monkeypatch.delenv("TFVIZ_ZOO_DIR", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fresh_class():
    """A new class record (the server's one record is a cache_resource: it outlives a test)."""
    from ui.lesson import class_record

    class_record.clear()
    yield
    class_record.clear()


def lesson(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.switch_page("app_pages/lesson.py")
    at.run()
    return ok(at)


def notice(at: AppTest) -> str:
    found = [m.value for m in at.markdown if m.value.startswith("**What to notice.**")]
    assert len(found) == 1, [m.value for m in at.markdown]
    return found[0]


def test_the_steps_cover_the_lecture_in_order() -> None:
    parts = [s.part for s in STEPS]
    assert len(STEPS) >= 16 and len({s.id for s in STEPS}) == len(STEPS)
    order = [list(PARTS).index(p) for p in parts]
    assert order == sorted(order) and set(parts) == set(PARTS)  # every part, in the lecture's order
    for s in STEPS:
        assert len(s.controls) <= 2, s.id
        sentences = [x for x in re.split(r"(?<=[.?!])\s+", s.text.strip()) if x]
        assert 2 <= len(sentences) <= 4, (s.id, sentences)
    pages = (Path(APP).parent / "ui" / "pages.toml").read_text()
    assert f"the whole lecture as {len(STEPS)} steps" in pages  # Home's tour says the true count


def test_every_step_renders_with_its_notice_and_link() -> None:
    at = lesson()
    for k, step in enumerate(STEPS, 1):
        at = rerun(at, lesson_step=step.id)
        assert not at.warning, (step.id, [w.value for w in at.warning])
        assert f"step {k} of {len(STEPS)}" in " ".join(c.value for c in at.caption)
        chart(at, f"lesson_{step.id}")
        assert len(notice(at)) > 40
        links = [p for p in at.get("page_link") if step.page in p.proto.page]
        assert links, step.id
        if step.model:  # the full page opens with the step's model
            assert "model=shipped" in links[0].proto.page or "shipped" in str(links[0].proto)


@pytest.mark.parametrize(("step", "control", "value"), [("block", None, None),
                                                       ("next-token", "temperature", 2.0),
                                                       ("cross-attention", "head", "L0·H2"),
                                                       ("mlm", "sentence", 1), ("families", None, None),
                                                       ("context", None, None)])
def test_the_block_and_cross_attention_steps_render_and_follow_their_controls(step, control, value) -> None:
    """Issue 42, item 2: the block, next-token and cross-attention steps render on their shipped
    models with a figure, a notice and the full page's link; a control changes the notice."""
    at = lesson(step=step)
    assert not at.warning, [w.value for w in at.warning]
    chart(at, f"lesson_{step}")
    first = notice(at)
    assert {"block": "**adds**", "next-token": "Greedy decoding writes", "cross-attention": "every one of",
            "mlm": "It reads both sides", "families": "0 of 21 ahead",
            "context": "reads both ways"}[step] in first
    assert [p for p in at.get("page_link") if BY_ID[step].page in p.proto.page]
    if control:
        at.selectbox(key=f"lesson_{step}_{control}").set_value(value).run()
        assert notice(ok(at)) != first


def test_a_link_opens_the_next_token_step_with_its_sampling_setting() -> None:
    """A link's float temperature and int top-k land on the step's select boxes and its notice."""
    at = lesson(step="next-token", temperature="0.5", top_k="3")
    assert at.selectbox(key="lesson_next-token_temperature").value == 0.5
    assert at.selectbox(key="lesson_next-token_top_k").value == 3
    words = notice(at)
    assert "Temperature 0.5 divides every logit by 0.5" in words and "Top-k 3" in words


def recorded_pattern(name: str, layer: int, head: int) -> tuple[np.ndarray, list[str]]:
    ck = load_checkpoint(SHIPPED / f"{name}.safetensors")
    ex = ck.build_task().mission_sentences()[0]
    rec = tfviz.record(ck.model, torch.tensor([ex.tokens]), names=[f"blocks.{layer}.attn.hook_pattern"])
    return rec[f"blocks.{layer}.attn.hook_pattern"][0, head].numpy(), ck.tokenizer.tokens_of(ex.tokens)


def test_the_notice_reads_the_figure_and_an_independent_recording_agrees() -> None:
    at = lesson(step="heatmap")
    words = notice(at)
    m = re.search(r"layer (\d+), head (\d+), the row of '([^']+)' \(pos (\d+)\) puts \*\*([\d.]+)\*\* on '([^']+)' "
                  r"\(pos (\d+)\)", words)
    assert m, words
    layer, head, q, w, k = int(m[1]), int(m[2]), int(m[4]), float(m[5]), int(m[7])
    pattern, tokens = recorded_pattern("coref", layer, head)
    np.testing.assert_allclose(heatmap_z(chart(at, "lesson_heatmap")), pattern, atol=1e-6)  # the figure
    assert int(pattern[q].argmax()) == k and tokens[k] == m[6] and w == pytest.approx(pattern[q, k], abs=0.006)


@pytest.mark.parametrize("step", ["heatmap", "qkv", "one-hot", "masks"])
def test_another_model_another_notice(tiny_zoo, step) -> None:
    at = lesson(step=step)
    before = notice(at)
    box = at.selectbox(key=f"lesson_{step}_model")
    assert box.value == "shipped/coref" or box.value == "shipped/lm"
    box.set_value("shipped/tiny-coref").run()  # a model "the class trained" (tests/tiny_zoo.py)
    assert ok(at).selectbox(key=f"lesson_{step}_model").value == "shipped/tiny-coref"
    assert notice(at) != before, (step, before)


def test_another_setting_another_notice() -> None:
    at = lesson(step="it-heads")
    first = notice(at)
    at.radio(key="lesson_it-heads_sentence").set_value(2).run()
    assert notice(ok(at)) != first
    at = lesson(step="sinusoidal")
    first = notice(at)
    at.slider(key="lesson_sinusoidal_d").set_value(128).run()
    assert notice(ok(at)) != first and "128 dimensions" in notice(at)


def test_presenting_keeps_the_session_id_out_of_the_address_bar() -> None:
    at = lesson(step="qkv")
    assert at.query_params.get("sid")
    at.button(key="lesson_present_btn").click().run()
    ok(at)
    assert "sid" not in at.query_params and at.query_params.get("present") == "1"
    assert at.query_params.get("step") == "qkv"
    at.button(key="lesson_next").click().run()
    assert "sid" not in ok(at).query_params and at.query_params.get("step") == "heatmap"
    at.button(key="lesson_unpresent").click().run()
    assert ok(at).query_params.get("sid")  # back in the address bar once presenting stops


def test_a_bad_link_falls_back_with_a_note() -> None:
    at = lesson(step="no-such-step", present="maybe")
    infos = " ".join(i.value for i in at.info)
    assert "step=no-such-step" in infos and "present=maybe" in infos
    assert f"step 1 of {len(STEPS)}" in " ".join(c.value for c in at.caption)


def test_the_class_follows_the_leader(monkeypatch, fresh_class) -> None:
    monkeypatch.setenv("TFVIZ_TEACHER_KEY", "a-teacher-key-long-enough")
    teacher = lesson(step="qkv")
    teacher = rerun(teacher, teacher=True)  # the key was given (ui.teacher's gate)
    teacher.button(key="lesson_lead_on").click().run()
    student = lesson(follow=1)
    assert student.session_state["lesson_step"] == "qkv"  # the leader's step, drawn at once
    assert "Following the teacher" in " ".join(c.value for c in student.caption)
    teacher.button(key="lesson_next").click().run()
    student.run()  # a tick of the follower's fragment (AppTest does not tick by itself)
    assert ok(student).session_state["lesson_step"] == "heatmap"
    student.button(key="lesson_next").click().run()  # the student steps away …
    teacher.button(key="lesson_next").click().run()
    student.run()
    assert ok(student).session_state["lesson_step"] == "heads"  # … and stays where they went
    assert "You stepped away" in " ".join(c.value for c in student.caption)
    student.button(key="lesson_back_to_teacher").click().run()
    assert ok(student).session_state["lesson_step"] == "heads"
    teacher.session_state["lesson_heads_model"] = "shipped/coref"
    teacher.button(key="lesson_prev").click().run()
    student.run()
    assert ok(student).session_state["lesson_step"] == "heatmap"


def test_a_student_cannot_lead(monkeypatch, fresh_class) -> None:
    monkeypatch.setenv("TFVIZ_TEACHER_KEY", "a-teacher-key-long-enough")
    teacher = rerun(lesson(step="qkv"), teacher=True)
    ok(teacher).button(key="lesson_present_btn").click().run()  # "Present to the class": presents and leads
    version = __import__("ui.lesson", fromlist=["class_record"]).class_record().current().version
    student = lesson(step="bag")
    assert not student.button(key="lesson_present_btn").label.startswith("Present to the class")
    assert not [b for b in student.button if b.key in ("lesson_lead_on", "lesson_lead_off")]
    student.button(key="lesson_present_btn").click().run()  # a student presents for themselves …
    student.button(key="lesson_next").click().run()  # … and moves nobody
    from ui.lesson import class_record

    assert class_record().current().version == version
    assert class_record().current().state["step"] == "qkv"
    ok(teacher)


def test_present_to_the_class_leads_through_presenting_esc_and_a_second_tab(monkeypatch, fresh_class) -> None:
    """Issue 41, item 1: one press presents and leads; leading is the server's, so presenting (the
    panel not drawn), Esc and another tab of the same browser keep it; a new tab of the teacher
    opens on the class's step; Stop leading stops it."""
    from ui import lesson as ui_lesson

    monkeypatch.setenv("TFVIZ_TEACHER_KEY", "a-teacher-key-long-enough")
    teacher = rerun(lesson(step="qkv"), teacher=True)
    assert teacher.button(key="lesson_present_btn").label.startswith("Present to the class")
    teacher.button(key="lesson_present_btn").click().run()
    assert ok(teacher).query_params.get("present") == "1"
    record = ui_lesson.class_record()
    assert record.leading and record.current().state["step"] == "qkv"
    student = lesson(follow=1)
    for want in ("heatmap", "heads"):
        teacher.button(key="lesson_next").click().run()  # presenting: the panel is not drawn
        assert ok(teacher).session_state["lesson_step"] == want
        assert record.current().state["step"] == want
        student.run()
        assert ok(student).session_state["lesson_step"] == want
    teacher.button(key="lesson_unpresent").click().run()  # Esc
    assert record.leading
    teacher.button(key="lesson_next").click().run()
    student.run()
    assert ok(student).session_state["lesson_step"] == ok(teacher).session_state["lesson_step"]
    at = teacher.session_state["lesson_step"]
    # a reload or a second tab of the teacher's browser (its cookie; in AppTest, without cookies,
    # the session id in the URL) is the teacher's, leads, and opens on the class's step
    second = lesson(sid=teacher.session_state["sid"])
    assert second.session_state["teacher"] and record.leading
    assert second.session_state["lesson_step"] == at
    second.button(key="lesson_next").click().run()
    assert record.current().state["step"] == ok(second).session_state["lesson_step"] != at
    second.button(key="lesson_lead_off").click().run()
    assert not record.leading


def test_the_whole_lesson_as_one_html_file() -> None:
    at = lesson()
    at.button(key="lesson_export_build").click().run()
    ok(at)
    assert at.get("download_button")
    from ui.lesson import _exports

    store, _ = _exports()
    page = list(store.values())[-1].decode()
    assert page.count("<section") == len(STEPS)
    positions = [page.index(f"· {s.title}".replace('"', "&quot;")) for s in STEPS]
    assert positions == sorted(positions)  # in the lesson's order
    assert "What to notice" in page and "<script src" not in page.lower()  # nothing fetched


def test_the_choice_step_is_the_agreement_models_head_recomputed_with_plain_hooks() -> None:
    """Issue 31, item 4 in the lesson: after 'Does the head that looks decide?' (coref: no), the
    agreement model's pattern head. The figure's pattern is the recorded row, the probabilities
    with the head off are recomputed with a plain forward hook on its slice of hook_z, and the
    notice follows the chosen sentence."""
    from tfviz.paths import zoo_dir

    ck = load_checkpoint(zoo_dir() / "agreement.safetensors")
    at = rerun(lesson(), lesson_step="it-choice")
    first = notice(at)
    head = re.search(r"\*\*(L(\d+)H(\d+))\*\* puts", first)
    assert head, first
    layer, h = int(head.group(2)), int(head.group(3))
    fig = chart(at, "lesson_it-choice")
    bars = [t for t in fig["data"] if t["type"] == "bar"]
    for sentence in (1, 2):
        if sentence == 2:
            at = rerun(at, **{[r.key for r in at.radio if r.label == "Sentence"][0]: 2})
            fig = chart(at, "lesson_it-choice")
            bars = [t for t in fig["data"] if t["type"] == "bar"]
            assert notice(at) != first and "their" in notice(at)
        ex = ck.build_task().mission_sentences()[sentence - 1]
        x, q = torch.tensor([ex.tokens]), ex.meta["query_index"]
        rec = tfviz.record(ck.model, x, names=[f"blocks.{layer}.attn.hook_pattern"])
        np.testing.assert_allclose(arr(bars[0]["y"]), rec[f"blocks.{layer}.attn.hook_pattern"][0, h, q].numpy(),
                                   atol=1e-6)
        off = head_zeroed(ck.model, x, layer, h)[0, q].softmax(-1)
        names = [t["name"] for t in bars[1:]]  # P(law), P(rule)
        i_off = list(bars[1]["x"]).index(f"{head.group(1)} off")
        for t, name in zip(bars[1:], names):
            word = name[2:-1]
            assert abs(arr(t["y"])[i_off] - off[ck.tokenizer.token_to_id(word)].item()) < 1e-5, (name, sentence)
        top = ck.tokenizer.tokens_of([int(off.argmax())])[0]
        assert f"answer becomes **{top}** ({off.max().item():.2f})" in notice(at)


def test_the_sinks_step_is_the_models_loss_recomputed_with_plain_forwards() -> None:
    """Issue 33, item 1 in the lesson: the window step's notice quotes the loss beyond the training
    length under full attention and under recomputation of the window, and the figure's full-attention
    curve is the model's own loss; both recomputed here with plain forwards on the same fresh text."""
    import pandas as pd
    import torch.nn.functional as F

    from tfviz.analysis import sinks
    from tfviz.paths import zoo_dir
    from tfviz.viz.sinks import SMOOTH

    ck = load_checkpoint(zoo_dir() / "lm-bos.safetensors")
    length, bos = sinks.text_setting(ck.task)
    w = length // 2
    at = rerun(lesson(), lesson_step="sinks")
    words = notice(at)
    assert at.selectbox(key="lesson_sinks_window").value == w
    text = sinks.fresh_text(ck.tokenizer, sinks.FACTOR * length, bos=bos)
    with torch.no_grad():
        logits = ck.model.eval()(text)
        dense = F.cross_entropy(logits[:, :-1].transpose(1, 2), text[:, 1:], reduction="none").mean(0)
        recompute = torch.stack([F.cross_entropy(ck.model(text[:, max(0, p - w):p + 1])[:, -1], text[:, p + 1])
                                 for p in range(length, text.shape[1] - 1)])
    far_dense, far_rec = dense[length:].mean().item(), recompute.mean().item()
    m = re.search(r"loses \*\*([\d.]+)\*\* nats per token when the last (\d+) tokens are recomputed", words)
    assert m and int(m[2]) == w, words
    assert abs(float(m[1]) - far_rec) < 0.006, (m[1], far_rec)
    d = re.search(r"and ([\d.]+) \([+-][\d.]+\) with full attention over everything", words)
    assert d and abs(float(d[1]) - far_dense) < 0.006, (words, far_dense)
    curve = next(t for t in chart(at, "lesson_sinks")["data"] if t["name"] == sinks.condition_label("dense"))
    smoothed = pd.Series(dense.double().numpy()).rolling(SMOOTH, min_periods=1).mean().to_numpy()
    np.testing.assert_allclose(arr(curve["y"]), smoothed, atol=1e-4)
    assert "paper's signature" in words  # held, half held or absent: always said
    (link,) = [p for p in at.get("page_link") if "masks" in p.proto.page]  # go deeper: the same measurement
    assert "sinks=True" in link.proto.query_string and f"sink_window={w}" in link.proto.query_string, link.proto
