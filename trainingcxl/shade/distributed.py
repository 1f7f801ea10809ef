"""Several data-parallel workers, each its own process with its own data path (sampler,
storage counters), sharing importance scores and -- with ``cache_mode="shared"``, SHADE as
published -- one logical cache.

Synchronous data parallelism with gradients averaged over the workers is the same update as
one step on the concatenated global batch, so the coordinator trains one model on the
concatenation of the workers' slices (rank order) and sends every worker the per-sample
losses of every slice: each worker ranks and learns its own slice's scores and, with
``share_importance``, the other workers' too (an all-gather of (sample id, loss)), so every
worker's score table and importance draws are the same.

Shared cache: the cache of the full size is split into one shard per worker process, the
owner of sample s being :func:`.shards.owner` (Redis cluster's hash slot of the key). Every
worker is connected to every other by a pipe; a worker's read of batch b goes, per owner, as
one message ``("get", b, ids)`` to the owning process, which applies the reads of batch b it
received in worker order (each in its order) to its shard -- hit or miss, admission and
eviction by the policy with the shared scores -- and answers ``("ans", b, [(hit,
substitute)])``; the worker fetches its misses from storage itself. Reads of a worker's own
shard take the same path without a message. At the start of an importance epoch every worker
sends its shard's contents to every other (SHADE's sampler asks the Redis cluster which of its
draws are cached). Messages are small (one batch's ids per pair, a shard's keys per epoch);
a message larger than a pipe's buffer (64 KiB) would block its sender until the receiver reads.
"""
from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace
from pathlib import Path

import numpy as np

from sw_model.clicklog import ClickData
from .datapath import DataPath, DataPathConfig
from .importance import sample_losses
from .shards import owner
from .store import IOModel, SampleStore


class ShardPipes:
    """One worker's connections to the other workers' shards (the ``shards`` transport of
    :class:`DataPath`)."""

    def __init__(self, rank: int, world: int, peers: dict):
        self.rank, self.world, self.peers = rank, world, peers
        self.dp: DataPath | None = None
        self.messages = 0                     # messages this worker sent to other workers

    def _send(self, o: int, msg):
        self.peers[o].send(msg)
        self.messages += 1

    def _recv(self, o: int, kind: str, b: int):
        try:
            got = self.peers[o].recv()
        except EOFError:
            raise RuntimeError(f"worker {o} left the shared cache (batch {b})") from None
        if got[0] != kind or got[1] != b:
            raise RuntimeError(f"worker {self.rank} expected {kind!r} of batch {b} from worker "
                               f"{o}, got {got[0]!r} of batch {got[1]}")
        return got[2]

    def contents(self, b: int, own) -> set:
        for o in self.peers:
            self._send(o, ("contents", b, sorted(own)))
        out = set(own)
        for o in sorted(self.peers):
            out.update(self._recv(o, "contents", b))
        return out

    def access(self, b: int, ids) -> list:
        own = [owner(i, self.world) for i in ids]
        groups = [[i for i, o in zip(ids, own) if o == q] for q in range(self.world)]
        for o in self.peers:
            self._send(o, ("get", b, groups[o]))
        requests = [groups[q] if q == self.rank else self._recv(q, "get", b)
                    for q in range(self.world)]
        answers = self.dp.serve_shard(b, requests)
        for q in self.peers:
            self._send(q, ("ans", b, answers[q]))
        got = {q: iter(answers[q] if q == self.rank else self._recv(q, "ans", b))
               for q in range(self.world)}
        return [next(got[o]) for o in own]


