"""Full-device trace vs golden model: one small real run (cosim/trace_compare_tests.py, recorded
through the ``TCXL_TRACE`` hook of ``cosim.tb_device``), its raw boundary trace reduced and
compared with the expected trace the model derives from the run's host action log; then one
field of the recorded RTL trace is perturbed and ``python -m cosim.compare`` must exit 1 and
name it. The Verilator build of ``DeviceConfig()`` is shared with tests/cosim/test_device.py.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cosim import build as cb
from cosim.compare import compare_files, load_trace
from hw.config import DeviceConfig

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cfg = DeviceConfig()
    t0 = time.monotonic()
    b = cb.device_build(cfg)
    t1 = time.monotonic()
    out = tmp_path_factory.mktemp("trace-compare")
    trace = out / "rtl.jsonl"
    cb.run(b, "cosim.trace_compare_tests", seed=1, test_dir=out,
           extra_env={"TCXL_CONFIG": cfg.to_json(), "TCXL_TRACE": trace})
    print(f"build {t1 - t0:.1f} s, run {time.monotonic() - t1:.1f} s")
    return trace, out / "rtl.actions.jsonl"


def _media_w(lines, addr, k):
    """Index of the W beat of the ``k``-th media write burst to line ``addr`` (one beat per
    line at the default 512-bit media width; AW and W paired in order, as AXI does)."""
    aws = [r["awaddr"] for r in lines if r.get("ch") == "aw"]
    ws = [j for j, r in enumerate(lines) if r.get("ch") == "w"]
    hits = [w for a, w in zip(aws, ws) if a == addr]
    return hits[k]


def _cli(a, b):
    return subprocess.run([sys.executable, "-m", "cosim.compare", str(a), str(b)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.mark.cosim
def test_rtl_trace_equals_model(recorded):
    trace, actions = recorded
    rtl = load_trace(trace)
    assert list(rtl) == ["trace_compare"], list(rtl)
    ev = rtl["trace_compare"]
    kinds = {e.get("ev") for e in ev}
    assert {"csr_w", "csr_r", "cxl", "mwr", "cpl", "image"} <= kinds, kinds
    res = compare_files(trace, actions)
    assert res.equal, res.report
    assert res.counts["cpl"] == 10 and res.counts["image"] == 2, res.counts
    p = _cli(trace, actions)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.cosim
def test_perturbed_rtl_trace_is_caught(recorded, tmp_path):
    """The ``status`` byte of the second completion written to the media (in the raw AXI
    write data), then one byte of a host read's DRS data."""
    from hw.encodings import CPL_FIELDS
    trace, actions = recorded
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    sem = load_trace(trace)["trace_compare"]
    cpl = [e for e in sem if e.get("ev") == "cpl"][1]
    # the media write just before that completion event is its record
    wr = [e for e in sem if e.get("ev") == "mwr" and e["i"] < cpl["i"]][-1]
    k = _media_w(lines, wr["addr"], wr["k"])
    off = next(o for n, o, _ in CPL_FIELDS if n == "status")
    data = bytearray(int(lines[k]["wdata"], 16).to_bytes(64, "little"))
    data[off] ^= 0x3
    lines[k]["wdata"] = format(int.from_bytes(data, "little"), "0128x")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in lines))
    p = _cli(bad, actions)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "first divergence" in p.stdout and "cpl n=1: field 'status' differs" in p.stdout, \
        p.stdout
    # and a DRS data byte of a host read
    lines = [json.loads(x) for x in trace.read_text().splitlines()]
    k = next(k for k, r in enumerate(lines) if r.get("ch") == "s2m_drs")
    data = bytearray(int(lines[k]["data"], 16).to_bytes(64, "little"))
    data[3] ^= 0x80
    lines[k]["data"] = format(int.from_bytes(data, "little"), "0128x")
    bad.write_text("".join(json.dumps(r) + "\n" for r in lines))
    p = _cli(bad, actions)
    assert p.returncode == 1 and "'drs.data'" in p.stdout and "bytes differing: [3]" \
        in p.stdout, p.stdout
