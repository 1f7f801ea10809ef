"""Crash campaign smoke: ~20 power failures during a training run on the device top, on the
campaign's default path (C++ PMEM model, SNAPSHOT in every batch, a quarter of the points with
a second failure during recovery, replay of the open batch).

Each point must recover to the model's tables after the committed batch, match the golden
model's recovery of the same crash image, and replay to final tables bit-identical to the
no-failure run (trainingcxl/crash/tb.py). The report counts are checked against the points asked
for, so a campaign that silently ran fewer points fails.
"""
import json

import pytest

from cosim import fcov
from hw.config import CONFIGS
from trainingcxl.coverage import functional
from trainingcxl.crash.campaign import (EXTENDED_LOG_SIZE, EXTENDED_WORKLOAD,
                                        OVERLAP_WORKLOAD, run_campaign)

N_POINTS = 20


@pytest.mark.cosim
def test_crash_smoke(crash_build, seed, tmp_path, capsys):
    cfg, b = crash_build
    rep = run_campaign(points=f"random:{N_POINTS}", seed=seed, cfg=cfg, out=tmp_path,
                       progress=False, build=b)
    # the campaign's simulator runs print nothing of their own into its progress bar
    assert "cocotb:" not in capsys.readouterr().out
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["tried"] == rep["tried"]
    fails = "\n".join(f"point {f['i']} cycle {f['cycle']}: {f['error']}"
                      for f in rep["failures"][:5])
    assert not rep["sim_errors"], f"simulator errors (seed {seed}): {rep['sim_errors'][:1]}"
    assert rep["tried"] == N_POINTS, f"only {rep['tried']} of {N_POINTS} points ran (seed {seed})"
    assert rep["failed"] == 0, f"{rep['failed']} crash points failed (seed {seed}):\n{fails}"
    assert rep["recovered"] == rep["identical"] == N_POINTS, rep
    assert rep["reference_cycles"] and rep["reference_cycles"] > 100, rep
    # the points spread over the run: some crash before any COMMIT, some after the last
    hist = {int(k): v for k, v in rep["committed_histogram"].items()}
    assert sum(hist.values()) == N_POINTS and len(hist) >= 2, (hist, seed)
    # the default workload snapshots the MLP: some points recover a snapshot
    assert sum(v for k, v in rep["mlp_histogram"].items() if k != "0:0") >= 1, (rep, seed)


@pytest.mark.cosim
def test_crash_cut_coverage(crash_build, seed, tmp_path, monkeypatch):
    """With functional coverage on, the campaign samples ``crash.cut`` once per cut (each
    point's, and each nested failure's cut of a recovery), hits no bin argued unreachable, and
    its in-flight ``slots`` samples agree with the points' own count of snapshot writes in
    flight (``snap_writes_in_flight``, taken apart from the sampler). The point records are
    those of the same campaign without coverage (the sampler only reads the PMEM model)."""
    cfg, b = crash_build
    kw = dict(points="random:12", seed=seed, cfg=cfg, progress=False, build=b, nested=0.5)
    monkeypatch.delenv(fcov.FCOV_ENV, raising=False)      # off even in a coverage run
    run_campaign(out=tmp_path / "off", **kw)
    monkeypatch.setenv(fcov.FCOV_ENV, str(tmp_path / "fcov"))
    rep = run_campaign(out=tmp_path / "on", **kw)
    assert rep["ok"] and rep["identical"] == 12, (seed, rep["failures"][:2], rep["sim_errors"])
    recs = {}
    for name in ("off", "on"):
        lines = (tmp_path / name / "points.jsonl").read_text().splitlines()
        recs[name] = [{k: v for k, v in json.loads(line).items()
                       if "wall" not in k and k != "phase_windows"} for line in lines]
    assert recs["on"] == recs["off"], seed
    points = recs["on"][1:]
    g = functional.merge_dir(tmp_path / "fcov")["groups"]["crash.cut"]
    assert not g["unreachable_but_hit"], (seed, g["unreachable_but_hit"])
    cuts = len(points) + sum(1 for r in points if r.get("nested"))
    assert sum(g["hits"].values()) >= cuts, (seed, g["hits"])
    slots = sum(n for k, n in g["hits"].items() if k.endswith("|slots"))
    assert slots == sum(1 for r in points if r["snap_writes_in_flight"] > 0), (seed, g["hits"])