def _worker(conn, peers, store_dir: str, io: IOModel, cfg: DataPathConfig):
    pipes = ShardPipes(cfg.rank, cfg.world, peers) if cfg.sharded else None
    try:
        dp = DataPath(SampleStore(store_dir, io), cfg, shards=pipes)
        if pipes is not None:
            pipes.dp = dp
        conn.send(("ready", dp.batches_per_epoch))
    except Exception as e:           # report construction errors to the coordinator
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            cmd, *args = conn.recv()
        except EOFError:
            return
        try:
            if cmd == "batch":
                ids = dp.ids(args[0])
                out = (ids, dp.store.peek(ids))
            elif cmd == "feedback":
                dp.feedback(*args)
                out = None
            elif cmd == "validation":
                dp.set_validation(*args)
                out = None
            elif cmd == "snapshot":
                dp.snapshot(*args)
                out = None
            elif cmd == "recover":
                dp.recover(*args)
                out = None
            elif cmd == "stats":
                v = dp.view
                out = dict(dp.stats(belady=False), log=dp.log, trace=dp.trace,
                           observations=dp.observations, capacity=dp.capacity,
                           view=dict(trace=v.trace, requester=v.requester, batch=v.batch,
                                     observations=v.observations, capacity=v.capacity),
                           messages=pipes.messages if pipes is not None else 0)
            elif cmd == "close":
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {cmd!r}")
            conn.send(("ok", out))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))
            if pipes is not None:
                # the shared cache's exchange is out of step: leave it, so that the peers
                # waiting for this worker fail too instead of hanging
                for c in peers.values():
                    c.close()
                return


class WorkerError(RuntimeError):
    """A worker process failed; the message is the worker's error."""


class DistributedDataPath:
    """``world`` worker processes behind the trainer's data-path interface (``batch``,
    ``losses``, ``snapshot``, ``recover``, ``stats``). Use as a context manager (the workers
    are stopped on exit). ``cfg.rank`` is ignored (each worker gets its own). ``validator``
    (``cfg.sampling == "auto"``): called by the coordinator, which holds the model, at the
    start of every epoch > 0; its result goes to every worker."""

    def __init__(self, store_dir, cfg: DataPathConfig, world: int, io: IOModel = IOModel(),
                 validator=None):
        # fork: the workers start in milliseconds and need no importable __main__
        ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
        self.world = world
        self.cfg = replace(cfg, world=world)
        self.validator = validator
        self.validations: dict[int, float] = {}
        mesh = {}
        if self.cfg.sharded:
            for a in range(world):
                for b in range(a + 1, world):
                    mesh[a, b], mesh[b, a] = ctx.Pipe()
        self._conns, self._procs = [], []
        for r in range(world):
            a, b = ctx.Pipe()
            peers = {q: mesh[r, q] for q in range(world) if (r, q) in mesh}
            p = ctx.Process(target=_worker, args=(b, peers, str(Path(store_dir)), io,
                                                  replace(self.cfg, rank=r)),
                            daemon=True)
            p.start()
            self._conns.append(a)
            self._procs.append(p)
        for c in mesh.values():
            c.close()                        # the workers hold their own copies
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
        replies, first = [], None
        for r in range(self.world):
            try:
                replies.append(self._recv(r))
            except WorkerError as e:         # read every reply, report the first error
                first = first or e
        if first is not None:
            raise first
        return replies

    def batch(self, b: int) -> ClickData:
        epoch = (b - 1) // self.batches_per_epoch
        if (self.cfg.sampling == "auto" and self.cfg.sampler == "importance" and epoch > 0
                and epoch - 1 not in self.validations and self.validator is not None):
            self.validations[epoch - 1] = float(self.validator())
            self._all("validation", epoch - 1, self.validations[epoch - 1])
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
        """Every worker's :meth:`DataPath.stats` (without Belady) with its log, trace,
        observations, cache view and message count."""
        return self._all("stats")

    @staticmethod
    def totals(stats: list[dict]) -> dict:
        """Global counters from :meth:`stats`: reads ``served`` from the cache (hits and
        substitutes) and missed as the workers saw them, storage fetches and bytes, the
        driving cache's (or shards') own hits and misses, messages between workers."""
        out = dict(reads=0, served=0, missed=0, fetches=0, bytes=0, messages=0, caches={})
        for st in stats:
            out["reads"] += st["accesses"]
            out["served"] += st["served"]["hits"]
            out["missed"] += st["served"]["misses"]
            out["fetches"] += st["io"]["fetches"]
            out["bytes"] += st["io"]["bytes"]
            out["messages"] += st.get("messages", 0)
            for name, c in st["caches"].items():
                t = out["caches"].setdefault(name, dict(hits=0, misses=0))
                t["hits"] += c["hits"]
                t["misses"] += c["misses"]
        out["hit_ratio"] = out["served"] / out["reads"] if out["reads"] else 0.0
        return out

    def close(self):
        for r, c in enumerate(self._conns):
            try:
                c.send(("close",))
                c.recv()
            except (OSError, EOFError):
                pass
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
