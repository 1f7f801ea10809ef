"""Cache policies against hand-computed access sequences (hit/miss per step), and Belady's MIN
against a brute-force search of every admission/eviction choice on small sequences."""
import itertools
import random

import pytest

from trainingcxl.shade.policies import (ImportanceCache, LFUCache, LRUCache, RandomCache,
                                        ShadeCache, belady_hits, make_policy)

A, B, C, D, E = 1, 2, 3, 4, 5


def run(policy, seq):
    return "".join("H" if policy.access(k) else "m" for k in seq)


def test_lru_hand_sequence():
    # cap 3: A B C miss; A hit (order B C A); D evicts B; B evicts C; A hit; C evicts D
    c = LRUCache(3)
    assert run(c, [A, B, C, A, D, B, A, C]) == "mmmHmmHm"
    assert c.contents() == {A, B, C} and (c.hits, c.misses) == (2, 6)


def test_lfu_hand_sequence():
    # cap 2: A m; A H (A:2); B m (B:1); C m evicts B (lowest count); B m evicts C (C:1 < A:2);
    # A H (A:3); C m evicts B (tie of counts 1 broken towards the least recent... only B)
    c = LFUCache(2)
    assert run(c, [A, A, B, C, B, A, C]) == "mHmmmHm"
    assert c.contents() == {A, C}


def test_lfu_ties_go_to_least_recently_used():
    # cap 2: A m, B m (both count 1, A older); C evicts A; A evicts B (now the older of B, C)
    c = LFUCache(2)
    assert run(c, [A, B, C, A, C, B]) == "mmmmHm"
    assert c.contents() == {C, B}


def test_random_hand_sequence_both_branches():
    # cap 2: A B miss; C evicts A or B at random. Branch "A evicted": A m (evicts B or C) ...
    # so only the first four steps are fixed: A m, B m, C m, then A hits iff B was evicted.
    seen = set()
    for seed in range(20):
        c = RandomCache(2, seed=seed)
        pattern = run(c, [A, B, C, A])
        assert pattern in ("mmmm", "mmmH"), pattern
        assert len(c) == 2
        seen.add(pattern)
    assert seen == {"mmmm", "mmmH"}, "random replacement never took one of the branches"


def test_random_is_seeded():
    seq = [random.Random(3).randrange(8) for _ in range(200)]
    assert run(RandomCache(3, seed=5), seq) == run(RandomCache(3, seed=5), seq)


def test_shade_admission_and_eviction_by_rank():
    c = ShadeCache(2)
    assert run(c, [A, B]) == "mm"              # room: both admitted (never scored)
    c.observe([A, B, C], [2.5, 3.0, 2.8])      # ghost: A (2.5,1) B (3.0,1) C (2.8,1)
    assert run(c, [C]) == "m"                  # C (2.8) > least cached A (2.5): evict A
    assert c.contents() == {B, C}
    assert run(c, [D]) == "m"                  # D never scored: not admitted into a full cache
    assert c.contents() == {B, C}
    c.observe([D], [2.8])                      # D (2.8, 1) ties C on score and frequency
    assert run(c, [D]) == "m" and c.contents() == {B, C}
    c.observe([D], [2.8])                      # D (2.8, 2) > C (2.8, 1): frequency breaks it
    assert run(c, [D, C, B]) == "mmH"
    assert c.contents() == {B, D}


def test_shade_scores_of_cached_samples_update():
    c = ShadeCache(2)
    c.observe([A, B, C], [3.0, 2.9, 2.5])
    run(c, [A, B])
    c.observe([A], [2.3])                      # A became easy: now the least important
    assert run(c, [C, A, B]) == "mmH"          # C (2.5) > A (2.3) evicts A
    assert c.contents() == {B, C}


def test_importance_cache_and_substitutable_misses():
    c = ImportanceCache(2)
    c.observe([A, B, C, D], [2.4, 2.6, 2.5, 2.3])
    assert run(c, [A, B, C, D, A, C]) == "mmmmmH"
    # C (2.5) > A (2.4) evicts A; D (2.3) below everything cached: substitutable; A (2.4)
    # below B and C too
    assert c.contents() == {B, C} and c.substitutable == 2


def test_zero_capacity_and_bad_capacity():
    assert run(LRUCache(0), [A, A]) == "mm"
    with pytest.raises(ValueError, match="capacity"):
        LRUCache(-1)
    with pytest.raises(ValueError, match="unknown cache policy 'mru'"):
        make_policy("mru", 4)


