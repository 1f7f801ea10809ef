"""cocotb benches of ``trainingcxl fuzz``: the device's three input surfaces against the RTL.

* ``fuzz_device`` (full device top, ``FuzzParams.surface`` ``desc`` or ``csr``): the bench of
  :mod:`cosim.tb.device` keeps the RTL and the golden model (``sw_model.training``) in step, so
  the oracle is the model: every completion's status, error value and bag equal the model's
  (documented errors, docs/training.md section 6), the whole memory image (tables, undo log,
  superblock, staging) and the error/ring/IRQ CSRs equal the model's after every round, a good
  LOOKUP+LOG / UPDATE / COMMIT batch after each round matches the model (the device is still
  usable), and a reset + RECOVER at the end restores the model's committed state.
* ``fuzz_cxl`` (DCOH test top): random legal host traffic (the stress bench) with raw
  CXL.mem headers mixed in (any opcode/SnpType/MetaField/MetaValue, out-of-range and refused
  regions) and, between traffic phases, BIRsps that answer no BISnp; the expected answer of
  every raw header comes from ``sw_model.coherence`` (the host model's reference) and every
  expected error pulse must be seen (the coherence scoreboard).

A watchdog (``cocotb.triggers.with_timeout`` in simulated time) bounds every round; a timeout is
counted as a hang and ends the run. The first failure ends the run (lock-step with the model is
lost after it) and is recorded with the seed and the input's index; the result goes to
``FuzzParams.out`` (JSON).
"""
from __future__ import annotations

import json
import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, SimTimeoutError, with_timeout

from cosim import params
from cosim.tb.config import BenchConfig
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, DESC_FIELDS, DescKind,
                          DeviceError, unpack_fields)
from trainingcxl.fuzz.inputs import (bound_work, csr_op, lookup_overlaps_inputs, mutate_desc,
                                    reads_range)

__all__ = ["FuzzParams", "fuzz_device", "fuzz_cxl"]

E = DeviceError
K = DescKind


@dataclass(frozen=True)
class FuzzParams:
    """``surface``: desc, csr or cxl; ``count``: inputs (descriptors, CSR sequences, raw CXL.mem
    messages); ``seed``; ``out``: result JSON; ``round``: inputs per round (descriptors per
    doorbell, CSR operations per sequence); ``watchdog_us``: simulated time allowed per round;
    ``bench``: ``BenchConfig`` (device configuration)."""
    surface: str
    out: str
    count: int = 100
    seed: int = 1
    round: int = 8
    watchdog_us: int = 2000
    bench: BenchConfig = BenchConfig()
    # tests of the oracle itself: "corrupt" changes one table row in the RTL's memory only
    # (desc/csr: must be reported as a corruption); "missing_error" makes the scoreboard wait
    # for an error pulse that no input causes (cxl: must be reported as an unreported error)
    sabotage: str = ""
    # cProfile statistics of the device fuzz loop written beside ``out`` (profile.pstats)
    profile: bool = False


class FuzzFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


def _result(p, counts, t0, cycles0, cycle, failure=None, **extra):
    wall = time.monotonic() - t0
    return {"surface": p.surface, "seed": p.seed, "count": p.count, **counts,
            "failure": failure, "wall_s": round(wall, 2),
            "inputs_per_s": round(counts["inputs"] / wall, 2) if wall else None,
            "sim_cycles": cycle - cycles0, **extra}


# ================================================================== device: descriptors and CSRs

