"""One figure theme for every tfviz figure: a registered Plotly template, colour scales, sizes.

* ``ATTENTION_SCALE`` — sequential (viridis), always used with ``zmin=0, zmax=1`` so the same
  colour means the same attention weight in every figure. Its ends are neither white nor black,
  so it reads on light and dark pages alike.
* ``MAGNITUDE_SCALE`` — sequential (cividis) for other magnitudes (gradient norms, log scale).
* ``DIVERGING_SCALE`` — blue (negative) / light grey (0) / red (positive), always centred on 0:
  scores, q·k, biases, cosine similarity, positional-encoding values.
* ``apply_theme(fig, dark=False)`` — sets the template (re-appliable: call it again with
  ``dark=True`` to switch a finished figure). Backgrounds are transparent so the page shows through;
  in Streamlit pass ``theme=None`` to ``st.plotly_chart`` to keep this theme.

Also the small label helpers every builder shares, so hover text and tick labels look alike.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

TEMPLATE = "tfviz"
TEMPLATE_DARK = "tfviz_dark"

FONT_FAMILY = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
FONT_SIZE = 13
MARGIN = dict(l=70, r=30, t=60, b=60)
INK_LIGHT, INK_DARK = "#1f2937", "#e5e7eb"
GRID = "rgba(128,128,128,0.25)"

# viridis, sampled; fixed to 0..1 for attention.
ATTENTION_SCALE = [
    [0.0, "#440154"], [0.1, "#482475"], [0.2, "#414487"], [0.3, "#355f8d"], [0.4, "#2a788e"],
    [0.5, "#21918c"], [0.6, "#22a884"], [0.7, "#44bf70"], [0.8, "#7ad151"], [0.9, "#bddf26"],
    [1.0, "#fde725"],
]
# RdBu reversed: blue < 0 < red, a light grey (not white) centre.
DIVERGING_SCALE = [
    [0.0, "#053061"], [0.1, "#2166ac"], [0.2, "#4393c3"], [0.3, "#92c5de"], [0.4, "#d1e5f0"],
    [0.5, "#ececec"], [0.6, "#fddbc7"], [0.7, "#f4a582"], [0.8, "#d6604d"], [0.9, "#b2182b"],
    [1.0, "#67001f"],
]
# Sequential, for magnitudes that are not attention weights (e.g. gradient norms, on a log scale):
# cividis, so it is never mistaken for the 0..1 attention scale.
MAGNITUDE_SCALE = "Cividis"
# Distinct colours for heads / schemes / candidates (Okabe–Ito + extras, colour-blind safe first).
HEAD_COLOURS = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#7f7f7f",
    "#8c564b", "#17becf", "#bcbd22", "#9467bd",
]
ALLOWED_COLOUR, BLOCKED_COLOUR = "#3b82f6", "#cbd5e1"


def _template(ink: str) -> go.layout.Template:
    axis = dict(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID, ticks="outside",
                tickcolor=GRID, automargin=True, title=dict(standoff=8))
    return go.layout.Template(layout=dict(
        font=dict(family=FONT_FAMILY, size=FONT_SIZE, color=ink),
        title=dict(x=0.01, xanchor="left", font=dict(size=FONT_SIZE + 3)),
        paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
        margin=MARGIN, colorway=HEAD_COLOURS, hovermode="closest",
        hoverlabel=dict(font=dict(family=FONT_FAMILY, size=FONT_SIZE)),
        xaxis=axis, yaxis=axis,
        legend=dict(bgcolor="rgba(0,0,0,0)"),
        coloraxis=dict(colorbar=dict(thickness=12, outlinewidth=0)),
    ))


def register() -> None:
    """Register the light and dark templates with plotly.io (idempotent; done on import)."""
    if TEMPLATE not in pio.templates:
        pio.templates[TEMPLATE] = _template(INK_LIGHT)
    if TEMPLATE_DARK not in pio.templates:
        pio.templates[TEMPLATE_DARK] = _template(INK_DARK)


register()


def apply_theme(fig: go.Figure, *, title: str | None = None, height: int | None = None,
                width: int | None = None, dark: bool = False) -> go.Figure:
    """Apply the tfviz template (light or dark ink) and optional title/size; returns ``fig``."""
    fig.update_layout(template=TEMPLATE_DARK if dark else TEMPLATE)
    if title is not None:
        fig.update_layout(title=dict(text=title))
    if height is not None:
        fig.update_layout(height=int(height))
    if width is not None:
        fig.update_layout(width=int(width))
    return fig


TITLE_CHARS = 46  # a title line that fits a 470 px chart (two charts a row at 1440 px, one at 1024)


def wrap_title(text: str, chars: int = TITLE_CHARS) -> tuple[str, int]:
    """``text`` broken into lines of at most ``chars`` characters at spaces (Plotly joins them
    with <br>; a chart narrower than its title cut it) -> (text, number of lines)."""
    lines: list[str] = []
    for word in str(text).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines), len(lines)


def titled(fig: go.Figure, title: str, chars: int = TITLE_CHARS) -> go.Figure:
    """The title wrapped (``wrap_title``), the top margin grown by a line for each extra line."""
    text, n = wrap_title(title, chars)
    fig.update_layout(title=dict(text=text), margin=dict(t=MARGIN["t"] + 22 * (n - 1)))
    return fig


def attention_colour(colorbar_title: str = "weight") -> dict:
    """Heatmap kwargs for attention weights: the sequential scale fixed to 0..1."""
    return dict(colorscale=ATTENTION_SCALE, zmin=0.0, zmax=1.0,
                colorbar=dict(title=dict(text=colorbar_title), thickness=12, outlinewidth=0))


def diverging_colour(values, colorbar_title: str = "value", limit: float | None = None) -> dict:
    """Heatmap kwargs for signed values: the diverging scale centred on 0, symmetric limits."""
    if limit is None:
        finite = np.asarray(values, dtype=float)
        finite = finite[np.isfinite(finite)]
        limit = float(np.abs(finite).max()) if finite.size else 1.0
    limit = limit or 1.0
    return dict(colorscale=DIVERGING_SCALE, zmid=0.0, zmin=-limit, zmax=limit,
                colorbar=dict(title=dict(text=colorbar_title), thickness=12, outlinewidth=0))


def show_token(token: str) -> str:
    """A token as text safe for Plotly labels: whitespace made visible, ``<``/``&`` escaped
    (Plotly renders a subset of HTML in labels, so a token "<br>" must not become a line break)."""
    token = str(token).replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥")
    return html.escape(token, quote=False)


def position_labels(tokens: Sequence[str], role: str, prefix: str = "") -> list[str]:
    """Unique category labels ``"{prefix}{role} 'tok' (pos i)"`` — one per position, so equal
    token strings never merge on a categorical axis; they double as hover text."""
    return [f"{prefix}{role} '{show_token(t)}' (pos {i})" for i, t in enumerate(tokens)]


def default_tokens(n: int, tokens: Sequence[str] | None = None) -> list[str]:
    """``tokens`` as a list of str, or placeholder names "0".."n-1"; checks the length."""
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"got {len(tokens)} tokens for an axis of length {n}")
    return tokens


def tick_step(n: int, max_ticks: int = 48) -> int:
    """Show every k-th tick label so at most ``max_ticks`` labels crowd an axis."""
    return max(1, math.ceil(n / max_ticks))


def cell_size(n: int, lo: int = 8, hi: int = 28, target: int = 560) -> int:
    """Pixels per heatmap cell for an axis of ``n`` cells, clamped to [lo, hi]."""
    return int(min(hi, max(lo, target // max(n, 1))))


def below_axis_px(tick_labels: Sequence[str] = ()) -> int:
    """Pixels an x axis takes below the plot: ticks, its tick labels however far Plotly turns
    them (up to upright, 90°, when they are crowded: the worst case is assumed) and its title."""
    longest = max((len(str(t)) for t in tick_labels), default=5)
    return int(10 + 0.62 * FONT_SIZE * longest + 8 + 1.6 * FONT_SIZE + 8)


def play_controls(frame_names: Sequence[str], prefix: str, duration: int = 300, *,
                  below_px: int | None = None) -> dict:
    """Layout kwargs for an animation: ▶/❚❚ buttons and, under them, a slider with one step per
    frame (labelled with the frame name), both in the bottom margin *below* the x axis's labels
    and title (``below_px``: the space they take, ``below_axis_px``), so nothing overlaps. The
    bottom margin is enlarged to hold them; stacked rather than side by side so narrow figures
    do not overlap them. ``controls_px(layout)`` is where they start."""
    below = below_axis_px() if below_px is None else int(below_px)

    def args(frames, ms):
        return [frames, dict(mode="immediate", fromcurrent=True, transition=dict(duration=0),
                             frame=dict(duration=ms, redraw=True))]

    return dict(
        margin=dict(b=below + CONTROLS_PX),
        updatemenus=[dict(type="buttons", direction="left", showactive=False, x=0, xanchor="left",
                          y=0, yanchor="top", pad=dict(t=below), buttons=[
                              dict(label="▶ play", method="animate", args=args(None, duration)),
                              dict(label="❚❚ pause", method="animate", args=args([None], 0))])],
        sliders=[dict(active=0, x=0, len=1.0, xanchor="left", y=0, yanchor="top",
                      pad=dict(t=below + BUTTONS_PX), currentvalue=dict(prefix=prefix),
                      steps=[dict(label=str(n), method="animate", args=args([str(n)], 0))
                             for n in frame_names])])


BUTTONS_PX = 45              # the play/pause row and a gap
CONTROLS_PX = BUTTONS_PX + 90  # + the slider: its current value, rail and step labels