"""The C++ PMEM model (``cosim.pmem_cpp``) behaves exactly as the Python one (``cosim.pmem``).

One seeded full-device run, recorded (``BenchConfig.trace``), on each model, with the media's
bandwidth limited (the ``optane`` preset's 39.4 B/cycle read, 13.9 B/cycle write at 1 GHz,
cosim/media.py; latency 8 to keep the run short; the run asserts that both directions queued
for bandwidth, and the queueing cycles are part of the statistics compared): recover a fresh
device, two tables, two training batches (LOOKUP+LOG, UPDATE with and without logging,
COMMIT), host CXL.mem reads, then a third batch rung and the power cut while its writes are
in flight (``cosim.powerfail.power_fail``, seeded: torn 8-byte words, partial bursts,
staging garbage; a crash image on each of the first ``CUT`` cycles with a write in flight,
the power cut at the last), a restart from the crash image, recovery and a fourth batch. The bench
checks every completion, the memory image and the CSRs against the golden model
(``DeviceTB.run``/``check``; after the crash the model recovers the same crash image).

The launcher (end of file) then requires, between the Python-model run and the C++-model
run: the raw boundary traces (every handshake on CXL.mem, the media port and the CSR port,
with its cycle) byte for byte equal, and the crash image (every line, by SHA-256) and its
statistics equal at each of the ``CUT`` cycles; host writes with poison (acknowledged, cleared
fully or partly, and in flight at the first cuts) make the per-line poison bits part of every
image compared. Media faults: the cocotb tests of tests/cosim/media named in
``MEDIA_TESTS`` (seeded random faults, read and write faults with garbage data, faults during
recovery and snapshots), recorded on both models, give byte-equal traces (every error
response on the media port and every report it causes) and pass their own checks against the
golden model. Everything is compared with the Python model's run, never with the C++ model's
own figures. The media-fault tests run with unlimited bandwidth (the default timing).
Build: the default ``DeviceConfig()`` build (shared with tests/cosim/device), which carries both
models (``cosim.pmem_cpp.wrapper``); each run picks one.
"""
import hashlib
import json
import random
import time

import cocotb
import pytest
from cocotb.triggers import ClockCycles

from cosim import build as cb
from cosim.media import media_timing
from cosim.pmem_cpp import PMEM_MODELS
from cosim.powerfail import power_fail
from cosim.tb.config import BenchConfig
from cosim.tb.device import DeviceTB, training_batch
from hw.config import DeviceConfig

LINE = 64
CUT = 40           # crash images taken, one per cycle with a media write in flight
MEDIA = media_timing("optane")      # its bandwidths (the latency stays 8)


def _batch(tb, b, tag):
    return training_batch(tb, b, tag, 4)


def _digest(mem) -> str:
    """SHA-256 of every line (address, bytes), then of every poisoned line address."""
    h = hashlib.sha256()
    for a in sorted(mem._lines):
        h.update(a.to_bytes(8, "little") + bytes(mem._lines[a]))
    h.update(b"poisoned")
    for a in sorted(mem.poisoned):
        h.update(a.to_bytes(8, "little"))
    return h.hexdigest()


