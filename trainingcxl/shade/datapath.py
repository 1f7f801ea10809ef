"""The training job's data path: sampler, sample cache and sample store behind one object.

The trainer (``sw_model.dlrm.train``) asks ``batch(b)`` for batch b, hands every batch's
logits back through ``losses(b, logits, labels)``, and calls ``snapshot(b)`` when it snapshots
the MLP and ``recover(C, m)`` after a power failure (committed batch C, MLP epoch m). How that
keeps replay deterministic: docs/shade.md, "Power failures".
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sw_model.clicklog import ClickData
from .importance import ScoreTable, rank_scores, sample_losses
from .policies import CachePolicy, belady_hits, make_policy
from .sampler import SAMPLERS, epoch_plan
from .store import SampleStore

CACHES = ("none", "lru", "lfu", "random", "shade", "icache")


@dataclass(frozen=True)
class DataPathConfig:
    """``sampler`` (sequential / shuffle / importance), ``cache`` (the policy whose contents
    the job uses: none / lru / lfu / random / shade / icache), ``cache_size`` (percent of the
    dataset, split evenly over the workers), ``batch_size`` (global; each of ``world`` workers
    reads ``batch_size // world`` samples per batch), ``seed``, ``rep_factor`` (importance
    sampler, see ``sampler.epoch_plan``), ``shadows`` (further policies fed the same accesses,
    for comparison only), ``rank``/``world``, ``share_importance`` (a worker learns the scores
    of every worker's samples, not only its own)."""
    sampler: str = "shuffle"
    cache: str = "none"
    cache_size: float = 0.0
    batch_size: int = 32
    seed: int = 0
    rep_factor: float = 1.0
    shadows: tuple = ()
    rank: int = 0
    world: int = 1
    share_importance: bool = True

    def __post_init__(self):
        if self.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r} (one of {SAMPLERS})")
        for c in (self.cache, *self.shadows):
            if c not in CACHES:
                raise ValueError(f"unknown cache {c!r} (one of {CACHES})")
        if not 0 <= self.cache_size <= 100:
            raise ValueError(f"cache_size is a percentage in [0, 100], not {self.cache_size!r}")
        if self.world < 1 or not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank!r} of world {self.world!r}")
        if self.batch_size < self.world or self.batch_size % self.world:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of the "
                             f"{self.world} workers")


class SidecarStore:
    """Where the data path's checkpoints live, keyed by MLP epoch: host storage that survives a
    power failure (a directory, written atomically), or a dict in memory for studies and
    tests. Keeps the newest ``keep``."""

    def __init__(self, directory=None, keep: int = 4):
        self.dir = Path(directory) if directory is not None else None
        self.keep = keep
        self._mem: dict[int, bytes] = {}
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    def put(self, epoch: int, blob: bytes):
        if self.dir is not None:
            tmp = self.dir / f".datapath-{epoch}.tmp"
            tmp.write_bytes(blob)
            os.replace(tmp, self.dir / f"datapath-{epoch}.pkl")
        self._mem[epoch] = blob
        for old in sorted(self._mem)[:-self.keep]:
            del self._mem[old]
            if self.dir is not None:
                (self.dir / f"datapath-{old}.pkl").unlink(missing_ok=True)

    def get(self, epoch: int) -> bytes:
        if epoch in self._mem:
            return self._mem[epoch]
        path = self.dir / f"datapath-{epoch}.pkl" if self.dir is not None else None
        if path is not None and path.exists():
            return path.read_bytes()
        raise KeyError(f"no data-path checkpoint for MLP epoch {epoch} (have "
                       f"{sorted(self._mem)})")


@dataclass
class _State:
    """Everything the next batch depends on (pickled for checkpoints)."""
    scores: ScoreTable
    caches: dict
    plan: np.ndarray | None = None
    plan_epoch: int = -1
    next_batch: int = 1
    loss_sum: float = 0.0
    loss_n: int = 0


@dataclass
class BatchRecord:
    """One served batch (every attempt): ``ids`` this worker read, ``hits`` per id in the
    driving cache, ``replay`` (True: re-read while recovering, not trained), ``bytes``
    fetched from storage."""
    batch: int
    ids: np.ndarray
    hits: np.ndarray
    replay: bool = False
    bytes: int = 0