@pytest.mark.cosim
def test_crash_overlap_workload(crash_build, seed, tmp_path, monkeypatch):
    """The overlap workload (``--workload overlap``: a LOOKUP+LOG of fresh rows after every
    batch's UPDATEs, each batch rung as two doorbells, each doorbell's descriptors written
    through CXL.mem while the previous one executes): every point recovered and
    bit-identical, nested failures included, with ``crash.cut`` sampled (its windows checked
    against the completion writes of both doorbells) and no bin argued unreachable hit."""
    cfg, b = crash_build
    monkeypatch.setenv(fcov.FCOV_ENV, str(tmp_path / "fcov"))
    rep = run_campaign(points="random:8", seed=seed, cfg=cfg, out=tmp_path, progress=False,
                       build=b, nested=0.5, workload=OVERLAP_WORKLOAD)
    assert rep["ok"] and rep["identical"] == 8, (seed, rep["failures"][:2], rep["sim_errors"])
    g = functional.merge_dir(tmp_path / "fcov")["groups"]["crash.cut"]
    assert not g["unreachable_but_hit"], (seed, g["unreachable_but_hit"])
    assert sum(g["hits"].values()) >= 8, (seed, g["hits"])


@pytest.mark.cosim
def test_crash_replay_all(crash_build, seed, tmp_path):
    """``replay="all"``: every batch after the open one is replayed too, and the image outside
    staging still equals the golden model's run of the same batches (4 points, half nested)."""
    cfg, b = crash_build
    rep = run_campaign(points="random:4", seed=seed, cfg=cfg, out=tmp_path, progress=False,
                       build=b, replay="all", nested=0.5)
    assert rep["ok"] and rep["identical"] == 4 and rep["replay"] == "all", (seed, rep)


@pytest.mark.cosim
def test_crash_on_the_compiled_host_and_csr_master(crash_build, seed, tmp_path):
    """The campaign with the driver's CXL.mem host and CSR master compiled into the simulator
    (``--host cpp --csr cpp``): every point recovered and bit-identical, nested failures
    included; on the top cocotb clocks (``build=``) and on the one that makes its own clock
    (the campaign's own build with every model compiled) every point's record is the same but
    for wall time (crash and recovery cycles, cycles simulated, verdicts)."""
    cfg, b = crash_build
    reps = {}
    for name, build in (("cocotb", b), ("own", None)):
        rep = run_campaign(points="random:6", seed=seed, cfg=cfg, out=tmp_path / name,
                           progress=False, build=build, nested=0.5, host="cpp", csr="cpp")
        assert rep["ok"] and rep["identical"] == 6, (name, seed, rep["failures"][:2],
                                                     rep["sim_errors"])
        assert (rep["host"], rep["csr"]) == ("cpp", "cpp")
        reps[name] = [{k: v for k, v in json.loads(line).items() if "wall" not in k}
                      for line in (tmp_path / name / "points.jsonl").read_text().splitlines()]
    assert len(reps["own"]) == 7 and reps["own"] == reps["cocotb"], seed


@pytest.mark.cosim
def test_crash_extended_log_full_smoke(seed, tmp_path):
    """``make crash-extended`` in small: the 128-bit fpga-ecp5 configuration with a 136-slot
    log (a build of its own), tables of 2^20 rows written only where read, logged-set
    overflows, and batches that fill the log. The reference run compares every LOG_FULL
    completion with the model's, and each point's replay of its open batch must meet the same
    ones."""
    cfg = CONFIGS["fpga-ecp5"].with_(log_size=EXTENDED_LOG_SIZE)
    rep = run_campaign(points="random:4", seed=seed, cfg=cfg, out=tmp_path, progress=False,
                       workload=EXTENDED_WORKLOAD)
    fails = [f"point {f['i']} cycle {f['cycle']}: {f['error']}" for f in rep["failures"][:3]]
    assert rep["ok"] and rep["identical"] == 4, (seed, fails, rep["sim_errors"][:1])
    assert rep["workload_cpl_errors"].get("LOG_FULL", 0) >= 4, (seed, rep["workload_cpl_errors"])
