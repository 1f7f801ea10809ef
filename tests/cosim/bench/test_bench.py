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