def test_belady_hand_sequence():
    # cap 2: A B miss; C: next uses A@3, B@5, C@6 -> bypass C? no: C's next (6) is the
    # farthest, so C is not kept; A hit; D: A@7, B@5, D never -> bypass; B hit; C: next never
    # -> bypass; A hit
    seq = [A, B, C, A, D, B, C, A]
    assert "".join("H" if h else "m" for h in belady_hits(seq, 2)) == "mmmHmHmH"


def brute_force_max_hits(seq, cap):
    """Most hits over every policy: on each miss keep any subset of cache + new of size cap."""
    best = 0
    stack = [(0, frozenset(), 0)]
    memo = {}
    while stack:
        i, cache, hits = stack.pop()
        if memo.get((i, cache), -1) >= hits:
            continue
        memo[(i, cache)] = hits
        if i == len(seq):
            best = max(best, hits)
            continue
        k = seq[i]
        if k in cache:
            stack.append((i + 1, cache, hits + 1))
            continue
        pool = cache | {k}
        if len(pool) <= cap:
            stack.append((i + 1, pool, hits))
        else:
            for keep in itertools.combinations(sorted(pool), cap):
                stack.append((i + 1, frozenset(keep), hits))
    return best


def test_belady_is_optimal_against_brute_force(seed):
    rng = random.Random(seed)
    for trial in range(120):
        n = rng.randint(1, 10)
        seq = [rng.randrange(rng.randint(1, 5)) for _ in range(n)]
        cap = rng.randint(1, 3)
        bh = int(belady_hits(seq, cap).sum())
        assert bh == brute_force_max_hits(seq, cap), (seq, cap)
        for name in ("lru", "lfu", "random", "shade", "icache"):
            p = make_policy(name, cap, seed=trial)
            assert sum(p.access(k) for k in seq) <= bh, (name, seq, cap)


def test_icache_substitution_hand_sequence():
    # cap 4, scores A 4 > B 3 > C 2 > D 1 > E 0.5 > F 0.1, G 5 (the most important)
    c = ImportanceCache(4, substitute=True)
    assert run(c, [A, B, C, D]) == "mmmm"                   # room: all admitted
    G, F = 7, 6
    c.observe([A, B, C, D, E, F, G], [4, 3, 2, 1, 0.5, 0.1, 5])
    served = []
    for k in (E, F, E, G, E):
        assert not c.access(k)
        served.append(c.last_substitute)
    # the lower half of the cache by importance is [D, C]: E -> D, F -> C; both have stood
    # in this epoch, so the next E is fetched; G (5) outranks D (1): admitted, evicting D, no
    # substitute; the lower half is now [C, B], C used: E -> B
    assert served == [D, C, None, None, B]
    assert c.contents() == {A, B, C, G}
    assert (c.hits, c.misses, c.substitutable, c.substituted) == (0, 9, 4, 3)
    c.new_epoch()                                            # every sample may stand in again
    assert not c.access(E) and c.last_substitute == C
    plain = ImportanceCache(4)                               # without substitution
    run(plain, [A, B, C, D])
    plain.observe([A, B, C, D, E, F, G], [4, 3, 2, 1, 0.5, 0.1, 5])
    assert run(plain, [E, F, E, G, E]) == "mmmmm" and plain.last_substitute is None
    assert plain.substitutable == 4 and plain.substituted == 0
    with pytest.raises(ValueError, match="substitution is iCache's"):
        make_policy("lru", 4, substitute=True)


@pytest.mark.parametrize("name", ["lru", "lfu", "random", "shade", "icache"])
def test_state_round_trips_through_json(name, seed):
    """A policy restored from its JSON state (half-way through a sequence with score
    updates) continues exactly like the original."""
    import json
    from trainingcxl.shade.policies import policy_from_state
    rng = random.Random(seed)
    seq = [rng.randrange(12) for _ in range(200)]
    scores = [(rng.sample(range(12), 4), [rng.choice([2.3, 2.4, 2.5]) for _ in range(4)])
              for _ in range(200)]

    def step(p, j):
        p.observe(*scores[j])
        return p.access(seq[j])
    kw = dict(substitute=True) if name == "icache" else {}
    a = make_policy(name, 4, seed=seed, **kw)
    for j in range(100):
        step(a, j)
    b = policy_from_state(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict()
    ha = [(step(a, j), getattr(a, "last_substitute", None)) for j in range(100, 200)]
    hb = [(step(b, j), getattr(b, "last_substitute", None)) for j in range(100, 200)]
    assert ha == hb and a.state_dict() == b.state_dict()
