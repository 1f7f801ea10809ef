"""The training job's data path: sampler, sample cache and sample store behind one object.

The trainer (``sw_model.dlrm.train``) asks ``batch(b)`` for batch b, hands every batch's
logits back through ``losses(b, logits, labels)``, and calls ``snapshot(b)`` when it snapshots
the MLP and ``recover(C, m)`` after a power failure (committed batch C, MLP epoch m). How that
keeps replay deterministic: docs/shade.md, "Power failures". The state saved with an MLP
snapshot is written by :mod:`.checkpoint` (JSON + npz, no pickle).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sw_model.clicklog import ClickData
from .checkpoint import SidecarStore, decode_state, encode_state
from .importance import ScoreTable, rank_scores, sample_losses
from .policies import CachePolicy, belady_hits, make_policy
from .sampler import SAMPLERS, SAMPLING_MODES, aggressive_from_validation, epoch_plan
from .shards import owner, shard_capacity
from .store import SampleStore

CACHES = ("none", "lru", "lfu", "random", "shade", "icache")
CACHE_MODES = ("shared", "local")

__all__ = ["CACHES", "CACHE_MODES", "DataPathConfig", "DataPath", "BatchRecord",
           "SidecarStore", "simulate"]


@dataclass(frozen=True)
class DataPathConfig:
    """``sampler`` (sequential / shuffle / importance), ``cache`` (the policy whose contents
    the job uses: none / lru / lfu / random / shade / icache), ``cache_size`` (percent of the
    dataset), ``batch_size`` (global; each of ``world`` workers reads ``batch_size // world``
    samples per batch), ``seed``, ``rep_factor`` (importance sampler, see
    ``sampler.epoch_plan``), ``shadows`` (further policies fed the same accesses, for
    comparison only), ``rank``/``world``, ``share_importance`` (a worker learns the scores of
    every worker's samples, not only its own).

    ``cache_mode`` (several workers): ``shared`` (SHADE as published: one logical cache of
    the full size, sharded by sample id over the workers' processes, every read goes to the
    owner, :mod:`.shards`) or ``local`` (each worker its own cache of ``cache_size / world``).
    ``sampling`` (importance sampler): ``relaxed``, ``aggressive`` or ``auto`` (SHADE's
    validation rule), see :data:`.sampler.SAMPLING_MODES`. ``substitute``: iCache's
    substitution in the ``icache`` policy (changes what the model trains on)."""
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
    cache_mode: str = "shared"
    sampling: str = "relaxed"
    substitute: bool = False

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
        if self.cache_mode not in CACHE_MODES:
            raise ValueError(f"unknown cache mode {self.cache_mode!r} (one of {CACHE_MODES})")
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"unknown sampling mode {self.sampling!r} (one of "
                             f"{SAMPLING_MODES})")
        if self.substitute and self.cache != "icache":
            raise ValueError(f"substitution needs the icache policy, not {self.cache!r}")
        if self.sharded and not self.share_importance:
            raise ValueError("a shared cache ranks by every worker's scores: it needs "
                             "share_importance")

    @property
    def sharded(self) -> bool:
        """One logical cache over several workers' processes."""
        return self.cache_mode == "shared" and self.world > 1


@dataclass
class _State:
    """Everything the next batch depends on (what a checkpoint holds)."""
    scores: ScoreTable
    caches: dict
    plan: np.ndarray | None = None
    plan_epoch: int = -1
    next_batch: int = 1
    loss_sum: float = 0.0
    loss_n: int = 0


@dataclass
class BatchRecord:
    """One served batch (every attempt): ``ids`` this worker read (after substitution),
    ``hits`` per id (served by the driving cache: a hit, or a substitute), ``replay`` (True:
    re-read while recovering, not trained), ``bytes`` fetched from storage, ``asked`` (the
    ids the sampler asked for; differs from ``ids`` where a substitute was served)."""
    batch: int
    ids: np.ndarray
    hits: np.ndarray
    replay: bool = False
    bytes: int = 0
    asked: np.ndarray | None = None


@dataclass
class CacheView:
    """What one cache (a worker's local cache, or the shard a worker owns) saw, in order:
    ``trace`` (sample ids), ``requester`` (worker of each access), ``batch`` (of each
    access), ``observations`` ((position in ``trace``, ids, rank scores) of every score
    update it got), ``capacity``. :func:`simulate` replays it into any policy."""
    trace: list = field(default_factory=list)
    requester: list = field(default_factory=list)
    batch: list = field(default_factory=list)
    observations: list = field(default_factory=list)
    capacity: int = 0


class DataPath:
    """One worker's data path (see the module docstring).

    Parameters
    ----------
    store : :class:`SampleStore` (its ``counters`` count this worker's fetches).
    cfg : :class:`DataPathConfig`.
    sidecar : :class:`SidecarStore` for checkpoints (default: in memory).
    shards : with ``cfg.sharded``, the transport to the other workers' shards: an object
        with ``contents(b, own) -> set`` (every shard's driving-cache contents at the start
        of batch b, given this worker's) and ``access(b, ids) -> [(hit, substitute or
        -1)]`` (every id read through its owner's shard; the transport calls back
        :meth:`serve_shard` for the requests this worker's shard receives).
        :class:`.distributed.DistributedDataPath` provides pipes between processes.
    validator : with ``cfg.sampling == "auto"``, a callable returning the validation metric
        (higher is better) of the model as it is; called at the start of each epoch > 0
        unless :meth:`set_validation` gave that epoch's result.

    Members
    -------
    ``batch(b)`` (ClickData of this worker's samples of batch b; batches must be asked in
    order, b = 1, 2, ..., or C + 1 after ``recover``), ``losses(b, logits, labels)``,
    ``feedback(b, slices)`` (every worker's ``(ids, losses)`` of batch b), ``snapshot(b)``,
    ``recover(C, m)``, ``state()`` / ``restore(blob)``, ``log`` (:class:`BatchRecord` per
    batch served), ``trace`` (every id this worker asked for, in order), ``observations``
    ((position in the trace, ids, rank scores) of every score update), ``view`` (the
    :class:`CacheView` of this worker's cache: its local cache, or the shard it owns),
    ``validations`` and ``epoch_modes`` (``auto`` sampling), ``batches_per_epoch``,
    ``capacity`` (samples in this worker's cache or shard), ``stats()``.

    Raises
    ------
    ValueError
        a batch asked out of order; a dataset too small for one batch per epoch; a shared
        cache without a transport; ``auto`` sampling without a validation result.
    KeyError
        ``recover`` to an MLP epoch with no data-path checkpoint.
    """

    def __init__(self, store: SampleStore, cfg: DataPathConfig = DataPathConfig(), *,
                 sidecar: SidecarStore | None = None, shards=None, validator=None):
        self.store, self.cfg = store, cfg
        self.per_worker = cfg.batch_size // cfg.world
        self.batches_per_epoch = (store.n // cfg.world) // self.per_worker
        if self.batches_per_epoch < 1:
            raise ValueError(f"{store.n} samples hold no batch of {cfg.batch_size} over "
                             f"{cfg.world} workers")
        if cfg.sharded:
            if shards is None and (cfg.cache != "none" or cfg.shadows):
                raise ValueError("a shared cache over several workers needs a transport to "
                                 "the other shards (DistributedDataPath)")
            total = int(round(cfg.cache_size / 100 * store.n))
            self.capacity = shard_capacity(total, cfg.rank, cfg.world)
        else:
            self.capacity = int(round(cfg.cache_size / 100 * store.n / cfg.world))
        self.shards = shards if cfg.sharded else None
        self.validator = validator
        self.validations: dict[int, float] = {}
        self.epoch_modes: dict[int, str] = {}
        caches = {}
        for name in dict.fromkeys((cfg.cache, *cfg.shadows)):
            if name != "none":
                caches[name] = make_policy(name, self.capacity, seed=cfg.seed * 1000 + cfg.rank,
                                           substitute=cfg.substitute and name == cfg.cache)
        self.sidecar = sidecar if sidecar is not None else SidecarStore()
        self.s = _State(ScoreTable(store.n), caches)
        self._initial = self.state()
        self.log: list[BatchRecord] = []
        self.trace: list[int] = []
        self.observations: list = []
        self.view = CacheView(capacity=self.capacity)

    # -- checkpoints -------------------------------------------------------------------------
    def state(self) -> bytes:
        """The state the next batch depends on, as the bytes of a sidecar file."""
        return encode_state(self.s.scores, self.s.caches, self.s.plan,
                            dict(plan_epoch=self.s.plan_epoch, next_batch=self.s.next_batch,
                                 loss_sum=self.s.loss_sum, loss_n=self.s.loss_n),
                            config=self._config_key())

    def restore(self, blob: bytes, source: str = "data-path state"):
        scores, caches, plan, scalars = decode_state(blob, source, config=self._config_key())
        self.s = _State(scores, caches, plan, **scalars)

    def _config_key(self) -> dict:
        c = self.cfg
        return dict(n=self.store.n, sampler=c.sampler, cache=c.cache, shadows=list(c.shadows),
                    rank=c.rank, world=c.world, cache_mode=c.cache_mode,
                    capacity=self.capacity)

    def snapshot(self, b: int):
        """The MLP is being snapshotted after batch b: keep the data path's state with it."""
        self.sidecar.put(b, self.state())

    def recover(self, committed: int, mlp_epoch: int | None):
        """After a power failure: restore the state saved with MLP epoch m (the initial state
        if None), then re-read batches m+1..C (committed on the device; their losses are lost
        like their MLP steps) so the next batch is C + 1."""
        m = mlp_epoch or 0
        if m == 0:
            self.restore(self._initial)
        else:
            self.restore(self.sidecar.get(m), self.sidecar.describe(m))
        for b in range(m + 1, committed + 1):
            self._serve(b, replay=True)

    # -- validation (auto sampling) ----------------------------------------------------------
    def set_validation(self, epoch: int, metric: float):
        """The validation result after epoch ``epoch`` (0-based), higher is better."""
        self.validations[int(epoch)] = float(metric)

    def _aggressive(self, epoch: int) -> bool:
        mode = self.cfg.sampling
        if self.cfg.sampler != "importance" or epoch == 0 or mode == "relaxed":
            return False
        if mode == "aggressive":
            return True
        if epoch - 1 not in self.validations:
            if self.validator is None:
                raise ValueError(f"auto sampling: no validation result for epoch {epoch - 1} "
                                 f"(give a validator or set_validation)")
            self.set_validation(epoch - 1, self.validator())
        missing = [e for e in range(epoch) if e not in self.validations]
        if missing:
            raise ValueError(f"auto sampling: no validation result for epochs {missing}")
        return aggressive_from_validation([self.validations[e] for e in range(epoch)])

    # -- batches -----------------------------------------------------------------------------
    @property
    def driving(self) -> CachePolicy | None:
        return self.s.caches.get(self.cfg.cache)

    def _cached(self, b: int, epoch: int):
        """The driving cache's contents the importance sampler orders by (SHADE asks the
        whole Redis cluster)."""
        if self.cfg.sampler != "importance" or epoch == 0 or self.cfg.cache == "none":
            return frozenset()
        own = self.driving.contents()
        return self.shards.contents(b, own) if self.shards is not None else own

    def _ids(self, b: int) -> np.ndarray:
        if b != self.s.next_batch:
            raise ValueError(f"batch {b} asked, the data path is at batch {self.s.next_batch}")
        epoch, k = divmod(b - 1, self.batches_per_epoch)
        if epoch != self.s.plan_epoch:
            if self.s.loss_n:
                self.s.scores.end_epoch(self.s.loss_sum / self.s.loss_n)
            self.s.loss_sum, self.s.loss_n = 0.0, 0
            for c in self.s.caches.values():
                c.new_epoch()
            aggressive = self._aggressive(epoch)
            if self.cfg.sampler == "importance" and epoch > 0:
                self.epoch_modes[epoch] = "aggressive" if aggressive else "relaxed"
            self.s.plan = epoch_plan(self.cfg.sampler, self.store.n, epoch, seed=self.cfg.seed,
                                     rank=self.cfg.rank, world=self.cfg.world,
                                     scores=self.s.scores, cached=self._cached(b, epoch),
                                     rep_factor=self.cfg.rep_factor, aggressive=aggressive)
            self.s.plan_epoch = epoch
        return self.s.plan[k * self.per_worker:(k + 1) * self.per_worker]

    def _apply(self, i: int, requester: int, b: int) -> tuple:
        """One read of sample ``i`` by worker ``requester`` through this worker's caches
        (its local cache or its shard, and the shadows): (hit in the driving cache,
        substitute or -1)."""
        drv = self.driving
        hit, sub = False, -1
        for c in self.s.caches.values():
            h = c.access(i)
            if c is drv:
                hit = h
                if not h and getattr(c, "last_substitute", None) is not None:
                    sub = c.last_substitute
        self._record_view(i, requester, b)
        return hit, sub

    def _record_view(self, i: int, requester: int, b: int):
        self.view.trace.append(int(i))
        self.view.requester.append(int(requester))
        self.view.batch.append(int(b))

    def serve_shard(self, b: int, requests) -> list:
        """The reads of batch b that reach this worker's shard: ``requests[q]`` = ids worker
        q asked for (owned here), applied in worker order, each in its order. Returns
        ``[[(hit, substitute or -1)] per id] per worker``."""
        out = []
        for q, ids in enumerate(requests):
            ans = []
            for i in ids:
                i = int(i)
                if owner(i, self.cfg.world) != self.cfg.rank:
                    raise ValueError(f"worker {q} asked shard {self.cfg.rank} for sample {i}, "
                                     f"owned by shard {owner(i, self.cfg.world)}")
                ans.append(self._apply(i, q, b))
            out.append(ans)
        return out

    def _serve(self, b: int, replay: bool = False) -> np.ndarray:
        asked = self._ids(b)
        if self.shards is not None:
            res = self.shards.access(b, asked.tolist())
        else:
            res = [self._apply(i, self.cfg.rank, b) for i in asked.tolist()]
        ids = asked.copy()
        hits = np.zeros(ids.size, dtype=bool)
        fetched = 0
        for j, (i, (hit, sub)) in enumerate(zip(asked.tolist(), res)):
            if sub >= 0:
                ids[j], hit = sub, True
            hits[j] = hit
            if not hit:
                fetched += self.store.fetch(i)
            self.trace.append(i)
        self.s.next_batch = b + 1
        self.log.append(BatchRecord(b, ids, hits, replay, fetched, asked.copy()))
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
        ``share_importance``. A shard learns the scores of the samples it owns."""
        own = self.cfg.rank if own is None else own
        for r, (ids, losses) in enumerate(slices):
            if r != own and not self.cfg.share_importance:
                continue
            ids = np.asarray(ids, dtype=np.int64)
            sc = rank_scores(losses)
            self.observations.append((len(self.trace), ids, sc))
            self.s.scores.update(ids, sc)
            if self.cfg.sharded:
                mine = np.array([owner(i, self.cfg.world) == self.cfg.rank
                                 for i in ids.tolist()], dtype=bool)
                ids_c, sc_c = ids[mine], sc[mine]
            else:
                ids_c, sc_c = ids, sc
            if ids_c.size:
                self.view.observations.append((len(self.view.trace), ids_c, sc_c))
                for c in self.s.caches.values():
                    c.observe(ids_c, sc_c)
            if r == own:
                self.s.loss_sum += float(np.sum(losses))
                self.s.loss_n += len(ids)

    # -- results -----------------------------------------------------------------------------
    def stats(self, belady: bool = True) -> dict:
        """This worker's reads (``served``: hits in the driving cache, substitutes
        included, and misses as the worker saw them), its storage counters, and its cache's
        (or shard's) own counters with Belady on that cache's sequence."""
        served = np.concatenate([r.hits for r in self.log]) if self.log else np.zeros(0, bool)
        out = dict(capacity=self.capacity, accesses=len(self.trace),
                   served=dict(hits=int(served.sum()), misses=int((~served).sum()),
                               hit_ratio=float(served.mean()) if served.size else 0.0),
                   io=self.store.counters.as_dict(), caches={},
                   epoch_modes={str(k): v for k, v in self.epoch_modes.items()},
                   validations={str(k): v for k, v in self.validations.items()})
        for name, c in self.s.caches.items():
            out["caches"][name] = dict(hits=c.hits, misses=c.misses, hit_ratio=c.hit_ratio)
            if hasattr(c, "substituted"):
                out["caches"][name].update(substitutable=c.substitutable,
                                           substituted=c.substituted)
        p = np.sort(self.s.scores.probabilities())[::-1]
        out["importance"] = {f"top{q}": float(p[:max(1, int(len(p) * q / 100))].sum())
                             for q in (1, 5, 10, 20)}
        out["importance"]["max_over_min"] = float(p[0] / p[-1])
        if belady:
            h = belady_hits(self.view.trace, self.capacity)
            out["caches"]["belady"] = dict(hits=int(h.sum()), misses=int((~h).sum()),
                                           hit_ratio=float(h.mean()) if h.size else 0.0)
        return out


def simulate(policy: CachePolicy, trace, observations) -> np.ndarray:
    """Hit or miss of every access of ``trace`` under ``policy``, with the score updates
    ``observations`` (a :class:`CacheView`'s, or a DataPath's ``observations`` with its
    ``trace``) delivered at the same points of the sequence as in the run: any policy at any
    size sees exactly what a shadow cache of the run saw."""
    hits = np.zeros(len(trace), dtype=bool)
    obs = iter(observations)
    nxt = next(obs, None)
    for j, key in enumerate(trace):
        while nxt is not None and nxt[0] <= j:
            policy.observe(nxt[1], nxt[2])
            nxt = next(obs, None)
        hits[j] = policy.access(key)
    return hits
