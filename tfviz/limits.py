"""How much one session may make a shared server do: every configurable limit in one place, one
environment variable each, read when asked (so a server, or a test, sets them before use).

    variable                   default   what it bounds
    TFVIZ_CHECKPOINT_MB        1024      the largest checkpoint the app trains or opens from its own
                                         folders (shipped, published, trained); the Train page
                                         refuses a model whose checkpoint would be larger
    TFVIZ_LOCAL_MODEL_MAX_MB   2048      a model folder the server reads from its own disk (a Hugging
                                         Face folder: GPT-2 124M is 475 MB); never an upload
    TFVIZ_TOKENIZER_MAX_MB     32        a model folder's tokenizer.json (GPT-2's is 1.4 MB, Llama 3's
                                         8.7 MB, Qwen2's 7 MB), refused before it is read
    TFVIZ_TOKENIZER_MAX_GROWTH 1000      how many times longer a tokenizer's normalizer and
                                         pre-tokenizer may make a text (worst case, from its rules:
                                         GPT-2's 5, BERT's 4, NFKC's 18); more is refused at load,
                                         as is a regex that can backtrack exponentially
    TFVIZ_TOKENIZER_MAX_CHARS  1000000   characters one encoding may hold after those rules: a
                                         tokenizer reads at most this / its growth characters at
                                         once (longer texts in pieces)
    TFVIZ_TEXT_MAX_CHARS       20000     text typed on a page (the text areas stop there; longer
                                         text, e.g. from a link, is cut with a note)
    TFVIZ_GRID_MAX_GFLOP       1000      one causal grid on the CPU (heads switched off one at a
                                         time, patching): tokens x heads x layers forwards, in
                                         GFLOP of the model (GPT-2 small, every head, 40 tokens);
                                         a larger one is refused (0 = no limit)
    TFVIZ_GRID_AUTO_GFLOP      20        a larger grid waits for a button (its time estimated from
                                         one forward, shown on it) instead of starting when the tab
                                         opens; the shipped models' grids are below 6
    (FOLDER_JSON_MB)           4         a model folder's config.json, shard index,
                                         tokenizer_config.json, special_tokens_map.json (real ones:
                                         a few kB; a 70B model's index: 60 kB)
    (UPLOAD_MB)                50        one uploaded file (= server.maxUploadSize in
                                         .streamlit/config.toml)
    TFVIZ_SESSION_UPLOAD_MB    200       one session's uploads together
    TFVIZ_DISK_QUOTA_MB        5120      every session's files together (uploads + trained models);
                                         published and shipped models do not count
    TFVIZ_SESSION_IDLE_DAYS    14        a session's files are deleted after this many idle days
                                         (0 = never); published models never expire
    TFVIZ_MAX_JOBS             2         trainings running at once (the rest queue, round-robin by
                                         session)
    TFVIZ_JOBS_PER_SESSION     2         one session's jobs, running + queued
    TFVIZ_JOB_MAX_MINUTES      30        one job's running time in the app (it then stops and saves
                                         a resumable checkpoint; 0 = no cap; the CLI is never capped)
    TFVIZ_CHECKPOINT_SECONDS   60        a run saves a resumable checkpoint at least this often (seconds
                                         of training), so a killed worker or server loses at most that
    TFVIZ_RUN_LEASE_S          15        a running run's worker renews its lease every second; a run
                                         whose lease ran out (its worker died) is queued again and
                                         resumes from its last checkpoint
    TFVIZ_WORKER_IDLE_S        600       an idle training worker process exits after this long (the
                                         next Start starts one again: about 2 s)
    TFVIZ_START_NEXT_WAIT_S    60        the teacher's "Start next": if no slot frees within this many
                                         seconds, the longest-running run is paused (and resumes later)
    TFVIZ_TRAIN_MEMORY_MB      auto      memory one training may plan to use; auto = half the free
                                         RAM (CPU) or 80% of the free GPU memory when it starts
    TFVIZ_MODEL_CACHE_MB       auto      loaded models kept in memory, shared by every session;
                                         auto = 15% of the machine's RAM, at most 2048
    MIN_TEACHER_KEY            12        characters a TFVIZ_TEACHER_KEY must have to enable the
                                         Teacher panel (e.g. ``python -c "import secrets;
                                         print(secrets.token_urlsafe(12))"``: 16 characters)
    TFVIZ_RAY_ADDRESS          (unset)   a Ray cluster to train on ("auto", or the head's host:port):
                                         runs, their records and the queue go there
                                         (``tfviz.runs.ray``, docs/deploy.md); unset = this machine
"""
from __future__ import annotations

import os