@cocotb.test()
async def pmem_parity_run(dut):
    tb = DeviceTB(dut, latency=8, name="pmem_parity",
                  **{k: v for k, v in MEDIA.pmem_kwargs().items() if k.endswith("bandwidth")})
    assert tb.pmem.read_bandwidth is not None and tb.pmem.write_bandwidth is not None
    assert tb.trace is not None, "BenchConfig.trace is not set: nothing recorded"
    cfg = tb.cfg
    staging = (cfg.staging_base, cfg.staging_size)
    await tb.power_on()
    await tb.recover()
    for tid, rows, dim in ((0, 40, 16), (1, 16, 64)):
        await tb.set_table(tid, tb.new_table(rows, dim), rows, dim)
    await tb.set_lr(int(0.1 * (1 << cfg.frac_bits)))
    await tb.configure_ring(16)
    await tb.run(_batch(tb, 1, 1), "batch 1")
    descs = _batch(tb, 2, 40)
    await tb.run(descs[:3], "batch 2a")
    await tb.run(descs[3:], "batch 2b")
    await tb.check("after two batches")
    base0 = tb.tables[0][0]
    lines = await tb.drv.read_lines([base0, base0 + 3 * LINE, cfg.superblock_base])
    assert lines[0] == tb.model.mem.read(base0, LINE), tb.where("host read of row 0")

    # poison (docs/coherence.md "Poison"): lines of the table region no table uses, written
    # by the host with poison: two acknowledged (one then cleared by a full-line write, one
    # cleared only partly), four more still in flight at the first crash images
    spare = [tb.talloc.alloc(LINE) for _ in range(6)]
    host = tb.drv.host
    for a in spare[:2]:
        await host.write(a // LINE, bytes([0xE1]) * LINE, poison=1)
    await host.write(spare[0] // LINE, bytes([0xE2]) * LINE)
    await host.write(spare[1] // LINE, bytes([0xE3]) * LINE, (1 << 64) - 2)
    poisoned = [await host.read(a // LINE, "cur") for a in spare[:2]]
    assert [int(t.drs["poison"]) for t in poisoned] == [0, 1], tb.where("poison after writes")
    for a in spare[:2]:
        tb.model.mem.write(a, tb.mem.read(a, LINE))      # (bytes no engine reads)
    for a in spare[2:]:
        await host.write(a // LINE, bytes([0xE4]) * LINE, poison=1, wait=False)

    # power fails while batch 3 runs
    # A crash image is taken (power_fail only reads the model) on each of the first CUT
    # cycles with a write in flight; the power really fails at the last of them.
    await tb.ring_raw(_batch(tb, 3, 80))
    images = []
    for _ in range(20_000):
        await ClockCycles(dut.clk, 1)
        await tb.pmem.settle()    # (the C++ model: this edge evaluated; see its docstring)
        if not tb.pmem.writes_in_flight:
            continue
        cycle = tb.pmem.cycle
        img = power_fail(tb.pmem, random.Random(tb.seed + cycle), staging=staging, cycle=cycle)
        images.append([cycle, _digest(img.mem), img.unapplied, img.bursts_without_data,
                       img.words_survived, img.words_lost, sorted(img.mem.poisoned)])
        if len(images) == CUT:
            break
    stats = tb.pmem.stats()
    assert stats["r_queue_cycles"] > 0 and stats["w_queue_cycles"] > 0, \
        tb.where(f"the bandwidth limit never delayed a response: {stats}")
    assert any(a in im[6] for im in images for a in spare[2:]), \
        tb.where("no crash image holds an in-flight poisoned write")
    report = {"cycle": cycle, "pmem_stats": stats, "images": images,
              "image_lines": len(img.mem._lines),
              "crash": {k: getattr(img, k) for k in (
                  "words_survived", "words_lost", "applied_unacked", "unapplied",
                  "bursts_without_data", "staging_lines", "writes_in_flight")}}
    partial = sum(1 for im in images if im[2] or im[3])
    dut._log.info(f"power failure at cycle {cycle}: {report['crash']}; {len(images)} images, "
                  f"{partial} with partial or data-less bursts")
    assert len(images) == CUT, tb.where(f"only {len(images)} cycles with writes in flight")
    await tb.power_on(in_reset=lambda: tb.drv.load_image(img))
    tb.model.mem = img.mem.copy()          # the model recovers the same crash image
    await tb.recover()
    for tid, rows, dim in ((0, 40, 16), (1, 16, 64)):
        await tb.set_table(tid, tb.bases[tid], rows, dim)
    await tb.set_lr(int(0.1 * (1 << cfg.frac_bits)))
    await tb.configure_ring(16)
    await tb.run(_batch(tb, 4, 120), "batch 4 after recovery")
    # staging is garbage after the crash on both sides, but the model materialises only the
    # lines it reads: compare outside staging
    rtl, model = tb.rtl_image(), tb.model.mem
    s0, s1 = staging[0], staging[0] + staging[1]
    bad = [la for la in sorted(set(rtl._lines) | set(model._lines))
           if not s0 <= la < s1 and rtl.read(la, LINE) != model.read(la, LINE)]
    assert not bad, tb.where(f"memory differs from the model after recovery at {bad[:4]}")
    await tb.pmem.settle()
    report["final_pmem_stats"] = tb.pmem.stats()
    tb.trace.write()
    (tb.trace.path.parent / "pmem_report.json").write_text(json.dumps(report, indent=1))


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    seed = request.config.getoption("--seed")          # (the seed fixture is per test)
    seed = 1 if seed is None else seed
    print(f"seed={seed}")
    cfg = DeviceConfig()
    t0 = time.monotonic()
    b = cb.device_build(cfg)                           # one build carries both models
    print(f"build {time.monotonic() - t0:.1f} s")
    out = {}
    for kind in PMEM_MODELS:
        t1 = time.monotonic()
        d = tmp_path_factory.mktemp(f"pmem-{kind}")
        trace = d / "rtl.jsonl"
        res = cb.run(b, __name__, seed=seed, test_dir=d,
                     params=BenchConfig(cfg, trace=str(trace), pmem=kind))
        assert res.n_ran == 1 and res.n_failed == 0, (res, seed)
        print(f"{kind}: run {time.monotonic() - t1:.1f} s")
        out[kind] = (trace, json.loads((d / "pmem_report.json").read_text()))
    return out


@pytest.mark.cosim
def test_cpp_pmem_trace_equals_python(runs, seed):
    """Every boundary handshake, with its cycle, equal with either PMEM model."""
    py, cpp = runs["python"][0].read_text(), runs["cpp"][0].read_text()
    assert py.count("\n") > 1000, "trace too short to prove anything"
    if py != cpp:
        a, b = py.splitlines(), cpp.splitlines()
        i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        raise AssertionError(f"seed {seed}: traces differ at line {i + 1} "
                             f"(python {len(a)} lines, cpp {len(b)}):\n"
                             f"python: {a[i] if i < len(a) else '<end>'}\n"
                             f"cpp:    {b[i] if i < len(b) else '<end>'}")


@pytest.mark.cosim
def test_cpp_pmem_crash_image_equals_python(runs, seed):
    """The crash image at the same cut cycle and seed: same lines and bytes, same statistics
    (torn words survived/lost, applied-unacknowledged and partial bursts, staging garbage)."""
    py, cpp = runs["python"][1], runs["cpp"][1]
    assert py == cpp, f"seed {seed}: python {py}\ncpp {cpp}"


# a quick cross-section of tests/cosim/media (15 cocotb tests, about 20 s a model)
MEDIA_TESTS = ("media_random_faults_every_one_reported|media_lookup_no_log|"
               "media_completion_write_fails|media_snapshot_copy_reports|"
               "media_host_read_poisoned|media_recovery_reports|"
               "media_poison_survives_power_failure")
N_MEDIA_TESTS = 3 + 4 + 1 + 3 + 1 + 3 + 1


@pytest.mark.cosim
def test_cpp_pmem_media_faults_equal_python(tmp_path, request):
    """The same media-fault tests on both models: every one passes, traces byte-equal."""
    seed = request.config.getoption("--seed")
    seed = 1 if seed is None else seed
    cfg = DeviceConfig()
    b = cb.device_build(cfg)
    traces = {}
    for kind in PMEM_MODELS:
        d = tmp_path / kind
        traces[kind] = d / "rtl.jsonl"
        res = cb.run(b, "tests.cosim.media.test_media", seed=seed,
                     test_filter=MEDIA_TESTS, test_dir=d,
                     params=BenchConfig(cfg, trace=str(traces[kind]), pmem=kind))
        assert res.n_ran == N_MEDIA_TESTS and res.n_failed == 0, (res, seed)
    py, cpp = (traces[k].read_text() for k in PMEM_MODELS)
    assert '"rresp": 2' in py and '"bresp": 2' in py, \
        "no read or no write error response recorded: the faults did not reach the trace"
    assert py == cpp, f"seed {seed}: media-fault traces differ (python {traces['python']}, " \
                      f"cpp {traces['cpp']})"


def test_cpp_model_refused_without_it_in_the_simulator():
    """Outside a simulator with the C++ model compiled in (here: no simulator at all), asking
    for it is a clear error naming the build that has it; an unknown kind too."""
    from cosim.pmem_cpp import pmem_model
    with pytest.raises(RuntimeError, match=r"without the C\+\+ PMEM model.*device_build"):
        pmem_model("cpp", None)
    with pytest.raises(ValueError, match="must be one of"):
        pmem_model("rust", None)
