"""Smoke size of the main job (`make demo`, trainingcxl/train/job.py): DLRM training with the RTL in
the loop.

* Without failures, the RTL run's final tables and MLP parameters are bit-identical to an
  independent golden-model run (sw_model only, no simulator) of the same job, and so are its
  held-out metrics.
* With a power failure, the run completes, its golden-model twin agreed on every completion,
  host read, recovery and the final memory, and recovery reported C - k <= m <= C.
* `--trace` then `compare` (docs/traces.md) on the run with the power failure: the recorded
  boundary trace equals the one the golden model derives from the host action log, a changed
  byte in a media write is refused at that write (before the failure and after it), and so is
  a media read moved elsewhere.

Both use the default DeviceConfig, so the Verilator build is shared with the other device
tests.
"""
import json

import numpy as np
import pytest

from trainingcxl.train import job
from sw_model.dlrm import DLRM, make_model_device, synthetic_data, train


def _run(tmp_path, name, *args):
    out = tmp_path / name
    rc = job.main(["--eval-batches", "2", "--mlp-cycles", "200", "--quiet",
                          "--out", str(out), *args])
    rep = json.loads((out / "summary.json").read_text())
    return rc, out, rep


@pytest.mark.cosim
def test_demo_without_failures_equals_golden_model(tmp_path):
    n = 6
    rc, out, rep = _run(tmp_path, "nofail", "--batches", str(n), "--crashes", "0",
                        "--lag", "2", "--seed", "3")
    assert rc == 0 and rep["twin_equal"] and not rep["crashes"], rep
    mcfg = job._args(["--lag", "2"]).model
    dev = make_model_device(mcfg)
    model = DLRM(mcfg)
    train(dev, model, synthetic_data(mcfg), n, mcfg)
    assert (out / "rtl_run.json.mlp").read_bytes() == model.to_bytes()
    with np.load(out / "rtl_run.json.tables.npz") as z:
        for t, want in enumerate(dev.tables()):
            assert np.array_equal(z[f"arr_{t}"], want), f"table {t} differs"
    assert rep["rtl"]["eval"] == rep["golden"]["eval"]
    assert rep["n_snapshots"] == n // 2          # SNAPSHOT every k = 2 batches
    for f in ("report.md", "loss.png", "cycles.png"):
        assert (out / f).stat().st_size > 0


def _perturb_media_write(trace, out, after_reset: int, pick):
    """Copy raw trace ``trace`` to ``out`` with one byte flipped in the W beat of the media
    write that ``pick(semantic mwr event)`` selects first after the ``after_reset``-th reset
    (single-beat bursts: AW and W paired in order, as the reducer does). Returns the event."""
    from cosim.trace.compare import load_trace
    sem = next(iter(load_trace(trace).values()))
    resets = [e["i"] for e in sem if e.get("ev") == "reset"]
    mwrs = [e for e in sem if e.get("ev") == "mwr" and e["i"] > resets[after_reset]]
    j = next(n for n, e in enumerate(mwrs) if pick(e))
    lines = trace.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    r0 = [k for k, r in enumerate(recs) if r.get("ch") == "reset" and r.get("rst") == 1]
    first = r0[after_reset]
    aws = [k for k, r in enumerate(recs) if k > first and r.get("ch") == "aw"]
    ws = [k for k, r in enumerate(recs) if k > first and r.get("ch") == "w"]
    assert recs[aws[j]]["awaddr"] == mwrs[j]["addr"]
    rec = recs[ws[j]]
    data = bytearray(int(rec["wdata"], 16).to_bytes(64, "little"))
    data[5] ^= 0x40
    rec["wdata"] = format(int.from_bytes(data, "little"), "0128x")
    lines[ws[j]] = json.dumps(rec)
    out.write_text("\n".join(lines) + "\n")
    return mwrs[j]


@pytest.mark.cosim
def test_demo_with_a_power_failure_recovers(tmp_path):
    """A power failure during the job: it completes, the twin agreed throughout, recovery
    reported C - k <= m <= C. ``trainingcxl train --trace`` then ``compare``: the recorded
    boundary trace (reset, recovery and resume included) equals the trace the golden model
    derives from the job's host action log (the tables the job loads reach the log as a media
    image); one changed byte is refused where it is, both in a media write to staging before
    the failure and in the recovery's first media write, and so is a media read moved to a
    line the model never reads."""
    from cosim.trace.compare import compare_files
    from hw.config import DeviceConfig
    k = 2
    trace = tmp_path / "t.jsonl"
    rc, out, rep = _run(tmp_path, "fail", "--batches", "8", "--crashes", "1",
                        "--lag", str(k), "--seed", "5", "--trace", str(trace))
    assert rc == 0 and rep["twin_equal"], rep
    (c,) = rep["crashes"]
    assert c["trainer"]["batch"] == c["batch"]
    m = c["mlp_epoch"] if c["mlp_slot"] else 0
    assert c["committed"] - k <= m <= c["committed"], c
    assert c["committed"] <= c["batch"] <= c["committed"] + 1, c
    assert np.isfinite(rep["rtl"]["eval"]["logloss"])
    actions = tmp_path / "t.actions.jsonl"
    res = compare_files(trace, actions)
    assert res.equal, res.report
    assert res.counts["image"] == 8, res.counts           # batches 1..8 committed once each
    assert res.counts["cpl"] >= 8 * 4, res.counts
    cfg = DeviceConfig()
    s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
    bad = tmp_path / "bad.jsonl"
    ev = _perturb_media_write(trace, bad, 0,
                              lambda e: s0 <= e["addr"] < s1 and not e.get("cpl_line"))
    res = compare_files(bad, actions)
    d = res.divergence
    assert not res.equal and (d.cls, d.field) == ("mwr", "data"), res.report
    assert d.key[:2] == ("line", ev["addr"]), res.report
    ev = _perturb_media_write(trace, bad, 1, lambda e: True)
    res = compare_files(bad, actions)
    d = res.divergence
    assert not res.equal and d.cls == "mwr" and d.field == "data", res.report
    assert d.key[:2] == ("epoch", 1) and d.key[3] == ev["addr"], res.report
    # a media read moved to a line the model never reads (the log's last line) is refused
    lines = trace.read_text().splitlines()
    i, rec = next((i, json.loads(x)) for i, x in enumerate(lines) if '"ch": "ar"' in x)
    stray = cfg.log_base + cfg.log_size - 64
    lines[i] = json.dumps({**rec, "araddr": stray, "arlen": 0})
    bad.write_text("\n".join(lines) + "\n")
    res = compare_files(bad, actions)
    d = res.divergence
    assert not res.equal and (d.cls, d.field) == ("mrd", "missing"), res.report
    assert d.key == ("line", stray, "k", 0), res.report