MB = 2**20
UPLOAD_MB = 50
MIN_TEACHER_KEY = 12
FOLDER_JSON_MB = 4
FOLDER_JSON_CONTAINERS = 100_000   # brackets in one such file (a config.json has tens)
TOKENIZER_CONTAINERS = 1_000_000   # brackets in a tokenizer.json: one per merge (Llama 3: 280k)
TEACHER_ATTEMPT_INTERVAL_S = 1.0  # server-wide: at most one teacher-key check per second
TEACHER_BACKOFF_MAX_S = 60.0  # a session's wait after wrong keys doubles (1, 2, 4 ... s) up to this
CPU_MEMORY_SHARE = 0.5
GPU_MEMORY_SHARE = 0.8


def _number(variable: str, default: float | None, low: float = 0) -> float | None:
    raw = os.environ.get(variable, "").strip()
    if not raw or raw.lower() == "auto":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{variable}={raw!r} must be a number") from None
    if not value >= low:
        raise ValueError(f"{variable}={raw!r} must be at least {low:g}")
    return value


def checkpoint_bytes() -> int:
    return int(_number("TFVIZ_CHECKPOINT_MB", 1024, 1) * MB)


def local_model_bytes() -> int:
    return int(_number("TFVIZ_LOCAL_MODEL_MAX_MB", 2048, 1) * MB)


def tokenizer_json_bytes() -> int:
    return int(_number("TFVIZ_TOKENIZER_MAX_MB", 32, 0) * MB)


def folder_json_bytes() -> int:
    return int(FOLDER_JSON_MB * MB)


def tokenizer_max_growth() -> int:
    return int(_number("TFVIZ_TOKENIZER_MAX_GROWTH", 1000, 1))


def tokenizer_max_chars() -> int:
    return int(_number("TFVIZ_TOKENIZER_MAX_CHARS", 1_000_000, 1000))


def tokenizer_bounds() -> dict[str, int]:
    """The keyword arguments ``tfviz.tokenize.Tokenizer`` takes for this server's bounds."""
    return {"max_growth": tokenizer_max_growth(), "max_normalized": tokenizer_max_chars()}


def text_chars() -> int:
    return int(_number("TFVIZ_TEXT_MAX_CHARS", 20_000, 1))


def grid_max_flops() -> float | None:
    """The most floating-point operations one causal grid may take on a CPU (None: no limit)."""
    gflop = _number("TFVIZ_GRID_MAX_GFLOP", 1000, 0)
    return gflop * 1e9 if gflop else None


def grid_auto_flops() -> float:
    """The most floating-point operations of a grid that starts without its button."""
    return float(_number("TFVIZ_GRID_AUTO_GFLOP", 20, 0)) * 1e9


def upload_bytes() -> int:
    return UPLOAD_MB * MB


def session_upload_bytes() -> int:
    return int(_number("TFVIZ_SESSION_UPLOAD_MB", 200, 0) * MB)


def disk_quota_bytes() -> int:
    return int(_number("TFVIZ_DISK_QUOTA_MB", 5120, 0) * MB)


def idle_seconds() -> float | None:
    """How long a session's files are kept after its last visit (None: forever)."""
    days = _number("TFVIZ_SESSION_IDLE_DAYS", 14, 0)
    return days * 86400 if days else None


def max_jobs() -> int:
    return int(_number("TFVIZ_MAX_JOBS", 2, 1))


def jobs_per_session() -> int:
    return int(_number("TFVIZ_JOBS_PER_SESSION", 2, 1))


def job_max_seconds() -> float | None:
    minutes = _number("TFVIZ_JOB_MAX_MINUTES", 30, 0)
    return minutes * 60 if minutes else None


def checkpoint_seconds() -> float:
    return float(_number("TFVIZ_CHECKPOINT_SECONDS", 60, 0.01))


def run_lease_seconds() -> float:
    return float(_number("TFVIZ_RUN_LEASE_S", 15, 0.5))


def worker_idle_seconds() -> float:
    return float(_number("TFVIZ_WORKER_IDLE_S", 600, 0))


def start_next_wait_seconds() -> float:
    return float(_number("TFVIZ_START_NEXT_WAIT_S", 60, 0))


def train_memory_bytes() -> int | None:
    """The configured training memory budget, or None for automatic (a share of what is free:
    ``tfviz.train.budget``)."""
    mb = _number("TFVIZ_TRAIN_MEMORY_MB", None, 1)
    return None if mb is None else int(mb * MB)


def model_cache_bytes(total_ram: int | None = None) -> int:
    mb = _number("TFVIZ_MODEL_CACHE_MB", None, 1)
    if mb is not None:
        return int(mb * MB)
    if total_ram is None:
        try:
            total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total_ram = 8 * 2**30
    return int(min(2048 * MB, 0.15 * total_ram))


def ray_address() -> str | None:
    """The Ray cluster runs train on (``TFVIZ_RAY_ADDRESS``), None: worker processes on this machine."""
    return os.environ.get("TFVIZ_RAY_ADDRESS", "").strip() or None
