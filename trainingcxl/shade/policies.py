"""Sample-cache policies of the study (docs/shade.md): every one answers ``access(key) ->
hit`` for one access sequence and decides admission and eviction on a miss.

Online: :class:`LRUCache`, :class:`LFUCache`, :class:`RandomCache` (always admit on a miss,
evict when full), :class:`ShadeCache` (SHADE's rank-based admission and eviction),
:class:`ImportanceCache` (iCache-like: keep the currently most important samples).
Offline: :func:`belady_hits` (Belady's MIN with bypass: the most hits any policy can get on a
sequence). Every policy's state is plain Python data, so ``copy.deepcopy`` / pickle captures it
for checkpoints.
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

    def contents(self) -> set:
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


class ImportanceCache(_ScoredCache):
    """iCache-like importance cache (HPCA '23, without substitution): keeps the samples of
    highest current importance (their latest rank score; samples never scored rank lowest).
    Admission and eviction as in :class:`ShadeCache` but on the score alone, and a never-scored
    sample is admitted while there is room. ``substitutable`` counts misses on samples less
    important than everything cached: iCache would serve those with a cached low-importance
    sample instead (not done here, the training sequence is not changed)."""
    name = "icache"

    def __init__(self, capacity: int):
        super().__init__(capacity)
        self.score: dict = {}
        self.substitutable = 0

    def _priority(self, key):
        return self.score.get(key, float("-inf"))

    def _miss(self, key):
        if len(self._prio) >= self.capacity and not self._priority(key) > self._min()[0]:
            self.substitutable += 1
            return
        super()._miss(key)

    def observe(self, ids, scores):
        for k, s in zip(np.asarray(ids).tolist(), np.asarray(scores, dtype=float).tolist()):
            self.score[k] = s
            if k in self._prio:
                self._set(k, s)


POLICIES = {"lru": LRUCache, "lfu": LFUCache, "random": RandomCache, "shade": ShadeCache,
            "icache": ImportanceCache}


def make_policy(name: str, capacity: int, seed: int = 0) -> CachePolicy:
    if name not in POLICIES:
        raise ValueError(f"unknown cache policy {name!r} (one of {sorted(POLICIES)})")
    return RandomCache(capacity, seed) if name == "random" else POLICIES[name](capacity)


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
