"""The zoo: shipped models that show the real phenomena, each trained by one reproducible command
and measured, never asserted.

    python -m tfviz.zoo build [--only NAME ...] [--out checkpoints] [--steps N]
    python -m tfviz.zoo evaluate [--dir checkpoints] [--only NAME ...]
    python -m tfviz.zoo list
    python -m tfviz.zoo causal [--dir checkpoints]

``specs``     what is trained (task, model, training; fixed seeds, CPU, one thread)
``measure``   how each kind is measured, on a fixed sample (the card stores those numbers)
``build``     train -> save -> load -> measure -> card (in the checkpoint's extra, NAME.json,
              NAME.md) -> README.md; ``evaluate`` re-measures shipped files against their cards
``cards``     reading cards back (header only) and writing them as text
``findings``  the claims (coref heads, induction contrast, positional ordering) as data, and live
              helpers for the Findings page
``causal``    the head claims re-measured by switching heads off (``python -m tfviz.zoo causal``)
"""
from .build import build, build_one, evaluate
from .cards import headline, read_card, read_cards
from .measure import compare, measure
from .specs import BY_NAME, SPECS, ZooSpec, select

__all__ = ["BY_NAME", "SPECS", "ZooSpec", "build", "build_one", "compare", "evaluate", "headline",
           "measure", "read_card", "read_cards", "select"]
