"""Where tfviz keeps files: one function per folder, one environment variable per folder, always
absolute (never relative to the working directory).

    checkpoint_dir()   $TFVIZ_CHECKPOINT_DIR, else <repo>/checkpoints   the app's model folder:
                       shipped models at its top, and below it
    published_dir()      <checkpoint_dir>/published                      models the teacher shares
    sessions_dir()       <checkpoint_dir>/user                           one folder per browser session
    zoo_dir()          $TFVIZ_ZOO_DIR, else <repo>/checkpoints          the zoo the Findings page and
                                                                        ``python -m tfviz.zoo`` use
    bench_dir()        <repo>/docs/bench                                reference benchmark CSVs
    models_dir()       $TFVIZ_MODELS_DIR, else <repo>/models            Hugging Face model folders to
                                                                        open (tfviz.interop; git-ignored)
    ray_store_dir()    $TFVIZ_RAY_STORE_DIR, else                       the run store of a Ray cluster
                       ~/.local/share/tfviz/ray                         (TFVIZ_RAY_ADDRESS): read on the
                                                                        head node, a local disk, never shared
    hf_cache_dir()     $HF_HUB_CACHE, else $HF_HOME/hub, else           the local Hugging Face cache
                       ~/.cache/huggingface/hub                         (read only, never downloaded to)
    session_dir(sid)   <checkpoint_dir>/user/<sid>                      one session's trained/, uploaded/
    runs_dir()           <checkpoint_dir>/runs                           the run store (runs.sqlite: every
                                                                        training's record + the disk ledger)
                                                                        and the checkpoints of runs without one

In a normal run checkpoint_dir() and zoo_dir() are the same folder; the tests point the app at a
folder of tiny models (TFVIZ_CHECKPOINT_DIR) while the Findings page keeps reading the real zoo.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "checkpoints"  # the repository's shipped models (the zoo), whatever the environment says


def _from_env(variable: str, default: Path) -> Path:
    value = os.environ.get(variable)
    return Path(value).expanduser().resolve() if value else default


def checkpoint_dir() -> Path:
    return _from_env("TFVIZ_CHECKPOINT_DIR", SHIPPED)


def published_dir() -> Path:
    return checkpoint_dir() / "published"


def sessions_dir() -> Path:
    return checkpoint_dir() / "user"  # git-ignored


def runs_dir() -> Path:
    return checkpoint_dir() / "runs"  # git-ignored


def runs_db() -> Path:
    """The run store of this checkpoint folder (``tfviz.runs.store``): one SQLite file."""
    return runs_dir() / "runs.sqlite"


def zoo_dir() -> Path:
    return _from_env("TFVIZ_ZOO_DIR", SHIPPED)


def bench_dir() -> Path:
    return REPO / "docs" / "bench"


def models_dir() -> Path:
    return _from_env("TFVIZ_MODELS_DIR", REPO / "models")


def ray_store_dir() -> Path:
    """Where a Ray cluster's run store (``tfviz.runs.ray``) keeps its SQLite file: resolved
    by the store's actor on the head node, so a folder on that node's own disk."""
    return _from_env("TFVIZ_RAY_STORE_DIR", Path("~/.local/share/tfviz/ray").expanduser())


def hf_cache_dir() -> Path:
    """Where ``huggingface_hub`` keeps its cache (its own variables, in its order of precedence)."""
    if os.environ.get("HF_HUB_CACHE"):
        return _from_env("HF_HUB_CACHE", Path())
    if os.environ.get("HF_HOME"):
        return _from_env("HF_HOME", Path()) / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


SESSION_ID = re.compile(r"[0-9a-f]{12}")  # a browser session's id (12 hex digits: a folder name)


def session_dir(sid: str) -> Path:
    """One session's folder (``trained/`` and ``uploaded/`` below it); ValueError for an id that is
    not 12 hex digits (it becomes a folder name)."""
    if not isinstance(sid, str) or not SESSION_ID.fullmatch(sid):
        raise ValueError("a session id is 12 hexadecimal digits")
    return sessions_dir() / sid


_ABSOLUTE = re.compile(r"(?<![\w.~])/(?:[^\s/:'\"()\[\]]+/)+([^\s/:'\"()\[\]]+)")


def scrub(text: str) -> str:
    """``text`` for a user's eyes: every absolute path becomes its last part
    (``/srv/tfviz/checkpoints/user/3fa9c2e1b7d0/trained/big.safetensors`` -> ``big.safetensors``),
    so no message shows how the server's folders are laid out."""
    return _ABSOLUTE.sub(r"\1", str(text))
