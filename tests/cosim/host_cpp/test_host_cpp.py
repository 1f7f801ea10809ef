"""The compiled CXL.mem host (``cosim.host_cpp``) on the full device.

cocotb tests (default ``DeviceConfig()`` build, shared with tests/cosim/device; the bench picks
the compiled host with ``BenchConfig(host="cpp")``):

* ``host_cpp_lines``: seeded whole-line and partial writes through the compiled host land in
  PMEM as an independent byte-merge in Python says (read by the PMEM model's backdoor, not by
  the host), lines put in PMEM by the backdoor read back through the host unchanged, a read
  of the undo log gets MemData-NXM (all ones, poisoned, checked by the engine) and a write of
  the superblock a Cmp that writes nothing (the superblock reads back), and the tags continue
  the seeded sequence across jobs.
* ``host_cpp_violations``: the engine's checks can fail: with the reference's allowed NDR or
  DRS opcodes replaced by ones that exclude the device's answer, a job raises
  ``HostViolationError`` naming the rule; a job whose answers cannot arrive (the host
  detached) raises after its timeout naming the first open request; a line twice in one job,
  a misaligned address, a short line and a partial line through the backdoor are refused
  before anything is sent.

The launcher also runs tests/cosim/device's cocotb tests with the compiled host
(test_device_cosim covers the Python host), and the main job's agreement between hosts is in
tests/cosim/train.
"""
import random

import cocotb
import pytest

from cosim import build as cb
from cosim.cxl_host import HostViolationError
from cosim.tb.config import BenchConfig
from cosim.tb.device import DeviceTB
from hw.config import DeviceConfig

LINE = 64
ALL_BE = (1 << LINE) - 1


def _merge(old: bytes, new: bytes, be: int) -> bytes:
    return bytes(n if be >> i & 1 else o for i, (o, n) in enumerate(zip(old, new)))


async def _bench(dut, name):
    tb = DeviceTB(dut, latency=12, name=name)
    assert tb.bench.host == "cpp", "the launcher runs this module with BenchConfig(host='cpp')"
    await tb.power_on()
    await tb.recover()
    from cosim.host_cpp import CppHost
    assert isinstance(tb.drv.host, CppHost), type(tb.drv.host)
    return tb


@cocotb.test()
async def host_cpp_lines(dut):
    tb = await _bench(dut, "host_cpp/lines")
    rng = random.Random(tb.seed)
    cfg, mem = tb.cfg, tb.pmem.mem
    lines = rng.sample(range(cfg.staging_base, cfg.staging_base + cfg.staging_size, LINE), 48)
    want = {a: bytes(mem.read(a, LINE)) for a in lines}
    first_tag, n_sent = tb.drv.host._next_tag, 0
    # three jobs: whole lines, then partial enables over the same lines, then a mix
    for job in range(3):
        items = []
        for a in lines[16 * job:16 * job + 16] if job < 2 else lines[::3]:
            data = rng.randbytes(LINE)
            be = ALL_BE if job == 0 or rng.random() < 0.3 else rng.getrandbits(LINE) or 1
            items.append((a, data, be))
            want[a] = _merge(want[a], data, be)
        await tb.drv.write_lines(items)
        n_sent += len(items)
        for a, *_ in items:
            got = bytes(mem.read(a, LINE))
            assert got == want[a], f"line {a:#x} after job {job}: PMEM {got.hex()} " \
                                   f"!= {want[a].hex()} (seed {tb.seed})"
    # backdoor writes read back through the host
    for a in lines[:20]:
        want[a] = rng.randbytes(LINE)
        mem.write(a, want[a])
    got = await tb.drv.read_lines(lines[:20])
    for a, g in zip(lines[:20], got):
        assert g == want[a], f"read of {a:#x}: {g.hex()} != {want[a].hex()} (seed {tb.seed})"
    n_sent += 20
    assert tb.drv.host._next_tag == (first_tag + n_sent) & 0xFFFF
    # refused regions (docs/coherence.md): a read of the undo log gets MemData-NXM (the engine
    # checks all ones and poison), a write of the superblock a Cmp and nothing written; the
    # superblock reads back with SnpCur
    lg, sb = cfg.log_base, cfg.superblock_base
    mem.write(lg, rng.randbytes(LINE))
    assert await tb.drv.read_lines([lg]) == [b"\xff" * LINE]
    before = bytes(mem.read(sb, LINE))
    assert before[:4] == b"TCXL", "no superblock after recovery"
    await tb.drv.write_lines([(sb, bytes(LINE))])
    assert bytes(mem.read(sb, LINE)) == before, "a write to the superblock changed it"
    assert await tb.drv.read_lines([sb]) == [before]


@cocotb.test()
async def host_cpp_violations(dut):
    tb = await _bench(dut, "host_cpp/violations")
    a = tb.cfg.staging_base

    def wrong(real, which):             # the reference's masks without the device's answer
        def masks(*request):
            need, ndr, drs = real(*request)
            return (need, ~ndr & 0xFFFF if which == "ndr" else ndr,
                    ~drs & 0xFFFF if which == "drs" else drs)
        return masks
    for which, job in (("ndr", lambda h: h.write_lines([(a, bytes(LINE))])),
                       ("drs", lambda h: h.read_lines([a]))):
        host = tb.drv.host
        host._masks = wrong(host._masks, which)
        try:
            await job(host)
        except HostViolationError as e:
            assert f"{which}_opcode" in str(e), e
        else:
            raise AssertionError(f"an {which.upper()} opcode outside the allowed set was not "
                                 "reported")
        tb.drv.new_host()
    host = tb.drv.host
    # refused before anything is sent
    for bad, match in (([(a, bytes(LINE)), (a, bytes(LINE))], "twice"),
                       ([(a + 8, bytes(LINE))], "whole lines"),
                       ([(a, bytes(LINE - 1))], "whole lines")):
        try:
            await host.write_lines(bad)
        except ValueError as e:
            assert match in str(e), e
        else:
            raise AssertionError(f"{bad[0][0]:#x}: not refused")
    assert host.stats["requests"] == 0
    tb.drv.via_host = False
    try:
        await tb.drv.write_lines([(a, bytes(LINE), 1)])
    except ValueError as e:
        assert "need the host" in str(e), e
    else:
        raise AssertionError("a partial line through the backdoor was not refused")
    tb.drv.via_host = True
    # no answer can arrive while detached: the job times out naming its first request
    host.detach()
    try:
        await host.read_lines([a], timeout=300)
    except AssertionError as e:
        assert "not complete after 300 cycles" in str(e) and f"{a // LINE:#x}" in str(e), e
    else:
        raise AssertionError("a read with the host detached completed")
    await tb.power_on()          # the device still offers the DRS: a power cycle ends it
    await tb.recover()


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_host_cpp_cosim(device_build, seed, tmp_path):
    """The cocotb tests above, on the compiled host."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path, params=BenchConfig(cfg, host="cpp"))
    assert res.n_ran == 2 and res.n_failed == 0, (res, seed)


@pytest.mark.cosim
def test_device_tests_on_the_compiled_host(device_build, seed, tmp_path):
    """tests/cosim/device's cocotb tests (completions, memory image and CSRs against the
    golden model) with every host transaction through the compiled host."""
    from tests.cosim.device.test_device import MIN_TESTS
    cfg, b = device_build
    res = cb.run(b, "tests.cosim.device.test_device", seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg, host="cpp"))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
    assert (tmp_path / "sim.log").read_text().count("host=cpp") >= MIN_TESTS
