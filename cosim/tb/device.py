"""cocotb bench: the full device top (``hw/top.py``) in lock-step with the golden model.

:class:`DeviceTB` owns the PMEM model (the RTL's media, a ``MemoryImage``), the host driver
(``cosim.device_driver.DeviceDriver``) and a ``sw_model.training.TrainingDevice`` over a second
``MemoryImage``. Every host action is applied to both sides: backdoor table/staging data,
table directory and LR, ring configuration, doorbells (descriptors written into both rings),
recovery, resets, CSR misuse (the model's error registers are updated as the contract says).
:meth:`DeviceTB.check` then requires

* the whole memory image equal (tables, undo-log slots, superblock, staging: descriptors,
  LOOKUP outputs, completion records) -- with the completion records' ``cycles`` field zeroed
  on the RTL side (the model writes 0);
* the CSRs equal to the model's registers: ``ERR_CODE``, ``ERR_VALUE``, ``ERR_COUNT``,
  ``STATUS.ERROR``/``READY``, ``IRQ_STATUS``, ``COMMITTED``, ``LOG_SLOT``, ``MLP_SLOT``,
  ``MLP_EPOCH`` (once ready), ``CMD_HEAD``, ``CPL_HEAD``, ``CMD_TAIL`` (and
  ``RECOVERED_RECORDS`` after a recovery).

Configuration: :class:`cosim.tb.config.BenchConfig` (``device``, ``trace``) from the run's parameters.
The seed is drawn from cocotb's per-test ``random`` (reproducible from the run seed) and logged.
"""
from __future__ import annotations

import random

import numpy as np
from cocotb.triggers import ClockCycles

from cosim.csr import CsrMap
from cosim.device_driver import DeviceDriver
from cosim.model_top import start_clock
from cosim.pmem_cpp import pmem_model
from cosim.tb.config import BenchConfig, bench_config
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, FLAG_DESC_LR, FLAG_LOG, FLAG_NOLOG,
                          DescKind, DeviceError, LOG_HDR_FIELDS, LOG_SLOT_BYTES,
                          unpack_fields)
from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice
from sw_model.workload import RegionAllocator

__all__ = ["DeviceTB", "E", "K", "IRQ_BITS", "BenchConfig", "bench_config", "bags", "lr_q",
           "setup_tables", "lookup", "update", "commit", "training_batch"]

CLOCK_NS = 10
E = DeviceError
K = DescKind
IRQ_BITS = {"CPL": 1, "ERR": 2, "RECOVERED": 4}
STATUS_ERROR, STATUS_READY = 2, 4
_CYCLES_OFF = next(off for n, off, _ in CPL_FIELDS if n == "cycles")
_CYCLES_W = next(w for n, _, w in CPL_FIELDS if n == "cycles")