@pytest.mark.cosim
def test_demo_same_with_either_harness(tmp_path):
    """The job with everything around the RTL in Python (``--host python --csr python --twin
    inline``: cosim.cxl_host, cocotbext-axi, the twin in the simulator's process) and with the
    defaults (the compiled CXL.mem host and CSR master, the twin in its own process), a power
    failure in each: both twins agreed throughout, and the losses, predictions, final tables,
    MLP parameters and held-out metrics are identical. (The cycle counts are not compared: the
    compiled models hand control back at the edge that ended a job, after that edge is
    evaluated, the Python ones as the edge begins; jobs end cycles apart, so the crash lands
    elsewhere.)"""
    harnesses = {"python": ("--host", "python", "--csr", "python", "--twin", "inline"),
                 "cpp": ("--host", "cpp", "--csr", "cpp", "--twin", "process")}
    reps = {}
    for name, flags in harnesses.items():
        rc, out, rep = _run(tmp_path, name, "--batches", "6", "--crashes", "1", "--lag", "2",
                            "--seed", "4", *flags)
        assert rc == 0 and rep["twin_equal"] and len(rep["crashes"]) == 1, (name, rep)
        run = json.loads((out / "rtl_run.json").read_text())
        with np.load(out / "rtl_run.json.tables.npz") as z:
            tables = [z[k] for k in sorted(z.files)]
        reps[name] = (run, tables, (out / "rtl_run.json.mlp").read_bytes(), rep["rtl"]["eval"])
    (py, py_t, py_mlp, py_ev), (cpp, cpp_t, cpp_mlp, cpp_ev) = reps["python"], reps["cpp"]
    assert py["losses"] == cpp["losses"] and py["preds"] == cpp["preds"]
    assert len(py_t) == len(cpp_t) == 4
    assert all(np.array_equal(a, b) for a, b in zip(py_t, cpp_t))
    assert py_mlp == cpp_mlp and py_ev == cpp_ev
    assert py["stats"]["descriptors"] == cpp["stats"]["descriptors"]


@pytest.mark.cosim
def test_demo_same_cycles_with_either_clock(tmp_path):
    """The default job (every model compiled) on the top that makes its own clock and, with
    ``--clock cocotb``, on the top a cocotb ``Clock`` drives, a power failure in each: the same
    run to the cycle (``rtl_run.json`` equal but for its wall time: cycles per batch and phase,
    the crash and what recovery reported, losses, predictions, statistics), the same final
    tables and MLP parameters, both twins agreeing throughout. ``--clock own`` with a Python
    model is refused."""
    runs = {}
    for clock in ("own", "cocotb"):
        rc, out, rep = _run(tmp_path, clock, "--batches", "6", "--crashes", "1", "--lag", "2",
                            "--seed", "4", "--clock", clock)
        assert rc == 0 and rep["twin_equal"] and len(rep["crashes"]) == 1, (clock, rep)
        run = json.loads((out / "rtl_run.json").read_text())
        del run["wall_s"]
        with np.load(out / "rtl_run.json.tables.npz") as z:
            tables = [z[k].tobytes() for k in sorted(z.files)]
        runs[clock] = (run, tables, (out / "rtl_run.json.mlp").read_bytes())
    assert runs["own"][0]["cycles"] > 0 and runs["own"][0]["crashes"]
    assert runs["own"] == runs["cocotb"]
    with pytest.raises(SystemExit):
        job._args(["--clock", "own", "--pmem", "python"])


def test_staging_chunks_to_lines_equal_a_byte_by_byte_merge(seed):
    """The lines the RTL run's staging writes send (whole lines taken as they are, partial
    ones merged with their byte enables, a later chunk winning) equal a byte-by-byte merge of
    the same random chunks (offsets across line boundaries, overlaps, lengths 1-200)."""
    import random
    from trainingcxl.train.rtl_device import _lines_of
    r = random.Random(seed)
    for _ in range(2000):
        chunks = [(r.randrange(1024), r.randbytes(r.choice((1, 5, 63, 64, 65, 128, 130, 200))))
                  for _ in range(r.randrange(1, 5))]
        want = {}
        for addr, data in chunks:
            for i, b in enumerate(data):
                la, off = (addr + i) // 64 * 64, (addr + i) % 64
                buf, be = want.get(la, (bytearray(64), 0))
                buf[off] = b
                want[la] = (buf, be | 1 << off)
        got = {la: (bytes(buf), be) for la, (buf, be) in _lines_of(chunks).items()}
        assert got == {la: (bytes(buf), be) for la, (buf, be) in want.items()}, (seed, chunks)
