"""Cheap tasks for the executor tests (tests/model/test_cluster.py). A module of their own so a
Dask worker process imports them by name."""
import os
import time
from pathlib import Path


def square(item, *, progress):
    """``item ** 2``, reporting progress in two steps; ``item`` may be ``(value, pause_s)``."""
    value, pause = item if isinstance(item, tuple) else (item, 0.0)
    progress(0)
    time.sleep(pause)
    progress(1)
    return value * value


def fail_on(item, *, progress, bad):
    """Raise ValueError for ``bad``, else return ``item``."""
    if item == bad:
        raise ValueError(f"task {item} fails on purpose")
    return item


def kill_worker_once(item, *, progress, marker: str, victim, pause: float = 0.3):
    """Square ``item``; the first attempt at ``victim`` ends its worker process at once
    (``os._exit``), leaving ``marker`` behind, so the scheduler must run it again elsewhere.
    Every attempt appends ``item`` to ``<marker>.log``."""
    with open(marker + ".log", "a") as f:
        f.write(f"{item} {os.getpid()}\n")
    time.sleep(pause)
    if item == victim and not Path(marker).exists():
        Path(marker).write_text(str(os.getpid()))
        os._exit(1)
    return item * item
