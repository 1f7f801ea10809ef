"""The AXI4-Lite CSR master compiled into the simulator (``cosim.csr_cpp``) on the full device.

cocotb tests (default ``DeviceConfig()`` build, shared with tests/cosim/device; the bench picks
the compiled master with ``BenchConfig(csr="cpp")``):

* ``csr_cpp_same_registers``: seeded values written to the read-write registers through the
  compiled master read back the same through it and through cocotbext-axi's master (switched
  in on the same port), and the reverse; every read-only register reads the same through both;
  an unmapped read and a write to a read-only register answer SLVERR (raised by name); the
  one-job write-then-read (the doorbell's) reads back what it wrote and refuses the same way.
* ``csr_cpp_poll``: the completion wait as one job: a register already at its value matches on
  the first read; a value it never takes gives up after the timeout (not matched, several
  reads, within the timeout plus one wait); with the write-1-to-clear the interrupt status
  reads cleared afterwards.
* ``csr_cpp_violation``: the engine's protocol check can fail: an R for a read another master
  issued (the compiled master switched in while the R is offered) stops it with
  ``CsrProtocolError`` naming the rule.
* ``csr_cpp_expires``: a job that cannot finish (the master switched out, so no handshake
  reaches it) ends in the engine after its timeout: the read raises ``CsrProtocolError`` within
  the timeout and a cycle, instead of the wait on ``busy`` hanging, and the next job runs.

The launcher also runs tests/cosim/device's cocotb tests (completions, memory image and CSRs
against the golden model, the CSR-misuse and interrupt tests included) with every CSR access
through the compiled master and the compiled host; the main job's agreement between masters is
in tests/cosim/train.
"""
import random

import cocotb
import pytest
from cocotb.triggers import ClockCycles, FallingEdge

from cosim import build as cb
from cosim.csr import CsrMaster, CsrResponseError
from cosim.tb.config import BenchConfig
from cosim.tb.device import DeviceTB
from hw.config import DeviceConfig

# read-write registers a test may set to any value without starting anything
FREE_RW = ("LR", "MLP_LAG", "CMD_BASE_LO", "CMD_BASE_HI", "CPL_BASE_LO", "CPL_BASE_HI",
           "TABLE0_BASE_LO", "TABLE0_ROWS", "TABLE1_DIM", "IRQ_ENABLE")


async def _bench(dut, name):
    tb = DeviceTB(dut, latency=12, name=name)
    assert tb.bench.csr == "cpp", "the launcher runs this module with BenchConfig(csr='cpp')"
    await tb.power_on()
    await tb.recover()
    from cosim.csr_cpp import CppCsrMaster
    assert isinstance(tb.drv.csr, CppCsrMaster), type(tb.drv.csr)
    return tb


def _python_master(tb):
    """cocotbext-axi's master on the same port (selects the top's ext_ inputs)."""
    return CsrMaster(tb.dut, prefix="s_axil", clock=tb.dut.clk, reset=tb.dut.rst)


def _select(tb, master):
    """``master`` drives the CSR port from now on."""
    from cosim.csr_cpp.wrapper import SELECT_PORT
    getattr(tb.dut, SELECT_PORT).value = int(master is tb.drv.csr)
    return master


@cocotb.test()
async def csr_cpp_same_registers(dut):
    tb = await _bench(dut, "csr_cpp/registers")
    rng = random.Random(tb.seed)
    cpp = tb.drv.csr
    mask = {reg: sum(((1 << f["width"]) - 1) << f["lsb"] for f in tb.map.register(reg)["fields"])
            for reg in FREE_RW}
    ro = [n for n, r in tb.map.registers.items() if r["sw"] == "r" and not n.startswith("PERF")]
    want = {reg: rng.getrandbits(32) for reg in FREE_RW}
    for reg, v in want.items():
        await cpp.write(reg, v)
    got_cpp = {reg: await cpp.read(reg) for reg in FREE_RW + tuple(ro)}
    assert {reg: got_cpp[reg] for reg in FREE_RW} == {r: v & mask[r] for r, v in want.items()}, \
        (tb.seed, got_cpp, want)
    # cocotbext-axi's master on the same port (its channel monitors would also take the
    # compiled master's responses, so it comes last and the compiled one only reads after it)
    py = _python_master(tb)
    got_py = {reg: await py.read(reg) for reg in FREE_RW + tuple(ro)}
    assert got_py == got_cpp, (tb.seed, {r: (got_py[r], got_cpp[r]) for r in got_py
                                         if got_py[r] != got_cpp[r]})
    want = {reg: rng.getrandbits(32) for reg in FREE_RW}
    for reg, v in want.items():
        await py.write(reg, v)
    _select(tb, cpp)
    for reg, v in want.items():
        assert await cpp.read(reg) == v & mask[reg], (tb.seed, reg, hex(v))
    await cpp.expect_error_read(0xFFC)
    await cpp.expect_error_write(tb.map.offset("ID"), 0x1234)
    try:
        await cpp.write("ID", 1)
    except CsrResponseError as e:
        assert "ID" in str(e), str(e)
    else:
        raise AssertionError("a write to the read-only ID register was not refused")
    # the doorbell's write-then-read job: the read-back is the register's new value
    for reg in ("LR", "MLP_LAG"):
        v = rng.getrandbits(32)
        assert await cpp.write_read(reg, v) == v & mask[reg], (tb.seed, reg, hex(v))
        assert await cpp.read(reg) == v & mask[reg], (tb.seed, reg, hex(v))
    try:
        await cpp.write_read("ID", 1)
    except CsrResponseError as e:
        assert "ID" in str(e) and "write" in str(e), str(e)
    else:
        raise AssertionError("write_read to the read-only ID register was not refused")


