"""Several data-parallel workers, each its own process with its own data path (sampler, cache
of ``cache_size / world`` percent, storage counters), sharing importance scores.

Synchronous data parallelism with gradients averaged over the workers is the same update as
one step on the concatenated global batch, so the coordinator trains one model on the
concatenation of the workers' slices (rank order) and sends every worker the per-sample
losses of every slice: each worker ranks and learns its own slice's scores and, with
``share_importance``, the other workers' too (an all-gather of (sample id, loss)), so every
worker's score table and importance draws are the same.
"""
from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace
from pathlib import Path

import numpy as np

from sw_model.clicklog import ClickData
from .datapath import DataPath, DataPathConfig
from .importance import sample_losses
from .store import IOModel, SampleStore


def _worker(conn, store_dir: str, io: IOModel, cfg: DataPathConfig):
    try:
        dp = DataPath(SampleStore(store_dir, io), cfg)
        conn.send(("ready", dp.batches_per_epoch))
    except Exception as e:           # report construction errors to the coordinator
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        cmd, *args = conn.recv()
        try:
            if cmd == "batch":
                ids = dp.ids(args[0])
                out = (ids, dp.store.peek(ids))
            elif cmd == "feedback":
                dp.feedback(*args)
                out = None
            elif cmd == "snapshot":
                dp.snapshot(*args)
                out = None
            elif cmd == "recover":
                dp.recover(*args)
                out = None
            elif cmd == "stats":
                out = dict(dp.stats(belady=False), log=dp.log, trace=dp.trace,
                           observations=dp.observations, capacity=dp.capacity)
            elif cmd == "close":
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", out))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


class WorkerError(RuntimeError):
    """A worker process failed; the message is the worker's error."""


class DistributedDataPath:
    """``world`` worker processes behind the trainer's data-path interface (``batch``,
    ``losses``, ``snapshot``, ``recover``, ``stats``). Use as a context manager (the workers
    are stopped on exit). ``cfg.rank`` is ignored (each worker gets its own)."""

    def __init__(self, store_dir, cfg: DataPathConfig, world: int, io: IOModel = IOModel()):
        # fork: the workers start in milliseconds and need no importable __main__
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self.world = world
        self._conns, self._procs = [], []
        for r in range(world):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(b, str(Path(store_dir)), io,
                                                  replace(cfg, rank=r, world=world)),
                            daemon=True)
            p.start()
            self._conns.append(a)
            self._procs.append(p)
        got = [self._recv(r) for r in range(world)]
        self.batches_per_epoch = got[0]
        self._slices: list = []

    def _recv(self, r: int):
        try:
            status, out = self._conns[r].recv()
        except EOFError:
            raise WorkerError(f"worker {r} exited (exit code {self._procs[r].exitcode})") from None
        if status == "error":
            raise WorkerError(f"worker {r}: {out}")
        return out

    def _all(self, *msg):
        for c in self._conns:
            c.send(msg)
        return [self._recv(r) for r in range(self.world)]

    def batch(self, b: int) -> ClickData:
        got = self._all("batch", b)
        self._slices = [ids for ids, _ in got]
        return ClickData.concat([d for _, d in got])

    __call__ = batch

    def losses(self, b: int, logits, labels):
        loss = sample_losses(logits, labels)
        cuts = np.cumsum([len(s) for s in self._slices])[:-1]
        slices = list(zip(self._slices, np.split(loss, cuts)))
        self._all("feedback", b, slices)

    def snapshot(self, b: int):
        self._all("snapshot", b)

    def recover(self, committed: int, mlp_epoch):
        self._all("recover", committed, mlp_epoch)

    def stats(self) -> list[dict]:
        return self._all("stats")

    def close(self):
        for r, c in enumerate(self._conns):
            try:
                c.send(("close",))
                c.recv()
            except (OSError, EOFError):
                pass
        for p in self._procs:
            p.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
