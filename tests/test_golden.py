"""The shipped checkpoints still compute the same numbers: every hook point, the logits (both
attention paths), the positional tables and generation, against ``tests/golden/shipped.json``.

After retraining a shipped model, regenerate its entry: ``python -m tests.golden --update NAME``
(see tests/golden.py)."""
from __future__ import annotations

import pytest

import golden

GOLDEN = golden.load()
SHIPPED = golden.shipped()


def test_every_shipped_checkpoint_has_a_golden_entry() -> None:
    assert SHIPPED, f"no checkpoints in {golden.CHECKPOINTS}"
    missing = sorted(set(SHIPPED) - set(GOLDEN))
    stale = sorted(set(GOLDEN) - set(SHIPPED))
    assert not missing, f"no golden numbers for {missing}: run python -m tests.golden --update {' '.join(missing)}"
    assert not stale, f"golden numbers for checkpoints that are gone: {stale} (python -m tests.golden --update)"


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_shipped_checkpoint_gives_the_golden_numbers(name: str) -> None:
    if name not in SHIPPED:
        pytest.skip(f"{name} is not shipped any more")
    entry = GOLDEN[name]
    path = SHIPPED[name]
    if golden.sha256(path) != entry["checkpoint_sha256"]:
        pytest.fail(f"{path.name} changed since its golden numbers were recorded (retrained?): "
                    f"run python -m tests.golden --update {name} and commit tests/golden/shipped.json")
    problems = golden.compare(entry["tensors"], golden.compute(path))
    assert not problems, f"{name}: {len(problems)} difference(s):\n" + "\n".join(problems[:30])
