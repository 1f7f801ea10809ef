"""Full-device trace against the golden model: one small full-device run, recorded.

Recording is switched on by the run's bench configuration (``BenchConfig.trace``, the hook in
``cosim.tb.device.DeviceTB``), so this also tests that hook. The workload: recover a fresh
device (the superblock is formatted), two tables, one training batch (LOOKUP+LOG x2, UPDATE x2
with one synchronous-logging path, COMMIT) in one doorbell, a second batch split over two
doorbells, host CXL.mem reads of table rows, the superblock and the undo log (refused: MemData-NXM), an unmapped CSR read and a
read-only CSR write. The bench also checks everything against its own model as usual
(``DeviceTB.run``/``check``).

Pytest launcher (end of file): the run's raw boundary trace is reduced and compared with the
expected trace the model derives from the run's host action log; then one field of the
recorded RTL trace is perturbed and ``trainingcxl compare`` must exit 1 and name it. The Verilator build of ``DeviceConfig()`` is shared with tests/cosim/device/test_device.py.
"""
import json
import subprocess
import sys
import time

import cocotb
import pytest

from cosim import build as cb
from cosim.tb.config import BenchConfig
from cosim.tb.device import E, DeviceTB, training_batch
from cosim.trace.compare import compare_files, load_trace
from hw.config import DeviceConfig

LINE = 64


def _batch(tb, b, tag):
    return training_batch(tb, b, tag, 3)


@cocotb.test()
async def traced_training_run(dut):
    tb = DeviceTB(dut, latency=8, name="trace_compare")
    assert tb.trace is not None, "BenchConfig.trace is not set: nothing recorded"
    # a fresh device: recovery formats the superblock (bytes 8..63, then magic/version)
    await tb.power_on()
    await tb.recover()
    for tid, rows, dim in ((0, 24, 16), (1, 12, 32)):
        await tb.set_table(tid, tb.new_table(rows, dim), rows, dim)
    await tb.set_lr(int(0.1 * (1 << tb.cfg.frac_bits)))
    await tb.configure_ring(8)
    await tb.run(_batch(tb, 1, 1), "batch 1")
    descs = _batch(tb, 2, 40)
    await tb.run(descs[:3], "batch 2a")
    await tb.run(descs[3:], "batch 2b")
    await tb.check("after two batches")
    # host reads: table rows, the superblock (uncached read allowed), the log (refused)
    cfg = tb.cfg
    base0 = tb.tables[0][0]
    addrs = [base0, base0 + 5 * LINE, cfg.superblock_base, cfg.log_base]
    lines = await tb.drv.read_lines(addrs)
    assert lines[0] == tb.model.mem.read(base0, LINE), tb.where("host read of row 0")
    assert lines[2] == tb.model.mem.read(cfg.superblock_base, LINE), tb.where("superblock")
    await tb.csr_bad_read(0xFFC)
    await tb.csr_bad_write(tb.map.offset("ERR_COUNT"), E.CSR_RO)
    await tb.check("after misuse")
    tb.trace.write()


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cfg = DeviceConfig()
    t0 = time.monotonic()
    b = cb.device_build(cfg)
    t1 = time.monotonic()
    out = tmp_path_factory.mktemp("trace-compare")
    trace = out / "rtl.jsonl"
    cb.run(b, __name__, seed=1, test_dir=out, params=BenchConfig(cfg, trace=str(trace)))
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
    return subprocess.run([sys.executable, "-m", "trainingcxl", "compare", str(a), str(b)],
                          capture_output=True, text=True, cwd=a.parent)


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