@cocotb.test()
async def csr_cpp_poll(dut):
    tb = await _bench(dut, "csr_cpp/poll")
    cpp = tb.drv.csr
    head = await cpp.read("CPL_HEAD")
    matched, value, reads = await cpp.poll("CPL_HEAD", head, timeout=1000)
    assert (matched, value, reads) == (True, head, 1), (matched, value, reads)
    t0 = tb.pmem.cycle
    matched, value, reads = await cpp.poll("CPL_HEAD", head + 1, wait=64, timeout=600,
                                           clear=("IRQ_STATUS", 7))
    waited = tb.pmem.cycle - t0
    assert not matched and value == head and reads >= 600 // (64 + 16), (value, reads)
    assert 600 <= waited <= 600 + 64 + 32, waited
    assert await cpp.read("IRQ_STATUS") == 0
    # a mask: only the masked bits are compared (the recovery wait polls STATUS so)
    ready = tb.drv.STATUS_READY
    st = await cpp.read("STATUS")
    assert st & ready and st != ready | 1, hex(st)
    assert await cpp.poll("STATUS", ready, mask=ready, timeout=100) == (True, st, 1)
    matched, value, reads = await cpp.poll("STATUS", 0, mask=ready, wait=16, timeout=100)
    assert not matched and value == st and reads >= 100 // (16 + 16), (matched, value, reads)
    try:
        await cpp.poll("STATUS", ready | 1, mask=ready)
    except ValueError as e:
        assert "outside mask" in str(e), str(e)
    else:
        raise AssertionError("a poll wanting bits outside its mask was accepted")


@cocotb.test()
async def csr_cpp_violation(dut):
    tb = await _bench(dut, "csr_cpp/violation")
    from cosim.csr_cpp import CsrProtocolError
    cpp, py = tb.drv.csr, _python_master(tb)
    task = cocotb.start_soon(py.read("ID"))
    for _ in range(100):                      # the R offered, taken at the next rising edge
        await FallingEdge(dut.clk)
        if dut.s_axil__rvalid.value:
            break
    else:
        raise AssertionError("no R within 100 cycles of the read")
    _select(tb, cpp)                          # switched in before that edge: not its own R
    await ClockCycles(dut.clk, 8)
    task.cancel()
    try:
        await cpp.read("ID")
    except CsrProtocolError as e:
        assert "r_unexpected" in str(e), str(e)
    else:
        raise AssertionError("an R for another master's read was taken silently")


@cocotb.test()
async def csr_cpp_expires(dut):
    tb = await _bench(dut, "csr_cpp/expires")
    from cosim.csr_cpp import CsrProtocolError
    cpp = tb.drv.csr
    lr = await cpp.read("LR")
    _select(tb, _python_master(tb))           # switched out: no handshake reaches the engine
    cpp.timeout, t0 = 200, tb.drv.pmem.cycle
    try:
        await cpp.read("LR")
    except CsrProtocolError as e:
        assert "not done after 200 cycles" in str(e), str(e)
    else:
        raise AssertionError("a read with the master switched out completed")
    assert 200 <= tb.drv.pmem.cycle - t0 <= 202, tb.drv.pmem.cycle - t0
    _select(tb, cpp)
    cpp.timeout = 10_000
    assert await cpp.read("LR") == lr


# ---- pytest launcher ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def device_build():
    cfg = DeviceConfig()
    return cfg, cb.device_build(cfg)


@pytest.mark.cosim
def test_csr_cpp_cosim(device_build, seed, tmp_path):
    """The cocotb tests above, on the compiled master."""
    cfg, b = device_build
    res = cb.run(b, __name__, seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg, host="cpp", csr="cpp"))
    assert res.n_ran == 4 and res.n_failed == 0, (res, seed)


@pytest.mark.cosim
def test_device_tests_on_the_compiled_csr_master(device_build, seed, tmp_path):
    """tests/cosim/device's cocotb tests with every CSR access through the compiled master."""
    from tests.cosim.device.test_device import MIN_TESTS
    cfg, b = device_build
    res = cb.run(b, "tests.cosim.device.test_device", seed=seed, test_dir=tmp_path,
                 params=BenchConfig(cfg, host="cpp", csr="cpp"))
    assert res.n_ran >= MIN_TESTS and res.n_failed == 0, (res, seed)
    assert (tmp_path / "sim.log").read_text().count("csr=cpp") >= MIN_TESTS
