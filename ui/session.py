"""Who this browser tab is: an id kept in the URL (``?sid=…``), so that a reload finds the same
training jobs and uploads again. Only 12 hex characters are accepted (it names a folder). The
model picked in the sidebar is kept there too (``?model=…``, written with the page's other
settings by ``ui.links``), so a reload opens on it instead of the page's default. While a lesson
is presented (``HIDDEN``) the id stays out of the address bar: whoever reads it on the projector
could open this session.

Who the student is (``client_id``): the ``tfviz_client`` cookie the server sets on every browser
(``ui.server``), the same in all its tabs, so six fresh tabs are still one student for the jobs
limit and the fair queue. A session without it (AppTest, a client refusing cookies) counts alone."""
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


CLIENT_COOKIE = "tfviz_client"  # ui.server's (importing it here would load starlette for every page)
CLIENT = re.compile(r"[0-9a-f]{16}")


def client_id() -> str:
    """The student behind this tab: the browser's cookie (16 hex digits: every tab of one
    browser), or, without one, this session's id (12 hex digits: it counts alone)."""
    try:
        cookie = st.context.cookies.get(CLIENT_COOKIE, "")
    except Exception:  # noqa: BLE001 - no request behind this run (AppTest, a bare script run)
        cookie = ""
    return cookie if isinstance(cookie, str) and CLIENT.fullmatch(cookie) else session_id()