class _DeviceFuzz:
    """Setup, templates, rounds and the good batch, over a ``DeviceTB``."""

    SPECS = [(0, 64, 16), (1, 40, 32), (2, 16, 128)]

    def __init__(self, tb, rng: random.Random, p: FuzzParams):
        self.tb, self.rng, self.p = tb, rng, p
        self.counts = Counter()
        self.status_hist = Counter()
        self.what_hist = Counter()
        self.last_ops = []
        # the inputs since the last check, written beside the result when a block fails
        self.last_inputs = []
        # ``cycles`` fields of completions written to rings the fuzz configured (the RTL writes
        # a count, the model 0): left out of the memory comparison, and only those
        self.mask = []

    async def setup(self):
        from cosim.tb.device import lr_q, setup_tables
        tb = self.tb
        await tb.power_on()
        await tb.recover()
        await setup_tables(tb, [(t, r, d, 0.05) for t, r, d in self.SPECS])
        self.good_tables = {t: tb.tables[t] for t, _, _ in self.SPECS}
        # a few bad directory entries for the fuzzed descriptors to meet
        t0 = self.good_tables[0][0]
        for tid, base, rows, dim in [(3, t0, 8, 48), (4, t0, 8, 1 << 16), (5, t0 + 4, 8, 16),
                                     (6, 1 << tb.cfg.addr_bits, 4, 16)]:
            await tb.set_table(tid, base, rows, dim)
        await tb.set_lr(lr_q(tb, 0.05))
        self.ring = (tb.salloc.alloc(64 * 64), 64, tb.salloc.alloc(64 * 64))
        # completion rings doorbells ran on: inputs read from them have no model answer
        self.cpl_rings = {(self.ring[2], self.ring[1])}
        await tb.configure_ring(64, cmd_base=self.ring[0], cpl_base=self.ring[2])
        self._mask_ring()
        self.snap_src = tb.stage(bytes(self.rng.getrandbits(8) for _ in range(256)))
        await tb.check("fuzz setup")

    def _bags(self, tid, n):
        from cosim.tb.device import bags
        _, rows, _ = self.good_tables[tid]
        o, i = bags(self.tb, n, 4, rows, hot=max(2, rows // 3))
        return self.tb.stage_u32(o), self.tb.stage_u32(i)

    def templates(self):
        """Valid descriptors of every kind for the open batch, on fresh staged data; returns
        (templates, addresses worth mutating towards)."""
        tb = self.tb
        m = tb.model
        batch = m.committed + 1
        out = []
        near = [tb.cfg.staging_base, tb.cfg.staging_base + tb.cfg.staging_size,
                tb.cfg.table_base + tb.cfg.table_size, 1 << tb.cfg.addr_bits, batch,
                self.snap_src]
        for tid, (base, rows, dim) in self.good_tables.items():
            n = self.rng.randint(1, 4)
            oa, ia = self._bags(tid, n)
            look = tb.desc(kind=K.LOOKUP, flags=self.rng.choice((0, 1)), table=tid,
                           tag=self.rng.getrandbits(32), batch=batch, n_bags=n,
                           offsets_addr=oa, indices_addr=ia, data_addr=tb.out_area(n * dim * 4))
            g = (tb.rng.standard_normal((n, dim)) * (1 << tb.cfg.frac_bits)).astype(np.int32)
            ga = tb.stage_i32(g)
            upd = tb.desc(kind=K.UPDATE, flags=self.rng.choice((0, 2)), table=tid,
                          tag=self.rng.getrandbits(32), batch=batch, n_bags=n,
                          lr=self.rng.getrandbits(12), offsets_addr=oa, indices_addr=ia,
                          data_addr=ga)
            out += [look, upd]
            near += [oa, ia, ga, base]
        out.append(tb.desc(kind=K.COMMIT, tag=self.rng.getrandbits(32), batch=batch))
        out.append(tb.desc(kind=K.SNAPSHOT, tag=self.rng.getrandbits(32), batch=batch,
                           data_addr=self.snap_src, length=self.rng.choice((0, 64, 100, 256))))
        return out, near

    def fuzzed(self, n):
        temps, near = self.templates()
        descs, whats = [], []
        for _ in range(n):
            t = self.rng.choice(temps)
            if self.rng.random() < 0.15:
                d, what = t, "template"
            else:
                d, what = mutate_desc(self.rng, t, near=near)
            d = bound_work(d, self.tb.model)
            if lookup_overlaps_inputs(d, self.tb.model):
                # docs/lookup.md: an output overlapping the same command's offsets or indices
                # is undefined (hosts must not); the golden model even raises on it (desc,
                # seed 21, input 6208): not an input with an expected answer
                d, what = t, "template (mutation overlapped output and inputs)"
                self.counts["undefined_skipped"] += 1
            elif self.reads_completions(d):
                # docs/training.md section 3: the completions' ``cycles`` fields are the RTL's
                # alone; a descriptor reading them as input has no model answer (desc, seed
                # 110, input 9952: gradients read from completion slot 0)
                d, what = t, "template (mutation read completion records)"
                self.counts["undefined_skipped"] += 1
            descs.append(d)
            whats.append(what)
        return descs, whats

    def reads_completions(self, desc: bytes) -> bool:
        """``desc`` may read a completion record of any ring a doorbell ran on (their
        ``cycles`` fields are the RTL's alone)."""
        m = self.tb.model
        return any(reads_range(desc, m, (b, b + CPL_BYTES * n)) for b, n in self.cpl_rings)

    # -------------------------------------------------------------- descriptor round
    async def desc_round(self, index):
        tb = self.tb
        descs, whats = self.fuzzed(self.p.round)
        m = tb.model
        self.last_inputs += [_input_record(d, input=index + k, what=w)
                             for k, (d, w) in enumerate(zip(descs, whats))]
        # docs/training.md section 9: the host must not change a snapshot's source until it is
        # done, and the copy runs after the SNAPSHOT's completion; later descriptors (LOOKUP
        # outputs, completion records) may write into the source, so the round is split after
        # each SNAPSHOT and the host waits for STATUS.SNAP_BUSY = 0, as a driver must
        want, read, got, group = [], [], [], []
        for k, d in enumerate(descs):
            group.append(d)
            if d[0] == K.SNAPSHOT or k == len(descs) - 1:
                slots = [m.cpl_base + CPL_BYTES * ((tb.drv.tail + i) % m.cmd_size)
                         for i in range(len(group))]
                tail = tb._model_ring(group)
                assert m.doorbell(tail) == E.OK
                done = m.process()
                want += done
                read += self._as_read(done, slots)
                got += await tb.drv.submit(group)
                if d[0] == K.SNAPSHOT:
                    await tb.drv.wait_snapshot_idle()
                group = []
        for k, (w, r, g, what) in enumerate(zip(want, read, got, whats)):
            ws, gs = int(w["status"]), int(g["status"])
            self.counts["inputs"] += 1
            self.status_hist[E(ws).name] += 1
            if ws != E.OK:
                self.counts["bad_inputs"] += 1
            bad = {f: (int(r[f]), int(g[f])) for f, _, _ in CPL_FIELDS
                   if f != "cycles" and int(r[f]) != int(g[f])}
            if not bad:
                continue
            kind = ("unreported_errors" if ws != E.OK and gs == E.OK else
                    "wrong_errors" if ws != E.OK else
                    "spurious_errors" if gs != E.OK else "wrong_completions")
            self.counts[kind] += 1
            raise FuzzFailure(kind, f"input {index + k} ({what}): descriptor "
                              f"{unpack_fields(DESC_FIELDS, descs[k])}, model status "
                              f"{E(ws).name}, fields (model, RTL) {bad}")

    def _as_read(self, cpls, slots):
        """The model's completions as the host reads them once the doorbell is done: a slot a
        later descriptor's output overwrote holds that output (docs/training.md section 3),
        taken from the model's memory."""
        m = self.tb.model
        out = []
        for c, a in zip(cpls, slots):
            mine = unpack_fields(CPL_FIELDS, m.mem.read(a, CPL_BYTES))
            if any(int(mine[f]) != int(c[f]) for f, _, _ in CPL_FIELDS if f != "cycles"):
                self.counts["completions_overwritten"] += 1
                c = mine
            out.append(c)
        return out

    # -------------------------------------------------------------- ring pointers
    async def ring_pointer(self):
        """CMD_TAIL written with any value: the model decides (refused with its error, or
        accepted: whatever the slots hold runs, and the completions are compared)."""
        tb = self.tb
        m = tb.model
        v = self.rng.choice((self.rng.randrange(m.cmd_size or 1), self.rng.getrandbits(32),
                             m.cmd_size, m.tail, (m.tail - 1) % max(m.cmd_size, 1)))
        await self._doorbell(v, 0xF)

    async def _doorbell(self, v, strb):
        tb = self.tb
        m, drv = tb.model, tb.drv
        v = _merge(m.tail, v, strb)
        # the slots a doorbell would run: keep their work bounded (host writes, both sides)
        if m.ready and m._ring_config_error() is None and v < m.cmd_size:
            self.cpl_rings.add((m.cpl_base, m.cmd_size))
            n = (v - m.tail) % m.cmd_size
            for i in range(n):
                a = m.cmd_base + DESC_BYTES * ((m.tail + i) % m.cmd_size)
                d = m.mem.read(a, DESC_BYTES)
                b = bound_work(d, m)
                if b[0] == K.SNAPSHOT and i != n - 1:
                    # the host waits for a snapshot before anything may touch its source
                    # (desc_round): a SNAPSHOT only as the last slot of a doorbell
                    b = bytes([0xFF]) + b[1:]
                if self.reads_completions(b) or lookup_overlaps_inputs(b, m):
                    b = bytes([0xFF]) + b[1:]      # no model answer (desc_round): refused
                    self.counts["undefined_skipped"] += 1
                if b != d:
                    tb.poke(a, b)
                self.last_inputs.append(_input_record(b, input="ring pointer",
                                                      slot=(m.tail + i) % m.cmd_size))
        first = m.head
        code = m.doorbell(v)
        self.counts["ring_pointers"] += 1
        await drv.csr.raw_write(tb.map.offset("CMD_TAIL"), v, strb)
        if code != E.OK:
            self.counts["ring_pointer_errors"] += 1
            return
        drv.tail = v
        n = m.pending
        slots = [m.cpl_base + CPL_BYTES * ((first + i) % m.cmd_size) for i in range(n)]
        want = self._as_read(m.process(), slots)
        await drv.wait_head(v)
        recs = await drv.read_lines(slots)
        got = [unpack_fields(CPL_FIELDS, r) for r in recs]
        off = next(o for f, o, _ in CPL_FIELDS if f == "cycles")
        self.mask += [(a + off, 4) for a in slots]
        try:
            tb.compare_cpls(want, got, "doorbell")
        except AssertionError as e:
            raise FuzzFailure("wrong_completions", str(e)) from None

    # -------------------------------------------------------------- CSR sequence
    async def csr_sequence(self, index):
        tb = self.tb
        m = tb.model
        near = [tb.cfg.staging_base & 0xFFFF_FFFF, tb.cfg.staging_base >> 32, m.cmd_size,
                m.tail, 16, 32, 64, 128]
        for k in range(self.p.round):
            op = csr_op(self.rng, tb.map, near=near)
            self.counts["csr_ops"] += 1
            self.last_ops.append(op)
            await self.csr_apply(op, f"sequence {index} op {k}")
            # every operation's error accounting at once: ERR_COUNT and ERR_CODE
            got = (await tb.drv.read("ERR_COUNT"), await tb.drv.read("ERR_CODE"))
            if got != (m.err_count, int(m.err_code)):
                self.counts["csr_mismatches"] += 1
                raise FuzzFailure("csr_mismatches", f"sequence {index} op {k} "
                                  f"{_fmt_op(op, tb.map)}: (ERR_COUNT, ERR_CODE) RTL {got}, "
                                  f"model {(m.err_count, int(m.err_code))}; previous ops "
                                  f"{[_fmt_op(o, tb.map) for o in self.last_ops[-6:-1]]}")
        self.counts["inputs"] += 1

    async def csr_apply(self, op, where):
        tb = self.tb
        m, drv, mp = tb.model, tb.drv, tb.map
        from cosim.csr import SLVERR
        addr = op[1] & ~3
        name = mp.name_at(addr)
        if op[0] == "r":
            # an unaligned 4-byte read would be split by the AXI4-Lite master into two
            # transfers; the bus sees word addresses only
            data, resp = await drv.csr.raw_read(addr)
            if name is None:
                self.counts["bad_inputs"] += 1
                m._error(E.CSR_ADDR, addr)
                if resp != SLVERR or data != 0:
                    raise FuzzFailure("unreported_errors", f"{where}: read of unmapped "
                                      f"{addr:#x}: resp {resp} data {data:#x}")
            elif resp != 0:
                raise FuzzFailure("spurious_errors", f"{where}: read of {name}: resp {resp}")
            return
        _, a, value, strb = op
        writable = name is not None and mp.writable(name)
        if not writable:
            strb = 0xF           # error value = the byte address; keep the bus address aligned
            self.counts["bad_inputs"] += 1
            m._error(E.CSR_ADDR if name is None else E.CSR_RO, addr)
            resp = await drv.csr.raw_write(addr, value, strb)
            if resp != SLVERR:
                raise FuzzFailure("unreported_errors", f"{where}: write {value:#x} to "
                                  f"{name or hex(addr)}: resp {resp}, not SLVERR")
            return
        if name == "CMD_TAIL":
            await self._doorbell(value, strb)
            return
        if name == "CONTROL":
            if strb & 1 and value & 1:
                await self._recover(addr, value, strb, where)
            else:
                await self._write_ok(addr, value, strb, name, where)
            return
        await self._write_ok(addr, value, strb, name, where)
        if name == "ERR_CLEAR" and strb & 1 and value & 1:
            m.err_clear()
        elif name == "IRQ_STATUS" and strb & 1:
            for bit, n in ((1, "CPL"), (2, "ERR"), (4, "RECOVERED")):
                if value & bit:
                    m.irq_status.discard(n)
        elif name == "LR":
            m.lr = _merge(m.lr, value, strb)
        elif name == "MLP_LAG":
            m.mlp_lag = _merge(m.mlp_lag, value, strb)
        elif name in ("CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO", "CPL_BASE_HI"):
            cmd, size, cpl = m.cmd_base, m.cmd_size, m.cpl_base
            if name == "CMD_BASE_LO":
                cmd = (cmd & ~0xFFFF_FFFF) | _merge(cmd & 0xFFFF_FFFF, value, strb)
            elif name == "CMD_BASE_HI":
                cmd = (cmd & 0xFFFF_FFFF) | (_merge(cmd >> 32, value, strb) << 32)
            elif name == "CMD_SIZE":
                size = _merge(size, value, strb)
            elif name == "CPL_BASE_LO":
                cpl = (cpl & ~0xFFFF_FFFF) | _merge(cpl & 0xFFFF_FFFF, value, strb)
            else:
                cpl = (cpl & 0xFFFF_FFFF) | (_merge(cpl >> 32, value, strb) << 32)
            assert m.configure_ring(cmd, size, cpl) == E.OK        # idle between rounds
            drv.set_ring(cmd, size, cpl)
        elif name.startswith("TABLE"):
            t = int(name[5])
            base, rows, dim = m.tables[t]
            part = name.split("_", 1)[1]
            if part == "BASE_LO":
                base = (base & ~0xFFFF_FFFF) | _merge(base & 0xFFFF_FFFF, value, strb)
            elif part == "BASE_HI":
                base = (base & 0xFFFF_FFFF) | (_merge(base >> 32, value, strb) << 32)
            elif part == "ROWS":
                rows = _merge(rows, value, strb)
            else:
                dim = _merge(dim, value, strb)
            m.set_table(t, base, rows, dim)
            tb.tables[t] = (base, rows, dim)

    async def _write_ok(self, addr, value, strb, name, where):
        resp = await self.tb.drv.csr.raw_write(addr, value, strb)
        if resp != 0:
            raise FuzzFailure("spurious_errors", f"{where}: write {value:#x} strb {strb:#x} to "
                              f"{name}: resp {resp}")

    async def _recover(self, addr, value, strb, where):
        """CONTROL.RECOVER with whatever else the value holds: poll until READY (as the
        driver does), then the model's recovery."""
        tb = self.tb
        drv = tb.drv
        await self._write_ok(addr, value, strb, "CONTROL", where)
        for _ in range(20000):
            st = await drv.read("STATUS")
            if st & drv.STATUS_READY and not st & drv.STATUS_RECOVERING:
                break
            await ClockCycles(tb.dut.clk, 16)
        else:
            raise FuzzFailure("hangs", f"{where}: recovery never ended")
        tb.model.recover()
        tb.check_recovered = True
        self.counts["recoveries"] += 1

    # -------------------------------------------------------------- restore and usability
    async def restore(self):
        """The good directory, LR and ring again (host writes, both sides)."""
        from cosim.tb.device import lr_q
        tb = self.tb
        for t, (base, rows, dim) in self.good_tables.items():
            await tb.set_table(t, base, rows, dim)
        await tb.set_lr(lr_q(tb, 0.05))
        await tb.drv.write("MLP_LAG", 0xFFFF_FFFF)
        tb.model.mlp_lag = 0xFFFF_FFFF
        await tb.configure_ring(64, cmd_base=self.ring[0], cpl_base=self.ring[2])
        self._mask_ring()

    def _mask_ring(self):
        """The good ring's completion ``cycles`` fields are left out of the comparison on both
        sides (``self.mask``) instead of zeroed on the RTL side only (``DeviceTB.cpl_areas``):
        a fuzzed LOOKUP may write its output over completion slots, and those bytes are then
        equal on both sides (desc, seed 11, input 6368)."""
        self.tb.cpl_areas = []
        off = next(o for f, o, _ in CPL_FIELDS if f == "cycles")
        base, size = self.ring[2], self.ring[1]
        want = [(base + CPL_BYTES * i + off, 4) for i in range(size)]
        if want[0] not in self.mask:
            self.mask += want

    async def good_batch(self, what):
        """LOOKUP+LOG, UPDATE, COMMIT of the open batch on the good tables: every completion
        OK and equal to the model's, memory and CSRs equal."""
        tb = self.tb
        m = tb.model
        if not m.ready:
            await tb.recover()
        batch = m.committed + 1
        descs = []
        for tid, (base, rows, dim) in self.good_tables.items():
            n = self.rng.randint(1, 3)
            oa, ia = self._bags(tid, n)
            descs.append(tb.desc(kind=K.LOOKUP, flags=1, table=tid, tag=7, batch=batch,
                                 n_bags=n, offsets_addr=oa, indices_addr=ia,
                                 data_addr=tb.out_area(n * dim * 4)))
            g = (tb.rng.standard_normal((n, dim)) * (1 << tb.cfg.frac_bits)).astype(np.int32)
            descs.append(tb.desc(kind=K.UPDATE, table=tid, tag=8, batch=batch, n_bags=n,
                                 offsets_addr=oa, indices_addr=ia, data_addr=tb.stage_i32(g)))
        descs.append(tb.desc(kind=K.COMMIT, tag=9, batch=batch))
        tail = tb._model_ring(descs)
        assert m.doorbell(tail) == E.OK
        want = m.process()
        if any(int(w["status"]) != E.OK for w in want):
            raise AssertionError(f"the fuzz's good batch is not good in the model: {want}")
        got = await tb.drv.submit(descs)
        try:
            tb.compare_cpls(want, got, what)
        except AssertionError as e:
            self.counts["unusable_after"] += 1
            raise FuzzFailure("unusable_after", str(e)) from None
        await self.check(what)
        self.counts["good_batches"] += 1

    async def check(self, what):
        # a SNAPSHOT completes before its background copy (docs/training.md section 9); the
        # model copies at once: compare once STATUS.SNAP_BUSY = 0
        await self.tb.drv.wait_snapshot_idle()
        try:
            await self.tb.check(what, mask=self.mask)
        except AssertionError as e:
            kind = "corruptions" if "memory differs" in str(e) else "csr_mismatches"
            self.counts[kind] += 1
            raise FuzzFailure(kind, str(e)) from None


def _input_record(desc: bytes, **where) -> dict:
    """A descriptor as ``failure_inputs.json`` lists it: ``where`` it ran, then its fields."""
    return {**where, "descriptor": {f: int(v) for f, v in unpack_fields(DESC_FIELDS, desc).items()}}


def _names(c: Counter) -> dict:
    from hw.cxl_encodings import DcohError
    return {(DcohError(k).name if k in DcohError._value2member_map_ else str(k)): n
            for k, n in sorted(c.items())}


def _fmt_op(op, mp) -> str:
    name = mp.name_at(op[1]) or "unmapped"
    if op[0] == "r":
        return f"read {op[1]:#x} ({name})"
    return f"write {op[2]:#x} strb {op[3]:#x} to {op[1]:#x} ({name})"


def _cycle() -> int:
    from cocotb.utils import get_sim_time
    return int(get_sim_time("ns")) // 10          # the benches' 10 ns clock


def _merge(old: int, value: int, strb: int) -> int:
    """A 32-bit register after a write of ``value`` with byte enables ``strb``."""
    out = old & 0xFFFF_FFFF
    for b in range(4):
        if strb >> b & 1:
            mask = 0xFF << (8 * b)
            out = (out & ~mask) | (value & mask)
    return out


async def _watch(coro, p, what):
    try:
        return await with_timeout(coro, p.watchdog_us, "us")
    except SimTimeoutError:
        raise FuzzFailure("hangs", f"{what}: no answer within {p.watchdog_us} us of simulated "
                          "time") from None


@cocotb.test()
async def fuzz_device(dut):
    """Descriptor or CSR fuzz of the full device against the golden model (module docstring)."""
    from cosim.tb.device import DeviceTB
    p = params.load(FuzzParams)
    if p.surface not in ("desc", "csr"):
        return
    random.seed(p.seed)                      # DeviceTB draws its seed from cocotb's random
    # media stalls need the Python PMEM model (the C++ one has none)
    stall = 0.02 if p.bench.pmem == "python" else 0.0
    tb = DeviceTB(dut, latency=12, stall=stall, name=f"fuzz-{p.surface}")
    rng = random.Random(p.seed)
    fz = _DeviceFuzz(tb, rng, p)
    print(f"fuzz {p.surface}: seed={p.seed} count={p.count} round={p.round}", flush=True)
    t0 = time.monotonic()
    c0 = _cycle()
    failure = None
    i = 0
    prof = None
    if p.profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    try:
        await _watch(fz.setup(), p, "setup")
        corrupt = p.sabotage == "corrupt"
        while fz.counts["inputs"] < p.count:
            if p.surface == "desc":
                if rng.random() < 0.2:
                    await _watch(fz.ring_pointer(), p, f"ring pointer after input {i}")
                await _watch(fz.desc_round(i), p, f"descriptors {i}..{i + p.round - 1}")
            else:
                await _watch(fz.csr_sequence(i), p, f"CSR sequence {i}")
            if corrupt:
                # behind the model's back, after the first round and before its check (earlier,
                # a descriptor of the round could read the row and fail as a wrong completion)
                base, _, _ = fz.good_tables[1]
                tb.mem.write(base + 4 * 32 * 3, bytes(range(64)))
                corrupt = False
            await _watch(fz.check(f"after inputs up to {fz.counts['inputs']}"), p, "check")
            await _watch(fz.restore(), p, "restore")
            await _watch(fz.good_batch(f"good batch after input {fz.counts['inputs']}"), p,
                         "good batch")
            i = fz.counts["inputs"]
            fz.last_inputs = []
        # committed state survives a power cycle: reset + RECOVER equals the model's
        await _watch(tb.drv.wait_snapshot_idle(), p, "snapshot idle")
        await _watch(tb.power_on(), p, "power cycle")
        await _watch(tb.recover(), p, "recovery")
        await _watch(fz.check("after the final power cycle and recovery"), p, "final check")
    except FuzzFailure as f:
        failure = {"kind": f.kind, "detail": f.detail[:4000], "input": fz.counts["inputs"]}
        fz.counts[f.kind] += 0
    except Exception as e:       # the bench itself broke: reported, never counted as a pass
        failure = {"kind": "bench_error", "detail": traceback.format_exc()[-4000:],
                   "input": fz.counts["inputs"]}
        print(f"fuzz: bench error {e!r}", flush=True)
    if prof is not None:
        prof.disable()
        prof.dump_stats(Path(p.out).with_name("profile.pstats"))
    if failure and failure["kind"] == "hangs":
        fz.counts["hangs"] += 1
    if failure and fz.last_inputs:
        # the descriptors since the last passing check, to read the failure from
        failure["inputs_file"] = str(Path(p.out).with_name("failure_inputs.json"))
        Path(failure["inputs_file"]).write_text(json.dumps(fz.last_inputs, indent=1))
    res = _result(p, _counts(fz.counts), t0, c0, _cycle(), failure,
                  status_histogram=dict(sorted(fz.status_hist.items())))
    Path(p.out).write_text(json.dumps(res, indent=1))


COUNT_KEYS = ("inputs", "bad_inputs", "hangs", "unreported_errors", "wrong_errors",
              "spurious_errors", "wrong_completions", "corruptions", "csr_mismatches",
              "unusable_after")


def _counts(c: Counter) -> dict:
    out = {k: int(c.get(k, 0)) for k in COUNT_KEYS}
    out.update({k: int(v) for k, v in c.items() if k not in out})
    return out


# ================================================================== CXL.mem

def _raw_header(rng: random.Random, cfg, lines):
    from cosim.cxl_host.protocol import MF, MV, RQ, RW
    """(channel, fields) of a raw Req/RwD header: every field random over its width, the line
    from ``lines`` or any line address of the field."""
    ch = "m2s_req" if rng.random() < 0.6 else "m2s_rwd"
    line = rng.choice(lines) if rng.random() < 0.8 else rng.getrandbits(cfg.addr_bits - 6 + 2)
    if rng.random() < 0.5:       # a defined opcode with any SnpType/MetaField/MetaValue
        op = int(rng.choice(list(RQ) if ch == "m2s_req" else list(RW)))
    else:
        op = rng.randrange(16)
    h = dict(opcode=op, snp_type=rng.choice((0, 1, 2, 3, rng.randrange(8))),
             meta_field=rng.choice((0, 3, rng.randrange(4))),
             meta_value=rng.choice((0, 2, 3, rng.randrange(4))), line=line)
    if ch == "m2s_rwd":
        # left out (the host model cannot predict them from the header alone): BIConflict (its
        # ack is matched to a conflict the host tracks) and MemWr/MemWrPtl keeping A/S (the
        # answer depends on the snoop filter, expected_rwd's ``sf``)
        if h["opcode"] == RW.BI_CONFLICT:
            h["opcode"] = RW.MEM_WR
        if h["opcode"] in (RW.MEM_WR, RW.MEM_WR_PTL) and h["meta_field"] == MF.META0_STATE \
                and h["meta_value"] in (MV.A, MV.S):
            h["meta_value"] = MV.I
    return ch, h


@cocotb.test()
async def fuzz_cxl(dut):
    """Random legal traffic plus raw CXL.mem headers and stray BIRsps on the DCOH test top."""
    from cosim.cxl_host.protocol import RQ
    from cosim.tb.dcoh import DcohTB
    p = params.load(FuzzParams)
    if p.surface != "cxl":
        return
    rng = random.Random(p.seed)
    tb = DcohTB(dut, seed=p.seed, host_stall=0.1, dev_stall=0.1, log_writes=False)
    await tb.reset()
    cfg = tb.cfg
    hot = [tb.line("table", i * 5) for i in range(12)] + [tb.line("staging", i) for i in range(4)]
    # raw headers never touch the lines the legal traffic and the device agent use
    fuzz_lines = [tb.line("table", 1000 + i) for i in range(8)] + \
        [tb.line("staging", 1000 + i) for i in range(4)] + \
        [tb.line("superblock"), tb.line("slots", 3), tb.line("log", 7), tb.line("log", 0)]
    for base in range(0, 1 << cfg.addr_bits, 1 << 30):
        if cfg.region_of(base) is None:
            fuzz_lines.append(base >> 6)
            break
    fuzz_lines.append(((1 << cfg.addr_bits) >> 6) - 1)
    counts = Counter()
    t0 = time.monotonic()
    c0 = tb.cycle
    phase = max(50, p.round * 25)
    raw_p = 0.1
    expected = Counter()           # expected DcohError of each raw header (sw_model.coherence)
    failure = None
    state = {"left": 0}

    def inject(cycle):
        if state["left"] <= 0 or rng.random() > raw_p:
            return
        ch, h = _raw_header(rng, cfg, fuzz_lines)
        # MemSpecRd (any other field, any address) has no response (docs/coherence.md)
        track = not (ch == "m2s_req" and h["opcode"] == RQ.MEM_SPEC_RD)
        txn = tb.core.raw(ch, track=track, delay=0, **h)
        state["left"] -= 1
        counts["inputs"] += 1
        err = int(txn.expect.error) if txn is not None and txn.expect is not None else 0
        if err:
            counts["bad_inputs"] += 1
        expected[err] += 1
        counts["raw_" + ch[4:]] += 1

    tb.chans.every_cycle.append(inject)
    if p.sabotage == "missing_error":
        from hw.cxl_encodings import DcohError
        tb.sb.expect_error(DcohError.ILLEGAL_REQ, fuzz_lines[0])
    print(f"fuzz cxl: seed={p.seed} count={p.count} phase={phase}", flush=True)
    try:
        while counts["inputs"] < p.count:
            n = min(phase, p.count - counts["inputs"])
            n_birsp = max(1, n // 20)
            state["left"] = n - n_birsp
            tb.dev.start_random(n // 5, hot, p=0.08)
            tb.core.start_random(2 * n, hot)
            await _watch(tb.drain(timeout=400 * n + 100_000), p, f"phase at input "
                         f"{counts['inputs']}")
            state["left"] = 0
            # quiet: no BISnp outstanding, so any BIRsp answers none (BIRSP_TAG)
            for _ in range(n_birsp):
                tb.core.raw_birsp(rng.randrange(16), bi_tag=rng.randrange(1 << 12),
                                  bi_id=rng.randrange(1 << 4))
                counts["inputs"] += 1
                counts["bad_inputs"] += 1
                counts["stray_birsp"] += 1
                expected[5] += 1
            await _watch(tb.drain(), p, "stray BIRsps")
            await ClockCycles(dut.clk, 20)
            v = tb.violations()
            if v:
                counts["violations"] = len(v)
                raise FuzzFailure("wrong_errors", "; ".join(str(x) for x in v[:5]))
        s = await tb.finish(check=False, expect_proto_errors=None)
        if s["problems"]:
            raise FuzzFailure("unreported_errors", "; ".join(s["problems"][:5]))
    except FuzzFailure as f:
        failure = {"kind": f.kind, "detail": f.detail[:4000], "input": counts["inputs"]}
    except AssertionError as e:          # drain timeout inside the bench: a hang
        failure = {"kind": "hangs", "detail": str(e)[:4000], "input": counts["inputs"]}
    except Exception:
        failure = {"kind": "bench_error", "detail": traceback.format_exc()[-4000:],
                   "input": counts["inputs"]}
    if failure and failure["kind"] == "hangs":
        counts["hangs"] += 1
    if failure and failure["kind"] in ("wrong_errors", "unreported_errors"):
        counts[failure["kind"]] += 1
    c = tb.counters()
    res = _result(p, _counts(counts), t0, c0, tb.cycle, failure,
                  host_messages=tb.core.messages_sent, dut=c,
                  seen_error_pulses=len(tb.sb.seen_errors),
                  error_codes=_names(Counter(code for _, code, _ in tb.sb.seen_errors)),
                  expected_errors=_names(expected))
    Path(p.out).write_text(json.dumps(res, indent=1, default=str))