class DeviceTB:
    """Device top + PMEM + driver + golden model, kept in step (see the module docstring).

    ``latency``: PMEM read/write latency (cycles); ``write_latency``: the write latency when it
    differs (None: ``latency``); ``stall``: probability of a pause per cycle
    on every media AXI channel; ``via_host``: descriptors/completions through the CXL.mem host
    (else backdoor); ``read_bandwidth``/``write_bandwidth``: the PMEM's media bandwidth in bytes
    per cycle (None: unlimited; cosim/media.py)."""

    def __init__(self, dut, *, latency=16, write_latency=None, stall=0.0, via_host=True,
                 name="", read_bandwidth=None, write_bandwidth=None):
        self.dut = dut
        self.bench = bench_config()
        self.cfg = cfg = self.bench.device
        self.seed = random.getrandbits(32)
        write_latency = latency if write_latency is None else write_latency
        dut._log.info(f"{name}: seed={self.seed} latency={latency}/{write_latency} "
                      f"stall={stall} pmem={self.bench.pmem} host={self.bench.host} "
                      f"csr={self.bench.csr}")
        self.name = name
        self.rng = np.random.default_rng(self.seed)
        self.map = CsrMap()
        ab = cfg.addr_bits
        start_clock(dut, CLOCK_NS)
        stalls = {ch: stall for ch in ("ar", "r", "aw", "w", "b")} if stall else None
        self.pmem = pmem_model(self.bench.pmem, dut, clock=dut.clk, reset=dut.rst,
                               read_latency=latency, write_latency=write_latency, seed=self.seed,
                               stall=stalls, mem=MemoryImage(1 << ab), log_writes=False,
                               read_bandwidth=read_bandwidth, write_bandwidth=write_bandwidth)
        self.drv = DeviceDriver(dut, self.pmem, cfg, via_host=via_host, host_seed=self.seed,
                                host=self.bench.host, csr_model=self.bench.csr)
        # BenchConfig.trace: record the boundary trace and the host action log (docs/traces.md)
        self.trace = None
        if self.bench.trace:
            from cosim.trace.device import record_device_trace
            self.trace = record_device_trace(dut, self.bench.trace, drv=self.drv, section=name,
                                             seed=self.seed, cfg=cfg, period_ns=CLOCK_NS)
        # the driver must not touch IRQ_ENABLE/IRQ_STATUS: the model tracks them
        self.drv.use_irq = False
        self.model = TrainingDevice(cfg, MemoryImage(1 << ab))
        self.talloc = RegionAllocator(cfg.table_base, cfg.table_size)
        self.salloc = RegionAllocator(cfg.staging_base, cfg.staging_size)
        self.cpl_areas = []          # (base, size) of every completion ring configured
        self.tables = {}             # tid -> (base, rows, dim) as programmed
        self.bases = {}              # tid -> first base programmed (kept across resets)
        self.check_recovered = False

    # ------------------------------------------------------------------ helpers
    def where(self, what="") -> str:
        return f"[{self.name} seed={self.seed}] {what}"

    @property
    def mem(self) -> MemoryImage:
        """The RTL's media (the PMEM model may have been given a new image)."""
        return self.pmem.mem

    def poke(self, addr: int, data: bytes):
        """Backdoor write into both memories (host data the device only reads)."""
        self.mem.write(addr, bytes(data))
        self.model.mem.write(addr, bytes(data))
        if self.drv.actions is not None:
            self.drv.actions.poke(addr, data)

    def stage(self, data: bytes, align: int = 64) -> int:
        """Allocate staging for ``data``, write it into both memories; returns the address."""
        data = bytes(data)
        a = self.salloc.alloc(max(len(data), 4), align)
        if data:
            self.poke(a, data)
        return a

    def stage_u32(self, arr) -> int:
        return self.stage(np.asarray(arr, dtype="<u4").tobytes(), 4)

    def stage_i32(self, arr) -> int:
        return self.stage(np.asarray(arr, dtype="<i4").tobytes())

    def out_area(self, nbytes: int) -> int:
        """Staging area for LOOKUP outputs, pre-filled with the same junk on both sides."""
        return self.stage(self.rng.integers(0, 256, max(nbytes, 64), dtype=np.uint8).tobytes())

    def new_table(self, rows: int, dim: int, *, lo=-2**26, hi=2**26, extreme=0.0):
        """Allocate a table, fill it with random int32 in [lo, hi) (a fraction ``extreme`` of
        elements near either rail), write it into both memories; returns its base."""
        t = self.rng.integers(lo, hi, size=(rows, dim), dtype=np.int64)
        if extreme:
            m = self.rng.random((rows, dim)) < extreme
            rail = np.where(self.rng.random((rows, dim)) < 0.5, -2**31, 2**31 - 1)
            t = np.where(m, rail - np.sign(rail) * self.rng.integers(0, 2**20, (rows, dim)), t)
        base = self.talloc.alloc(rows * dim * 4)
        self.poke(base, t.astype("<i4").tobytes())
        return base

    @staticmethod
    def desc(**kw) -> bytes:
        return TrainingDevice.make_desc(**kw)

    # ------------------------------------------------------------------ power, recovery, config
    async def power_on(self, in_reset=None):
        """Reset the device (memory kept) and the model; ring and directory forgotten."""
        await self.drv.power_cycle(in_reset=in_reset)
        self.model.reset()           # also the table directory and LR, as the CSR block
        self.tables = {}

    async def recover(self):
        """RECOVER on both sides; COMMITTED equals the model's, and PERF_CYC_RECOVER (recovery
        cycles since reset) is at least 1 and at most the cycles the testbench itself counted
        from each RECOVER write (since reset, failed recoveries included) to the STATUS read
        that saw its end."""
        c = await self.drv.recover()
        self.model.recover()
        self.check_recovered = True
        assert c == self.model.committed, self.where(f"COMMITTED {c} != model "
                                                     f"{self.model.committed}")
        cyc = await self.drv.read("PERF_CYC_RECOVER")
        assert 1 <= cyc <= self.drv.recover_cycles, self.where(
            f"PERF_CYC_RECOVER {cyc}, recoveries since reset took at most "
            f"{self.drv.recover_cycles} cycles")
        return c

    async def set_table(self, tid, base, rows, dim):
        await self.drv.write64(f"TABLE{tid}_BASE", base)
        await self.drv.write(f"TABLE{tid}_ROWS", rows)
        await self.drv.write(f"TABLE{tid}_DIM", dim)
        self.model.set_table(tid, base, rows, dim)
        self.tables[tid] = (base, rows, dim)
        self.bases.setdefault(tid, base)

    async def set_lr(self, lr):
        await self.drv.write("LR", lr)
        self.model.lr = lr

    async def configure_ring(self, size: int, *, cmd_base=None, cpl_base=None):
        """Program CMD_BASE, CMD_SIZE, CPL_BASE (ring idle) on both sides; allocates the rings
        in staging unless bases are given (then they need not be valid)."""
        if cmd_base is None:
            cmd_base = self.salloc.alloc(DESC_BYTES * size)
        if cpl_base is None:
            cpl_base = self.salloc.alloc(CPL_BYTES * size)
        await self.drv.write64("CMD_BASE", cmd_base)
        await self.drv.write("CMD_SIZE", size)
        await self.drv.write64("CPL_BASE", cpl_base)
        self.drv.set_ring(cmd_base, size, cpl_base)
        assert self.model.configure_ring(cmd_base, size, cpl_base) == E.OK
        if self.model._ring_config_error() is None:
            self.cpl_areas.append((cpl_base, size))

    # ------------------------------------------------------------------ descriptors
    def _model_ring(self, descs):
        """Write ``descs`` into the model's ring after its tail; returns the new tail."""
        m = self.model
        for i, d in enumerate(descs):
            m.mem.write(m.cmd_base + DESC_BYTES * ((m.tail + i) % m.cmd_size), d)
        return (m.tail + len(descs)) % m.cmd_size

    async def run(self, descs, what="") -> list:
        """Submit ``descs`` in one doorbell on both sides, compare every completion (all fields
        but ``cycles``); returns the RTL completions."""
        tail = self._model_ring(descs)
        assert self.model.doorbell(tail) == E.OK
        want = self.model.process()
        got = await self.drv.submit(descs)
        self.compare_cpls(want, got, what)
        return got

    async def run_in_doorbells(self, descs, what="") -> list:
        """:meth:`run` over as many doorbells as the configured ring needs (at most
        ``CMD_SIZE`` - 1 descriptors each), in order; returns every RTL completion."""
        per = self.model.cmd_size - 1
        got = []
        for k in range(0, len(descs), per):
            got += await self.run(descs[k:k + per], what)
        return got

    def compare_cpls(self, want, got, what=""):
        assert len(want) == len(got), self.where(f"{what}: {len(got)} completions, model "
                                                 f"{len(want)}")
        for k, (w, g) in enumerate(zip(want, got)):
            bad = {f: (int(w[f]), int(g[f])) for f, _, _ in CPL_FIELDS
                   if f != "cycles" and int(w[f]) != int(g[f])}
            if bad:
                kind = K(w["kind"]).name if w["kind"] in K._value2member_map_ else w["kind"]
                st = (E(int(w["status"])).name if int(w["status"]) in E._value2member_map_
                      else int(w["status"]))
                raise AssertionError(self.where(
                    f"{what}: completion {k} (tag {w['tag']}, {kind}, model status {st}) "
                    f"differs, field: (model, RTL): {bad}"))

    async def ring_raw(self, descs):
        """Write ``descs`` after the tail and ring the doorbell on both sides without waiting
        (the model runs nothing yet). Returns the new tail."""
        drv = self.drv
        size = drv.ring_size
        slots = [(drv.tail + i) % size for i in range(len(descs))]
        await drv._write_lines([(drv.ring_base + DESC_BYTES * s, d) for s, d in zip(slots, descs)])
        tail = self._model_ring(descs)
        assert tail == (drv.tail + len(descs)) % size
        assert self.model.doorbell(tail) == E.OK
        await drv.doorbell(tail, read_back=False)       # accepted: the model says so
        return tail

    async def finish(self, what="") -> list:
        """Wait for the RTL to complete everything rung, run the model, compare completions."""
        drv = self.drv
        n = self.model.pending
        first = self.model.head
        want = self.model.process()
        await drv.wait_head(drv.tail)
        slots = [(first + i) % drv.ring_size for i in range(n)]
        got = await drv.completions(slots)
        self.compare_cpls(want, got, what)
        return got

    async def doorbell_err(self, v: int, code: E, value: int, what=""):
        """Ring CMD_TAIL = ``v`` expecting the model (and the RTL) to refuse it."""
        assert self.model.doorbell(v) == code, self.where(f"{what}: model disagrees with test")
        assert self.model.err_value == value, self.where(f"{what}: model value "
                                                         f"{self.model.err_value:#x}")
        await self.drv.write("CMD_TAIL", v)

    # ------------------------------------------------------------------ CSR misuse
    async def csr_bad_write(self, addr: int, code: E, value: int = 0x5A5A_5A5A):
        """Write to a read-only or unmapped CSR: SLVERR on the RTL, error in the model."""
        await self.drv.csr.expect_error_write(addr, value)
        self.model._error(code, addr)

    async def csr_bad_read(self, addr: int):
        data = await self.drv.csr.expect_error_read(addr)
        assert data == 0, self.where(f"unmapped read {addr:#x} returned {data:#x}")
        self.model._error(E.CSR_ADDR, addr)

    async def irq_clear(self, *names):
        await self.drv.write("IRQ_STATUS", sum(IRQ_BITS[n] for n in names))
        self.model.irq_status -= set(names)

    async def err_clear(self):
        await self.drv.write("ERR_CLEAR", 1)
        self.model.err_clear()

    # ------------------------------------------------------------------ state comparison
    def rtl_image(self) -> MemoryImage:
        """The RTL's memory with the ``cycles`` field of every completion slot zeroed."""
        img = self.mem.copy()
        zero = bytes(_CYCLES_W)
        for base, size in self.cpl_areas:
            for i in range(size):
                a = base + CPL_BYTES * i + _CYCLES_OFF
                if (a - a % 64) in img._lines:
                    img.write(a, zero)
        return img

    async def check(self, what="", mask=()):
        """Whole memory image and the CSRs equal to the model (see the module docstring).
        ``mask``: ``[(addr, nbytes)]`` left out of the memory comparison."""
        await ClockCycles(self.dut.clk, 4)
        m = self.model
        img = self.rtl_image()
        for a, n in mask:
            img.write(a, m.mem.read(a, n))
        diff = img.diff(m.mem, limit=3)
        if diff:
            raise AssertionError(self.where(f"{what}: memory differs (RTL = self, model = other)"
                                            ":\n" + "\n".join(d for _, d in diff)
                                            + self.explain(diff[0][0])))
        drv = self.drv
        got = {
            "ERR_CODE": await drv.read("ERR_CODE"),
            "ERR_VALUE": await drv.read64("ERR_VALUE"),
            "ERR_COUNT": await drv.read("ERR_COUNT"),
            "STATUS.ERROR": int(bool(await drv.read("STATUS") & STATUS_ERROR)),
            "STATUS.READY": int(bool(await drv.read("STATUS") & STATUS_READY)),
            "IRQ_STATUS": await drv.read("IRQ_STATUS"),
            "COMMITTED": await drv.read64("COMMITTED"),
            "CMD_HEAD": await drv.read("CMD_HEAD"),
            "CPL_HEAD": await drv.read("CPL_HEAD"),
            "CMD_TAIL": await drv.read("CMD_TAIL"),
        }
        want = {
            "ERR_CODE": int(m.err_code), "ERR_VALUE": m.err_value, "ERR_COUNT": m.err_count,
            "STATUS.ERROR": int(m.status_error), "STATUS.READY": int(m.ready),
            "IRQ_STATUS": sum(IRQ_BITS[n] for n in m.irq_status),
            "COMMITTED": m.committed, "CMD_HEAD": m.head, "CPL_HEAD": m.head,
            "CMD_TAIL": m.tail,
        }
        if m.ready:
            got["LOG_SLOT"] = await drv.read("LOG_SLOT")
            want["LOG_SLOT"] = m.next_slot
            got["MLP_SLOT"] = await drv.read("MLP_SLOT")
            got["MLP_EPOCH"] = await drv.read64("MLP_EPOCH")
            want["MLP_SLOT"], want["MLP_EPOCH"] = m.mlp_slot, m.mlp_epoch
        if self.check_recovered:
            got["RECOVERED_RECORDS"] = await drv.read("RECOVERED_RECORDS")
            want["RECOVERED_RECORDS"] = m.recovered_records
        bad = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        if bad:
            names = {}
            for k in ("ERR_CODE",):
                if k in bad:
                    names = {"model": E(want[k]).name,
                             "rtl": E(got[k]).name if got[k] in E._value2member_map_ else got[k]}
            raise AssertionError(self.where(f"{what}: CSRs differ (model, RTL): {bad} {names}"))

    def explain(self, addr: int) -> str:
        """Decode the undo-log slot or table row holding ``addr`` on both sides (messages)."""
        cfg = self.cfg
        if cfg.log_base <= addr < cfg.log_base + cfg.log_size:
            s = (addr - cfg.log_base) // LOG_SLOT_BYTES
            a = cfg.log_base + s * LOG_SLOT_BYTES
            hr = unpack_fields(LOG_HDR_FIELDS, self.mem.read(a, 64))
            hm = unpack_fields(LOG_HDR_FIELDS, self.model.mem.read(a, 64))
            out = f"\nlog slot {s}: RTL header {hr}\n           model header {hm}"
            for who, h, mem in (("RTL", hr, self.mem), ("model", hm, self.model.mem)):
                if h["dim"] in (16, 32, 64, 128):
                    rec = np.frombuffer(mem.read(a + 64, h["dim"] * 4), "<i4")
                    cur = np.frombuffer(mem.read(h["addr"], h["dim"] * 4), "<i4")
                    out += f"\n{who} record data[:4] {rec[:4].tolist()}, row now {cur[:4].tolist()}"
            return out
        for tid, (base, rows, dim) in self.tables.items():
            if base <= addr < base + rows * dim * 4:
                r = (addr - base) // (dim * 4)
                ra = base + r * dim * 4
                g = np.frombuffer(self.mem.read(ra, dim * 4), "<i4")[:4].tolist()
                w = np.frombuffer(self.model.mem.read(ra, dim * 4), "<i4")[:4].tolist()
                return f"\ntable {tid} row {r}: RTL {g}..., model {w}..."
        return ""

    def table_bytes_at(self, specs, tid) -> bytes:
        """Bytes of table ``tid`` of ``specs`` ([(tid, rows, dim, ...)]) at its first base,
        also when the directory was reset."""
        rows, dim = next((r, d) for t, r, d, *_ in specs if t == tid)
        return self.mem.read(self.bases[tid], rows * dim * 4)

    def table_bytes(self, tid) -> bytes:
        base, rows, dim = self.tables[tid]
        return self.mem.read(base, rows * dim * 4)


