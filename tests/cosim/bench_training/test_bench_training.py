"""Smoke size of the training-step benchmark (trainingcxl/bench/training.py; the full grid runs in
`make bench`): the JSON report has every field, every run's completions, LOOKUP output and
touched table rows equalled the golden model (checked inside the simulation, a mismatch fails
the cocotb test and the bench), and the figures are consistent with the workload (correctness of
the bookkeeping, not speed)."""
import json
import pathlib

import pytest

from trainingcxl.bench import training

RUN_FIELDS = ("mode", "gap", "match", "t_db", "lk_end", "up_end", "critical",
              "critical_minus_gap", "lookup_cycles", "update_cycles", "lookup_log_records",
              "update_log_records", "update_rows", "update_lines", "perf", "util_perf",
              "row_writes", "util_row_span", "log_writes_after_lookup")


@pytest.mark.cosim
def test_training_bench_quick(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)              # relative --out, as `make bench` uses
    out = pathlib.Path("t.json")
    assert training.main(["--quick", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    (p,) = rep["points"]
    seed = rep["seed"]
    q = training.QUICK[0]
    lookups = q["n_bags"] * q["pooling"]
    assert p["lookups"] == lookups
    runs = p["runs"]
    assert sorted((r["mode"], bool(r["gap"])) for r in runs) == \
        [("a", False), ("a", True), ("b", False), ("b", True), ("c", False), ("c", True)]
    for r in runs:
        for f in RUN_FIELDS:
            assert f in r, (f, r)
        assert r["match"] and not r["mismatch"], (seed, r)
        # every (bag, row) update applied, one line per row at dim 16, each row line written once
        assert r["update_rows"] == lookups and r["update_lines"] == lookups * q["dim"] // 16
        assert r["row_writes"] == r["update_lines"], (seed, r)
        assert 0 < r["t_db"] < r["lk_end"] < r["up_end"]
        assert r["critical"] == r["up_end"] - r["t_db"]
        assert 0 < r["util_perf"] <= 1.0 and 0 < r["util_row_span"] <= 1.0
        # logging per mode: a none, b in the LOOKUP (each distinct row once when no set
        # overflows), c all in the UPDATE
        recs = r["perf"]["PERF_LOG_RECORDS"]
        assert recs == r["lookup_log_records"] + r["update_log_records"]
        if r["mode"] == "a":
            assert recs == 0
        elif r["mode"] == "b":
            assert r["lookup_log_records"] >= p["distinct_rows"]
        else:
            assert r["lookup_log_records"] == 0 and r["update_log_records"] >= p["distinct_rows"]
        if r["gap"]:
            assert r["gap_actual"] >= r["gap"] - 2
            assert r["critical_minus_gap"] == r["critical"] - r["gap_actual"]
    s = p["summary"]
    assert s["match"]
    for gv in ("nogap", "gap"):
        for k in ("overhead_b_over_a", "speedup_b_over_c", "util_perf", "critical"):
            assert k in s[gv], (gv, k)