class DataPath:
    """One worker's data path (see the module docstring).

    Parameters
    ----------
    store : :class:`SampleStore` (its ``counters`` count this worker's fetches).
    cfg : :class:`DataPathConfig`.
    sidecar : :class:`SidecarStore` for checkpoints (default: in memory).

    Members
    -------
    ``batch(b)`` (ClickData of this worker's samples of batch b; batches must be asked in
    order, b = 1, 2, ..., or C + 1 after ``recover``), ``losses(b, logits, labels)``,
    ``feedback(b, slices)`` (every worker's ``(ids, losses)`` of batch b), ``snapshot(b)``,
    ``recover(C, m)``, ``state()`` / ``restore(blob)``, ``log`` (:class:`BatchRecord` per
    batch served), ``trace`` (every id accessed, in order), ``observations`` ((position in
    the trace, ids, rank scores) of every score update: with ``trace``, what
    :func:`simulate` replays into any policy), ``batches_per_epoch``,
    ``capacity`` (samples per worker), ``stats()``.

    Raises
    ------
    ValueError
        a batch asked out of order; a dataset too small for one batch per epoch.
    KeyError
        ``recover`` to an MLP epoch with no data-path checkpoint.
    """

    def __init__(self, store: SampleStore, cfg: DataPathConfig = DataPathConfig(), *,
                 sidecar: SidecarStore | None = None):
        self.store, self.cfg = store, cfg
        self.per_worker = cfg.batch_size // cfg.world
        self.batches_per_epoch = (store.n // cfg.world) // self.per_worker
        if self.batches_per_epoch < 1:
            raise ValueError(f"{store.n} samples hold no batch of {cfg.batch_size} over "
                             f"{cfg.world} workers")
        self.capacity = int(round(cfg.cache_size / 100 * store.n / cfg.world))
        caches = {}
        for name in dict.fromkeys((cfg.cache, *cfg.shadows)):
            if name != "none":
                caches[name] = make_policy(name, self.capacity, seed=cfg.seed * 1000 + cfg.rank)
        self.sidecar = sidecar if sidecar is not None else SidecarStore()
        self.s = _State(ScoreTable(store.n), caches)
        self._initial = self.state()
        self.log: list[BatchRecord] = []
        self.trace: list[int] = []
        self.observations: list = []

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> bytes:
        return pickle.dumps(self.s, protocol=pickle.HIGHEST_PROTOCOL)

    def restore(self, blob: bytes):
        self.s = pickle.loads(blob)

    def snapshot(self, b: int):
        """The MLP is being snapshotted after batch b: keep the data path's state with it."""
        self.sidecar.put(b, self.state())

    def recover(self, committed: int, mlp_epoch: int | None):
        """After a power failure: restore the state saved with MLP epoch m (the initial state
        if None), then re-read batches m+1..C (committed on the device; their losses are lost
        like their MLP steps) so the next batch is C + 1."""
        m = mlp_epoch or 0
        self.restore(self._initial if m == 0 else self.sidecar.get(m))
        for b in range(m + 1, committed + 1):
            self._serve(b, replay=True)

    # -- batches -----------------------------------------------------------------------------
    @property
    def driving(self) -> CachePolicy | None:
        return self.s.caches.get(self.cfg.cache)

    def _ids(self, b: int) -> np.ndarray:
        if b != self.s.next_batch:
            raise ValueError(f"batch {b} asked, the data path is at batch {self.s.next_batch}")
        epoch, k = divmod(b - 1, self.batches_per_epoch)
        if epoch != self.s.plan_epoch:
            if self.s.loss_n:
                self.s.scores.end_epoch(self.s.loss_sum / self.s.loss_n)
            self.s.loss_sum, self.s.loss_n = 0.0, 0
            drv = self.driving
            self.s.plan = epoch_plan(self.cfg.sampler, self.store.n, epoch, seed=self.cfg.seed,
                                     rank=self.cfg.rank, world=self.cfg.world,
                                     scores=self.s.scores,
                                     cached=drv.contents() if drv is not None else frozenset(),
                                     rep_factor=self.cfg.rep_factor)
            self.s.plan_epoch = epoch
        return self.s.plan[k * self.per_worker:(k + 1) * self.per_worker]

    def _serve(self, b: int, replay: bool = False) -> np.ndarray:
        ids = self._ids(b)
        drv = self.driving
        hits = np.zeros(ids.size, dtype=bool)
        fetched = 0
        for j, i in enumerate(ids.tolist()):
            for name, c in self.s.caches.items():
                h = c.access(i)
                if c is drv:
                    hits[j] = h
            if not hits[j]:
                fetched += self.store.fetch(i)
            self.trace.append(i)
        self.s.next_batch = b + 1
        self.log.append(BatchRecord(b, ids.copy(), hits, replay, fetched))
        return ids

    def ids(self, b: int) -> np.ndarray:
        """Serve batch b (accesses and fetches) and return this worker's sample ids."""
        return self._serve(b)

    def batch(self, b: int) -> ClickData:
        return self.store.peek(self.ids(b))

    __call__ = batch

    def losses(self, b: int, logits, labels):
        """The trainer's logits of batch b (this worker's samples, in order)."""
        ids = self.log[-1].ids
        if self.log[-1].batch != b or len(ids) != len(logits):
            raise ValueError(f"losses of batch {b} ({len(logits)} samples) do not match the "
                             f"last batch served ({self.log[-1].batch}, {len(ids)})")
        self.feedback(b, [(ids, sample_losses(logits, labels))], own=0)

    def feedback(self, b: int, slices, own: int | None = None):
        """Per-sample losses of batch b: ``slices[r] = (ids, losses)`` of worker r. Each slice
        is ranked on its own (SHADE's per-minibatch rank); the scores of worker ``own``
        (default this worker's rank) always update the table, the others' only with
        ``share_importance``."""
        own = self.cfg.rank if own is None else own
        for r, (ids, losses) in enumerate(slices):
            if r != own and not self.cfg.share_importance:
                continue
            ids = np.asarray(ids, dtype=np.int64)
            sc = rank_scores(losses)
            self.observations.append((len(self.trace), ids, sc))
            self.s.scores.update(ids, sc)
            for c in self.s.caches.values():
                c.observe(ids, sc)
            if r == own:
                self.s.loss_sum += float(np.sum(losses))
                self.s.loss_n += len(ids)

    # -- results -----------------------------------------------------------------------------
    def stats(self, belady: bool = True) -> dict:
        """Hit ratio of every cache (and Belady on this worker's trace), storage counters."""
        out = dict(capacity=self.capacity, accesses=len(self.trace),
                   io=self.store.counters.as_dict(), caches={})
        for name, c in self.s.caches.items():
            out["caches"][name] = dict(hits=c.hits, misses=c.misses, hit_ratio=c.hit_ratio)
        p = np.sort(self.s.scores.probabilities())[::-1]
        out["importance"] = {f"top{q}": float(p[:max(1, int(len(p) * q / 100))].sum())
                             for q in (1, 5, 10, 20)}
        out["importance"]["max_over_min"] = float(p[0] / p[-1])
        if belady:
            h = belady_hits(self.trace, self.capacity)
            out["caches"]["belady"] = dict(hits=int(h.sum()), misses=int((~h).sum()),
                                           hit_ratio=float(h.mean()) if h.size else 0.0)
        return out


def simulate(policy: CachePolicy, trace, observations) -> np.ndarray:
    """Hit or miss of every access of ``trace`` under ``policy``, with the score updates
    ``observations`` (a DataPath's) delivered at the same points of the sequence as in the
    run: any policy at any size sees exactly what a shadow cache of the run saw."""
    hits = np.zeros(len(trace), dtype=bool)
    obs = iter(observations)
    nxt = next(obs, None)
    for j, key in enumerate(trace):
        while nxt is not None and nxt[0] <= j:
            policy.observe(nxt[1], nxt[2])
            nxt = next(obs, None)
        hits[j] = policy.access(key)
    return hits
