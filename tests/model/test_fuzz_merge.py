"""``trainingcxl fuzz`` report merge: block counts add up, each block's first failure keeps its
seed (the reproduction key), a block without a result is listed as missing, and the rate is
recomputed from the sums."""
from trainingcxl.fuzz.job import merge


def test_fuzz_merge_sums_counts_and_keeps_failure_seeds():
    a = {"seed": 1, "count": 10, "inputs": 10, "bad_inputs": 4, "hangs": 0, "corruptions": 0,
         "wall_s": 2.0, "failure": None, "run_error": None,
         "status_histogram": {"OK": 6, "ALIGN": 4}}
    b = {"seed": 2, "count": 10, "inputs": 7, "bad_inputs": 3, "hangs": 1, "corruptions": 0,
         "wall_s": 3.0, "failure": {"kind": "hangs", "detail": "x", "input": 7},
         "run_error": None, "status_histogram": {"OK": 4, "BAD_DIM": 3}}
    c = {"seed": 3, "count": 10, "missing": True, "run_error": "died"}
    r = merge([a, b, c])
    assert (r["inputs"], r["bad_inputs"], r["hangs"], r["corruptions"]) == (17, 7, 1, 0)
    assert r["status_histogram"] == {"OK": 10, "ALIGN": 4, "BAD_DIM": 3}
    assert r["failures"] == [{"seed": 2, "kind": "hangs", "detail": "x", "input": 7}]
    assert r["run_errors"] == [{"seed": 3, "error": "died"}]
    assert [x["missing"] for x in r["blocks"]] == [False, False, True]
    assert r["wall_s"] == 5.0 and r["inputs_per_s"] == 3.4
