"""Who this browser tab is: an id kept in the URL (``?sid=…``), so that a reload finds the same
training jobs and uploads again. Only 12 hex characters are accepted (it names a folder). The
model picked in the sidebar is kept there too (``?model=…``, written with the page's other
settings by ``ui.links``), so a reload opens on it instead of the page's default. While a lesson
is presented (``HIDDEN``) the id stays out of the address bar: whoever reads it on the projector
could open this session."""
from __future__ import annotations

import re
import uuid

import streamlit as st

URL_MODEL = "_url_model"  # session-state key: the picked model's id in the URL (``?model=…``, ui.links)
HIDDEN = "_sid_hidden"  # session-state flag: keep the id out of the address bar (presenting: ui.lesson)
SID = re.compile(r"[0-9a-f]{12}")  # tfviz.paths.SESSION_ID (importing tfviz loads torch: Home would
# wait seconds for it before it shows anything); tests/test_app.py checks that they agree


def session_id() -> str:
    """This session's id: from the URL when it holds a valid one, else a new one, written back to
    the URL on every run (a page switch drops the query string)."""
    if "sid" not in st.session_state:
        sid = st.query_params.get("sid", "")
        st.session_state["sid"] = sid if SID.fullmatch(sid or "") else uuid.uuid4().hex[:12]
    if st.session_state.get(HIDDEN):  # a projector shows the address bar: the id opens this session
        if "sid" in st.query_params:
            del st.query_params["sid"]
    elif st.query_params.get("sid") != st.session_state["sid"]:
        st.query_params["sid"] = st.session_state["sid"]
    return st.session_state["sid"]
