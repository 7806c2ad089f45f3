"""Suite-wide pytest setup."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

E2E_DIR = Path(__file__).parent / "e2e"

try:  # Hypothesis is a dev requirement; CI machines are slow and noisy, so no per-example deadline.
    from hypothesis import settings

    settings.register_profile("ci", deadline=None, print_blob=True)
    if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
        settings.load_profile("ci")
except ImportError:  # pragma: no cover
    pass


def pytest_report_header(config: pytest.Config) -> str:
    chromium = os.environ.get("TFVIZ_CHROMIUM", "/usr/bin/chromium")  # as in tests/e2e/conftest.py
    if os.access(chromium, os.X_OK):
        return f"e2e: using {chromium}"
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
    return f"e2e: NO CHROMIUM at {chromium}: browser tests will {'FAIL (CI)' if ci else 'be SKIPPED'}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/e2e/ gets the `e2e` marker, so `-m "not e2e"` skips the browser.
    A test marked `gpu` is skipped cleanly where torch sees no CUDA GPU. No other test may assume
    a GPU is there or not: one about the CPU branch monkeypatches torch.cuda.is_available."""
    gpu_skip = None
    for item in items:
        if E2E_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
        if item.get_closest_marker("gpu"):
            if gpu_skip is None:
                import torch

                gpu_skip = (None if torch.cuda.is_available()
                            else pytest.mark.skip(reason="needs a CUDA GPU (torch sees none)"))
            if gpu_skip is not None:
                item.add_marker(gpu_skip)


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory):
    """Real (tiny, briefly trained) checkpoints in a temp folder that the app lists as 'shipped':
    TFVIZ_CHECKPOINT_DIR points the app there, in this process (AppTest) and in the e2e server."""
    from tiny_zoo import build

    folder = tmp_path_factory.mktemp("checkpoints")
    paths = build(folder)
    old = os.environ.get("TFVIZ_CHECKPOINT_DIR")
    os.environ["TFVIZ_CHECKPOINT_DIR"] = str(folder)
    yield paths
    if old is None:
        os.environ.pop("TFVIZ_CHECKPOINT_DIR", None)
    else:
        os.environ["TFVIZ_CHECKPOINT_DIR"] = old


@pytest.fixture
def one_thread():
    """Torch on one thread for the test (tiny models run fastest so, and the suite shares two
    cores); the previous count restored after. Use: ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