def lookup(table, n_bags, oaddr, iaddr, out, *, log=True, batch=0, tag=0) -> bytes:
    return TrainingDevice.make_desc(kind=K.LOOKUP, flags=FLAG_LOG if log else 0, table=table,
                                    tag=tag, batch=batch, n_bags=n_bags, offsets_addr=oaddr,
                                    indices_addr=iaddr, data_addr=out)


def update(table, n_bags, oaddr, iaddr, grads, *, batch=0, tag=0, lr=None, nolog=False) -> bytes:
    flags = (FLAG_NOLOG if nolog else 0) | (FLAG_DESC_LR if lr is not None else 0)
    return TrainingDevice.make_desc(kind=K.UPDATE, flags=flags, table=table, tag=tag,
                                    batch=batch, n_bags=n_bags, lr=lr or 0, offsets_addr=oaddr,
                                    indices_addr=iaddr, data_addr=grads)


def commit(batch, tag=0) -> bytes:
    return TrainingDevice.make_desc(kind=K.COMMIT, tag=tag, batch=batch)


# ---- workload helpers shared by the device-top tests ---------------------------------------------

def bags(tb, n_bags, max_len, rows, hot=None):
    """Random bags: lengths 0..max_len, indices from a small hot set (repeats) or all rows."""
    rng = tb.rng
    lens = rng.integers(0, max_len + 1, n_bags)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
    pool = rng.choice(rows, size=min(rows, hot), replace=False) if hot else np.arange(rows)
    indices = rng.choice(pool, size=int(offsets[-1])).astype(np.uint32)
    return offsets, indices


