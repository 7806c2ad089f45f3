"""Home: what tfviz is, which device it runs on, and where to start."""
import streamlit as st

from ui.common import device_banner
from ui.navigation import guided_tour

st.title("tfviz")
st.markdown(
    "tfviz lets you and your students **train small transformers right here in the browser** and "
    "then **look inside them**: the queries, keys and values (Q/K/V) each token produces, the "
    "attention map of every head, how positional encodings and rotary embeddings (RoPE) encode "
    "order, what causal and padding masks hide, how different positional and attention schemes "
    "compare on the same task, and what a model costs in time and memory. Models are small "
    "enough to train in seconds to minutes, so every change you make is something you can see."
)

device_banner()

st.subheader("Guided tour")
st.caption("Each step is a page of the sidebar, in its order:")
guided_tour()
