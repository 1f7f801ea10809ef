"""Sample-cache policies of the study (docs/shade.md): every one answers ``access(key) ->
hit`` for one access sequence and decides admission and eviction on a miss.

Online: :class:`LRUCache`, :class:`LFUCache`, :class:`RandomCache` (always admit on a miss,
evict when full), :class:`ShadeCache` (SHADE's rank-based admission and eviction),
:class:`ImportanceCache` (iCache-like: keep the currently most important samples).
Offline: :func:`belady_hits` (Belady's MIN with bypass: the most hits any policy can get on a
sequence). Every policy's state round-trips through JSON (``state_dict()`` /
:func:`policy_from_state`) for the data path's checkpoints.
"""
from __future__ import annotations

import heapq
import random
from collections import OrderedDict
from typing import Sequence

import numpy as np


class CachePolicy:
    """Common bookkeeping: ``capacity`` (samples, >= 0), ``hits``, ``misses``, ``contents()``.
    Subclasses implement ``_hit(key)`` and ``_miss(key)`` (admission/eviction)."""
    name = "?"

    def __init__(self, capacity: int):
        if not isinstance(capacity, (int, np.integer)) or capacity < 0:
            raise ValueError(f"cache capacity must be an integer >= 0, not {capacity!r}")
        self.capacity = int(capacity)
        self.hits = 0
        self.misses = 0

    def __contains__(self, key) -> bool:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def access(self, key: int) -> bool:
        """One access of sample ``key``: True on a hit; on a miss the policy may admit it."""
        key = int(key)
        if key in self:
            self.hits += 1
            self._hit(key)
            return True
        self.misses += 1
        if self.capacity:
            self._miss(key)
        return False

    def observe(self, ids, scores):
        """New importance scores of ``ids`` (after their minibatch's loss); ignored by
        policies that do not use importance."""

    def new_epoch(self):
        """The training job starts an epoch (only iCache's substitution uses it)."""

    def contents(self) -> set:
        raise NotImplementedError

    def state_dict(self) -> dict:
        """The policy's whole state as JSON-able data (lists, numbers, strings)."""
        return dict(name=self.name, capacity=self.capacity, hits=self.hits,
                    misses=self.misses, **self._state())

    def _state(self) -> dict:
        raise NotImplementedError

    def _load(self, d: dict):
        raise NotImplementedError

    @property
    def hit_ratio(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0


class LRUCache(CachePolicy):
    """Least recently used: a hit moves the key to the back; a miss admits it, evicting the
    front when full."""
    name = "lru"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._od: OrderedDict = OrderedDict()

    def __contains__(self, key):
        return key in self._od

    def __len__(self):
        return len(self._od)

    def contents(self):
        return set(self._od)

    def _hit(self, key):
        self._od.move_to_end(key)

    def _state(self):
        return dict(order=list(self._od))

    def _load(self, d):
        self._od = OrderedDict((int(k), None) for k in d["order"])

    def _miss(self, key):
        if len(self._od) >= self.capacity:
            self._od.popitem(last=False)
        self._od[key] = None


class LFUCache(CachePolicy):
    """Least frequently used: each cached key counts its accesses since admission (1 at
    admission); a miss admits the key, evicting the key with the lowest count when full (ties:
    the least recently used of them)."""
    name = "lfu"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._count: dict = {}
        self._last: dict = {}
        self._heap: list = []
        self._tick = 0

    def __contains__(self, key):
        return key in self._count

    def __len__(self):
        return len(self._count)

    def contents(self):
        return set(self._count)

    def _touch(self, key, count):
        self._tick += 1
        self._count[key] = count
        self._last[key] = self._tick
        heapq.heappush(self._heap, (count, self._tick, key))

    def _hit(self, key):
        self._touch(key, self._count[key] + 1)

    def _state(self):
        return dict(entries=[[k, c, self._last[k]] for k, c in self._count.items()],
                    tick=self._tick)

    def _load(self, d):
        # the heap is rebuilt from the live entries: (count, tick, key) are unique, so the
        # victim chosen is the same as with the original heap and its stale entries
        self._count = {int(k): int(c) for k, c, _ in d["entries"]}
        self._last = {int(k): int(t) for k, _, t in d["entries"]}
        self._heap = [(c, self._last[k], k) for k, c in self._count.items()]
        heapq.heapify(self._heap)
        self._tick = int(d["tick"])

    def _miss(self, key):
        if len(self._count) >= self.capacity:
            while True:
                c, t, k = heapq.heappop(self._heap)
                if self._count.get(k) == c and self._last.get(k) == t:
                    del self._count[k], self._last[k]
                    break
        self._touch(key, 1)


class RandomCache(CachePolicy):
    """Random replacement: a miss admits the key, evicting a uniformly drawn cached key
    (``random.Random(seed)``) when full."""
    name = "random"

    def __init__(self, capacity: int, seed: int = 0):
        super().__init__(capacity)
        self._keys: list = []
        self._pos: dict = {}
        self._rng = random.Random(seed)

    def __contains__(self, key):
        return key in self._pos

    def __len__(self):
        return len(self._keys)

    def contents(self):
        return set(self._keys)

    def _hit(self, key):
        pass

    def _state(self):
        version, internal, gauss = self._rng.getstate()
        return dict(keys=list(self._keys), rng=[version, list(internal), gauss])

    def _load(self, d):
        self._keys = [int(k) for k in d["keys"]]
        self._pos = {k: j for j, k in enumerate(self._keys)}
        version, internal, gauss = d["rng"]
        self._rng.setstate((version, tuple(internal), gauss))

    def _miss(self, key):
        if len(self._keys) >= self.capacity:
            j = self._rng.randrange(len(self._keys))
            victim, last = self._keys[j], self._keys[-1]
            self._keys[j] = last
            self._pos[last] = j
            self._keys.pop()
            del self._pos[victim]
        self._pos[key] = len(self._keys)
        self._keys.append(key)


class _ScoredCache(CachePolicy):
    """A cache ordered by a per-key priority that changes with importance updates: a lazy
    min-heap of (priority, key) with stale entries skipped."""

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self._prio: dict = {}          # cached key -> priority
        self._heap: list = []

    def __contains__(self, key):
        return key in self._prio

    def __len__(self):
        return len(self._prio)

    def contents(self):
        return set(self._prio)

    def _set(self, key, prio):
        self._prio[key] = prio
        heapq.heappush(self._heap, (prio, key))

    def _min(self):
        while self._heap:
            p, k = self._heap[0]
            if self._prio.get(k) == p:
                return p, k
            heapq.heappop(self._heap)
        raise LookupError("empty cache")

    def _rebuild(self):
        # (priority, key) pairs are unique, so the minimum found is the same as with the
        # original heap and its stale entries
        self._heap = [(p, k) for k, p in self._prio.items()]
        heapq.heapify(self._heap)

    def _hit(self, key):
        pass

    def _priority(self, key):
        raise NotImplementedError

    def _miss(self, key):
        new = self._priority(key)
        if len(self._prio) >= self.capacity:
            if new is None:
                return
            p, victim = self._min()
            if not new > p:
                return                     # not more important than the least important
            del self._prio[victim]
        self._set(key, new if new is not None else (float("-inf"), 0))


class ShadeCache(_ScoredCache):
    """SHADE's cache: every sample has a ghost entry (latest rank score, times scored),
    updated after each minibatch for every sample of it, cached or not. A miss is admitted
    while the cache has room; when full, only if its ghost entry is greater than the least
    entry in the cache (tuples compare score, then frequency), which is evicted. A sample
    never scored is not admitted into a full cache."""
    name = "shade"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.ghost: dict = {}          # key -> (score, freq)

    def _priority(self, key):
        return self.ghost.get(key)

    def observe(self, ids, scores):
        for k, s in zip(np.asarray(ids).tolist(), np.asarray(scores, dtype=float).tolist()):
            g = (s, self.ghost.get(k, (0.0, 0))[1] + 1)
            self.ghost[k] = g
            if k in self._prio:
                self._set(k, g)

    def _state(self):
        return dict(cached=[[k, p[0], p[1]] for k, p in self._prio.items()],
                    ghost=[[k, g[0], g[1]] for k, g in self.ghost.items()])

    def _load(self, d):
        self._prio = {int(k): (float(s), int(f)) for k, s, f in d["cached"]}
        self.ghost = {int(k): (float(s), int(f)) for k, s, f in d["ghost"]}
        self._rebuild()


class ImportanceCache(_ScoredCache):
    """iCache-like importance cache (after iCache, HPCA '23): keeps the samples of highest
    current importance (their latest rank score; samples never scored rank lowest).
    Admission and eviction as in :class:`ShadeCache` but on the score alone, and a
    never-scored sample is admitted while there is room.

    A miss on a sample less important than everything cached (cache full) is
    *substitutable*: ``substitutable`` counts them. With ``substitute=True`` such a miss is
    served by a cached unimportant sample instead (iCache's substitution): the substitute is
    the least important (score, then key) of the ``ceil(len / 2)`` least important cached
    samples that has not been a substitute in this epoch (:meth:`new_epoch`); when every
    candidate has been used, the miss is fetched. A sample stands in at most once per epoch,
    but the cache's contents and scores change during the epoch, so the number of
    substitutions per epoch is not bounded by the capacity. After
    :meth:`access` returns False, ``last_substitute`` is that sample (None: no
    substitution, fetch the requested one); ``substituted`` counts them. The requested
    sample's hit/miss counters are unchanged by a substitution (it is a miss).
    """
    name = "icache"

    def __init__(self, capacity: int, substitute: bool = False):
        super().__init__(capacity)
        self.score: dict = {}
        self.substitutable = 0
        self.substitute = bool(substitute)
        self.substituted = 0
        self.last_substitute = None
        self._used: set = set()

    def _priority(self, key):
        return self.score.get(key, float("-inf"))

    def access(self, key):
        self.last_substitute = None
        return super().access(key)

    def _miss(self, key):
        if len(self._prio) >= self.capacity and not self._priority(key) > self._min()[0]:
            self.substitutable += 1
            if self.substitute:
                self.last_substitute = self._pick_substitute()
                self.substituted += self.last_substitute is not None
            return
        super()._miss(key)

    def _pick_substitute(self):
        low = sorted((p, k) for k, p in self._prio.items())[:(len(self._prio) + 1) // 2]
        free = [k for _, k in low if k not in self._used]
        if not free:
            return None
        self._used.add(free[0])
        return free[0]

    def new_epoch(self):
        """A new epoch starts: every cached sample may stand in once again."""
        self._used.clear()

    def observe(self, ids, scores):
        for k, s in zip(np.asarray(ids).tolist(), np.asarray(scores, dtype=float).tolist()):
            self.score[k] = s
            if k in self._prio:
                self._set(k, s)

    def _state(self):
        return dict(cached=[[k, p] for k, p in self._prio.items()],
                    score=[[k, v] for k, v in self.score.items()],
                    substitutable=self.substitutable, substitute=self.substitute,
                    substituted=self.substituted, used=sorted(self._used))

    def _load(self, d):
        self._prio = {int(k): float(p) for k, p in d["cached"]}
        self.score = {int(k): float(v) for k, v in d["score"]}
        self.substitutable = int(d["substitutable"])
        self.substitute = bool(d["substitute"])
        self.substituted = int(d["substituted"])
        self._used = {int(k) for k in d["used"]}
        self._rebuild()


POLICIES = {"lru": LRUCache, "lfu": LFUCache, "random": RandomCache, "shade": ShadeCache,
            "icache": ImportanceCache}


def make_policy(name: str, capacity: int, seed: int = 0, substitute: bool = False) -> CachePolicy:
    """A policy by name; ``seed`` for random replacement, ``substitute`` for iCache's
    substitution (``icache`` only)."""
    if name not in POLICIES:
        raise ValueError(f"unknown cache policy {name!r} (one of {sorted(POLICIES)})")
    if substitute and name != "icache":
        raise ValueError(f"substitution is iCache's: not available for {name!r}")
    if name == "random":
        return RandomCache(capacity, seed)
    if name == "icache":
        return ImportanceCache(capacity, substitute)
    return POLICIES[name](capacity)


def policy_from_state(d: dict) -> CachePolicy:
    """The policy a :meth:`CachePolicy.state_dict` describes (KeyError/ValueError/TypeError
    on malformed data)."""
    name = d["name"]
    if name not in POLICIES:
        raise ValueError(f"unknown cache policy {name!r} in a saved state")
    p = make_policy(name, int(d["capacity"]))
    p.hits, p.misses = int(d["hits"]), int(d["misses"])
    p._load(d)
    return p


def belady_hits(seq: Sequence[int], capacity: int) -> np.ndarray:
    """Hit (True) or miss of every access of ``seq`` under Belady's MIN with bypass: on a miss
    into a full cache, of the cached keys and the missing one, the one used again farthest in
    the future (or never) is the one not kept. No policy that sees the same sequence gets more
    hits."""
    seq = [int(k) for k in seq]
    n = len(seq)
    nxt = [0] * n
    last: dict = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(seq[i], n + i)     # never again: beyond the end, farther for later i
        last[seq[i]] = i
    hits = np.zeros(n, dtype=bool)
    if capacity <= 0:
        return hits
    when: dict = {}                           # cached key -> its next use
    heap: list = []                           # (-next use, key), lazy
    for i, k in enumerate(seq):
        if k in when:
            hits[i] = True
        elif len(when) >= capacity:
            while -heap[0][0] != when.get(heap[0][1]):
                heapq.heappop(heap)
            far, victim = -heap[0][0], heap[0][1]
            if nxt[i] >= far:
                continue                      # bypass: the new key is needed last
            heapq.heappop(heap)
            del when[victim]
        when[k] = nxt[i]
        heapq.heappush(heap, (-nxt[i], k))
    return hits