def training_batch(tb, batch, tag, n_bags):
    """One training batch over every table of ``tb``: LOOKUP+LOG, UPDATE (table 1 with bags of
    its own, so rows the LOOKUP did not log are logged by the UPDATE), COMMIT. Each bag holds
    0..``n_bags`` rows drawn uniformly from the table; LOOKUP tags from ``tag``, UPDATE tags
    10 higher, the COMMIT's 20 above the last."""
    rng = tb.rng

    def uniform_bags(rows):
        lens = rng.integers(0, n_bags + 1, n_bags)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint32)
        return offsets, rng.integers(0, rows, int(offsets[-1])).astype(np.uint32)

    looks, upds = [], []
    for tid in sorted(tb.tables):
        _, rows, dim = tb.tables[tid]
        o, i = uniform_bags(rows)
        oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        looks.append(lookup(tid, n_bags, oa, ia, tb.out_area(n_bags * dim * 4), batch=batch,
                            tag=tag))
        if tid == 1:
            o, i = uniform_bags(rows)
            oa, ia = tb.stage_u32(o), tb.stage_u32(i)
        g = (rng.standard_normal((n_bags, dim)) * (1 << tb.cfg.frac_bits)).astype(np.int32)
        upds.append(update(tid, n_bags, oa, ia, tb.stage_i32(g), batch=batch, tag=tag + 10))
        tag += 1
    return looks + upds + [commit(batch, tag=tag + 20)]


def lr_q(tb, x):
    return int(round(x * (1 << tb.cfg.frac_bits)))


async def setup_tables(tb, specs, **kw):
    """``specs``: [(tid, rows, dim, extreme)]: allocate, fill and program them."""
    for tid, rows, dim, extreme in specs:
        base = tb.new_table(rows, dim, extreme=extreme, **kw)
        await tb.set_table(tid, base, rows, dim)
