"""Nested failures: the power fails again while a crash image is being recovered, and the
second recovery must land in one of the legal outcomes the golden model computes from its own
recovery of the first image (trainingcxl/crash/tb.py, ``CrashBench.nested_failure``): the
first recovery redone ("again") or completed ("done"). The check can fail: a device whose
epoch write persists before its rollback writes (``mutate="epoch_first"``) must fail at every
nested point that had rows to roll back."""
import pytest

from trainingcxl.crash.campaign import run_campaign

N_POINTS = 8


@pytest.mark.cosim
def test_nested_failures_recover(crash_build, seed, tmp_path):
    cfg, b = crash_build
    rep = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, progress=False,
                       build=b, nested=1.0, out=tmp_path)
    fails = [f"point {f['i']} cycle {f['cycle']}: {f['error']}" for f in rep["failures"][:3]]
    assert rep["ok"] and rep["identical"] == N_POINTS, (seed, fails, rep["sim_errors"][:1])
    assert rep["nested_points"] == N_POINTS, (seed, rep)
    assert sum(rep["nested_outcomes"].values()) == N_POINTS, (seed, rep)


@pytest.mark.cosim
def test_epoch_first_nested_points_fail(crash_build, self_check_seed, tmp_path):
    cfg, b = crash_build
    seed = self_check_seed
    rep = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, progress=False,
                       build=b, nested=1.0, mutate="epoch_first", out=tmp_path)
    assert rep["tried"] == N_POINTS, (seed, rep)
    assert not rep["ok"] and rep["failed"] >= 1, (seed, rep)
    assert all("second recovery" in f["error"] for f in rep["failures"]), \
        (seed, rep["failures"])
