"""Smoke size of `make bench` (the full grid runs only there): the JSON report is written with
every field, and every point's LOOKUP result equalled the golden model (checked in the bench)."""
import json
import pathlib

import pytest

from trainingcxl.bench import dcoh, gather_reduce


@pytest.mark.cosim
def test_gather_bench_quick(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)              # relative --out, as `make bench` uses
    out = pathlib.Path("g.json")
    assert gather_reduce.main(["--quick", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert len(rep["points"]) == 2
    for p in rep["points"]:
        assert p["cycles"] > 0 and 0 < p["port_util"] <= 1.0 and 0 < p["steady_port_util"] <= 1.0
        assert p["media_lines"] >= p["row_lines"]


@pytest.mark.cosim
def test_dcoh_bench_quick(tmp_path, monkeypatch):
    """DCOH bench smoke: every latency case and throughput point ran (each checked its MemData
    against memory), and the figures are sane: latency above the media latency, at most one
    request per cycle."""
    monkeypatch.chdir(tmp_path)
    out = pathlib.Path("d.json")
    assert dcoh.main(["--quick", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    (lat,) = rep["latency"]
    for case in dcoh.CASES:
        assert lat[case] > lat["latency"], (case, lat)
    assert len(rep["throughput"]) == 8
    for r in rep["throughput"]:
        assert 0 < r["req_per_cycle"] <= 1.0


@pytest.mark.cosim
def test_cosim_speed_quick_beside_verilator_alone(tmp_path, monkeypatch):
    """Co-simulation speed smoke with ``--verilator`` (as `make bench` runs it): every harness
    ran the same training (each run agreed with its twin, runs with the same host and CSR master
    ended on the same cycle; the bench fails otherwise), and Verilator alone replayed the
    recorded training load (every output of every cycle checked against the recording once) in
    the same round, the ratio taken from the two figures of that round."""
    from trainingcxl.bench import cosim_speed
    monkeypatch.chdir(tmp_path)
    out = pathlib.Path("c.json")
    assert cosim_speed.main(["--quick", "--verilator", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    rows = rep["harnesses"]
    assert [tuple(r[f] for f in cosim_speed.FIELDS) for r in rows] == list(cosim_speed.HARNESSES)
    assert all(r["cycles"] > 0 and r["cycles_per_s"] > 0 for r in rows)
    alone = rep["verilator_alone"]
    assert alone["recorded_cycles"] > 0 and len(alone["cycles_per_s"]) == 1
    assert alone["default_over_alone"] == [round(rows[-1]["cycles_per_s"] /
                                                 alone["cycles_per_s"][0], 3)]
