"""Small Streamlit helpers used by several pages."""
from __future__ import annotations

import streamlit as st


@st.cache_resource(show_spinner="Loading PyTorch…")
def _cached_device() -> str:
    # Once per server process: the first visitor pays the torch import, everyone else gets it free.
    from tfviz.device import describe_device  # imported here: torch takes seconds to import

    return describe_device()


def device_banner() -> None:
    """An info box saying which device this server trains on."""
    label = _cached_device()
    note = "" if label.startswith("GPU") else " — no GPU found; the small models here still train in seconds to minutes."
    st.info(f"**Device:** {label}{note}", icon=":material/memory:")
