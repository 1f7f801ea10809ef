"""How campaigns split into tasks and merge back (no simulator): crash point ranges cover every
index once, merged crash results are sorted by index with one reference line and differing
reference runs reported, stress blocks add up and one block is its own report."""
import random

import pytest

from trainingcxl.crash.campaign import merge_parts, plan_parts, summarize
from trainingcxl.stress.job import merge_blocks


@pytest.mark.parametrize("expected, workers, task_points", [
    (20, None, 100), (20, 1, 100), (20, 2, 100), (7, 2, 100), (1000, 2, 100), (5, 8, 100),
    (250, 3, 40), (1000, 1, 100)])
def test_plan_parts_cover_every_point_once(expected, workers, task_points):
    ranges = plan_parts(expected, workers=workers, task_points=task_points)
    covered = [i for a, b in ranges for i in range(a, b)]
    assert covered == list(range(expected)), ranges
    if workers is None:
        assert ranges == [(0, expected)]
    else:
        assert all(b - a <= task_points for a, b in ranges), ranges
        assert len(ranges) >= min(workers, expected), ranges


def _point(i, rng):
    c = rng.randrange(5)
    return {"event": "point", "i": i, "cycle": rng.randrange(5000), "seed": 1, "ok": True,
            "recovered": True, "identical": True, "committed": c, "wall_s": rng.random()}


def test_merge_parts_orders_by_index_and_matches_one_part(seed):
    rng = random.Random(seed)
    pts = [_point(i, rng) for i in range(9)]
    ref = {"event": "reference", "cycles": 5016, "points": 9, "skip": 0, "batches": 4}
    whole, problems = merge_parts([{"records": [ref] + pts}])
    assert not problems and whole == [ref] + pts
    parts = []
    for a, b in [(6, 9), (0, 4), (4, 6)]:       # any order of completion
        recs = [{**ref, "skip": a}] + [{"event": "start", "i": i} for i in range(a, b)] \
            + list(reversed(pts[a:b]))
        parts.append({"records": recs})
    merged, problems = merge_parts(parts)
    assert not problems and merged == whole, seed
    assert summarize(merged, requested=9) == summarize(whole, requested=9)


def test_merge_parts_reports_differing_reference_runs():
    ref = {"event": "reference", "cycles": 5016, "points": 2, "batches": 4}
    _, problems = merge_parts([{"records": [ref]}, {"records": [{**ref, "cycles": 5017}]}])
    assert problems and "reference runs differ" in problems[0]


def _block(seed, rng):
    n = rng.randrange(100, 200)
    return {"seed": seed, "messages_sent": n, "violations_total": 0, "wall_s": rng.random() + 1,
            "sim_cycles": 4 * n, "host_messages_per_s": 1.0, "cycles_per_s": 1.0,
            "violations_by_rule": {"sf": seed % 2}, "problems": [f"p{seed}"],
            "first_violations": [], "states": {"I": 1, "S": seed}, "run_error": None}


def test_merge_blocks_sums_and_one_block_is_unchanged(seed):
    rng = random.Random(seed)
    a, b = _block(seed, rng), _block(seed + 1, rng)
    one = merge_blocks([dict(a)])
    assert {k: v for k, v in one.items() if k != "blocks"} == a
    both = merge_blocks([a, b])
    assert both["messages_sent"] == a["messages_sent"] + b["messages_sent"]
    assert both["sim_cycles"] == a["sim_cycles"] + b["sim_cycles"]
    assert both["violations_by_rule"] == {"sf": 1}
    assert both["problems"] == [f"p{seed}", f"p{seed + 1}"]
    assert both["states"] == {"I": 2, "S": 2 * seed + 1}
    assert both["seed"] == seed and [x["seed"] for x in both["blocks"]] == [seed, seed + 1]
    wall = a["wall_s"] + b["wall_s"]
    assert both["host_messages_per_s"] == round(both["messages_sent"] / wall, 1)
