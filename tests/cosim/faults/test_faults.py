"""Smoke run of ``trainingcxl faults`` (docs/faults.md) on the cached full-device build (shared
with tests/cosim/device): a few batches with media faults armed must end with every fault
reported as the bench's oracle says, the aborted batches restored and every batch committed;
and the oracle must be able to fail: a table row changed behind the model's back after an
abort's recovery is reported. About 25 s with the build cached.
"""
import pytest

from trainingcxl.faults.job import FaultBlock, _build, merge, run_block


@pytest.fixture(scope="module")
def device_build():
    return _build()


def _run(device_build, tmp_path, seed, batches, p, sabotage=""):
    return run_block(FaultBlock(index=0, seed=seed, batches=batches, p=p, p_recovery=0.75,
                                out=str(tmp_path / "faults"), build=device_build,
                                sabotage=sabotage))


@pytest.mark.cosim
def test_faults_smoke_every_fault_reported(device_build, tmp_path, seed):
    """8 batches at 10 % per burst. At 4 batches and 5 %, 1 seed of the 9 tried armed only
    SNAPSHOT faults (make test seed 205664), which abort no batch; twice the batches at twice
    the rate make a seed without a LOOKUP, UPDATE or COMMIT fault rarer than 1 in 81 squared
    (4 seeds tried: 5 to 8 aborted batches each)."""
    r = _run(device_build, tmp_path, seed, 8, 0.1)
    assert not r.get("missing") and r["run_error"] is None, (seed, r)
    assert r["failure"] is None, (seed, r["failure"])
    assert r["faults"] > 0 and r["aborted_batches"] > 0, (seed, r)
    assert r["batches_committed"] == 8 and r["recoveries"] == r["aborted_batches"], (seed, r)
    rep = merge([r, r])
    assert rep["faults"] == 2 * r["faults"] and not rep["failures"], rep


@pytest.mark.cosim
def test_faults_oracle_reports_a_table_changed_after_recovery(device_build, tmp_path, seed):
    r = _run(device_build, tmp_path, seed, 3, 0.2, sabotage="corrupt")
    assert r["aborted_batches"] >= 1, (seed, r)
    assert r["failure"] is not None and "aborted: table 0 rows [0]" in r["failure"]["detail"], \
        (seed, r)
