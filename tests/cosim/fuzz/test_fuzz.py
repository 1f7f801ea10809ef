"""Smoke runs of ``trainingcxl fuzz`` (docs/faults.md) on the cached builds: a few rounds of each
surface must end with every input answered as the golden model says (0 hangs, 0 unreported or
wrong errors, 0 corruptions, device usable after each round), and the oracle must be able to
fail: a table row corrupted behind the model's back is reported as a corruption, and an error
pulse the DCOH never sends is reported as unreported.

Launches: the full device (shared with tests/cosim/device) for ``desc`` and ``csr``, the DCOH
test top (shared with ``trainingcxl stress``) for ``cxl``; about 30 s with builds cached.
"""
import pytest

from trainingcxl.fuzz.job import FAILURE_KEYS, FuzzBlock, _build, run_block


@pytest.fixture(scope="module")
def builds():
    return {"device": _build("desc"), "cxl": _build("cxl")}


def _run(builds, tmp_path, surface, count, seed, sabotage="", rnd=8):
    b = builds["cxl" if surface == "cxl" else "device"]
    return run_block(FuzzBlock(index=0, surface=surface, seed=seed, count=count, round=rnd,
                               watchdog_us=2000, out=str(tmp_path / surface), build=b,
                               sabotage=sabotage))


@pytest.mark.parametrize("surface,count", [("desc", 16), ("csr", 6), ("cxl", 600)])
def test_fuzz_smoke_every_input_answered_as_the_model_says(builds, tmp_path, seed, surface,
                                                           count):
    r = _run(builds, tmp_path, surface, count, seed)
    assert not r.get("missing") and r["run_error"] is None, (seed, r)
    assert r["failure"] is None, (seed, r["failure"])
    assert {k: r[k] for k in FAILURE_KEYS} == {k: 0 for k in FAILURE_KEYS}, (seed, r)
    assert r["inputs"] >= count and r["bad_inputs"] > 0, (seed, r)


def test_fuzz_oracle_reports_a_corrupted_table_row(builds, tmp_path, seed):
    r = _run(builds, tmp_path, "desc", 8, seed, sabotage="corrupt")
    assert r["failure"] is not None and r["failure"]["kind"] == "corruptions", (seed, r)
    assert r["corruptions"] == 1


def test_fuzz_oracle_reports_an_error_pulse_never_sent(builds, tmp_path, seed):
    r = _run(builds, tmp_path, "cxl", 100, seed, sabotage="missing_error")
    assert r["failure"] is not None and r["failure"]["kind"] == "unreported_errors", (seed, r)
