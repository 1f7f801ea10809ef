"""CSR block (hw/csr): register map from SystemRDL, AXI4-Lite register block, generated files.

The register block is checked against a reference model written here from the access rules
(docs/training.md section 7, docs/registers.md), driven by an AXI4-Lite master with random
AW/W/B/AR/R timing; directed tests pin the cycle-level behaviour of pulses and precedence.
"""
import re
import shutil
import subprocess

import pytest
from amaranth.hdl import Shape
from amaranth.lib.wiring import Flow

from hw.csr import gen
from hw.csr.regblock import CsrBlock, csr_offsets
from hw.csr.regmap import RegMap, default_regmap
from hw.encodings import DeviceError

from pysim_util import make_rng, simulate

OKAY, SLVERR = 0b00, 0b10
CSR_RO, CSR_ADDR = int(DeviceError.CSR_RO), int(DeviceError.CSR_ADDR)
assert (CSR_RO, CSR_ADDR) == (15, 16)

RMAP = default_regmap()


def off(name):
    return RMAP.register(name).offset


# ---------------------------------------------------------------------------- AXI4-Lite master

class Master:
    """AXI4-Lite master for pysim. ``rng`` (optional) randomises: cycles before AW and before W
    (independently, so W may lead), and cycles BREADY/RREADY stay low after VALID."""

    def __init__(self, bus, rng=None, max_delay=3):
        self.bus, self.rng, self.max_delay = bus, rng, max_delay

    def _d(self):
        return self.rng.randint(0, self.max_delay) if self.rng else 0

    async def write(self, ctx, addr, data, strb=0xF):
        b = self.bus
        aw_at, w_at, b_wait = self._d(), self._d(), self._d()
        aw_done = w_done = False
        t = 0
        ctx.set(b.awaddr, addr)
        ctx.set(b.wdata, data)
        ctx.set(b.wstrb, strb)
        while not (aw_done and w_done):
            ctx.set(b.awvalid, not aw_done and t >= aw_at)
            ctx.set(b.wvalid, not w_done and t >= w_at)
            *_, awv, awr, wv, wr = await ctx.tick().sample(b.awvalid, b.awready, b.wvalid,
                                                           b.wready)
            aw_done |= bool(awv and awr)
            w_done |= bool(wv and wr)
            t += 1
        ctx.set(b.awvalid, 0)
        ctx.set(b.wvalid, 0)
        seen = 0
        while True:
            ctx.set(b.bready, seen >= b_wait)
            *_, bv, br, resp = await ctx.tick().sample(b.bvalid, b.bready, b.bresp)
            if bv and br:
                break
            seen += bool(bv)
        ctx.set(b.bready, 0)
        return int(resp)

    async def read(self, ctx, addr):
        b = self.bus
        ar_at, r_wait = self._d(), self._d()
        for _ in range(ar_at):
            await ctx.tick()
        ctx.set(b.araddr, addr)
        ctx.set(b.arvalid, 1)
        while True:
            *_, arv, arr = await ctx.tick().sample(b.arvalid, b.arready)
            if arv and arr:
                break
        ctx.set(b.arvalid, 0)
        seen = 0
        while True:
            ctx.set(b.rready, seen >= r_wait)
            *_, rv, rr, data, resp = await ctx.tick().sample(b.rvalid, b.rready, b.rdata,
                                                             b.rresp)
            if rv and rr:
                break
            seen += bool(rv)
        ctx.set(b.rready, 0)
        return int(data), int(resp)


def error_monitor(dut, log):
    """Background: append (code, value) of every err_valid pulse; a pulse lasts one cycle."""
    async def mon(ctx):
        prev = False
        while True:
            *_, v, code, value = await ctx.tick().sample(dut.err_valid, dut.err_event_code,
                                                         dut.err_event_value)
            if v:
                assert not prev, "err_valid high two cycles in a row"
                log.append((int(code), int(value)))
            prev = bool(v)
    return mon


# ---------------------------------------------------------------------------- reference model

class RefModel:
    """The access rules, written independently of the RTL: stored values, inputs, responses."""

    def __init__(self, regmap):
        self.regs = {r.offset >> 2: r for r in regmap.registers}
        self.store = {f.port: f.reset or 0 for r in regmap.registers for f in r.fields
                      if "w" in f.sw}
        self.inputs = {f.port: 0 for r in regmap.registers for f in r.fields
                       if f.sw == "r" and f.hw == "w"}

    def read(self, addr):
        r = self.regs.get(addr >> 2)
        if r is None:
            return 0, SLVERR, (CSR_ADDR, addr)
        v = 0
        for f in r.fields:
            if f.sw == "w" or f.singlepulse:
                continue                                 # write-only / pulse: reads 0
            if f.port in self.inputs:
                fv = self.inputs[f.port]
            elif f.port in self.store:
                fv = self.store[f.port]
            else:
                fv = f.reset
            v |= fv << f.lsb
        return v, OKAY, None

    def write(self, addr, data, strb):
        """Returns (resp, error, {pulsed singlepulse ports})."""
        r = self.regs.get(addr >> 2)
        if r is None:
            return SLVERR, (CSR_ADDR, addr), set()
        writable = [f for f in r.fields if "w" in f.sw]
        if not writable:
            return SLVERR, (CSR_RO, addr), set()
        bmask = sum(0xFF << (8 * i) for i in range(4) if strb >> i & 1)
        pulses = set()
        for f in writable:
            ones = (1 << f.width) - 1
            m, d = (bmask >> f.lsb) & ones, (data >> f.lsb) & ones
            if f.singlepulse:
                if d & m:
                    pulses.add(f.port)
            elif f.onwrite == "woclr":
                self.store[f.port] &= ~(d & m)
            else:
                self.store[f.port] = (self.store[f.port] & ~m) | (d & m)
        return OKAY, None, pulses


def storage_outputs(dut):
    """(port, Field) of stored fields with a level output (not single-pulse)."""
    return [(f.port, f) for r in RMAP.registers for f in r.fields
            if "w" in f.sw and f.hw in ("r", "rw") and not f.singlepulse]


# ---------------------------------------------------------------------------- interface


def test_ports_follow_the_naming_convention():
    """The ports the rest of the device connects to exist with the documented direction and
    width (names from the RDL paths; see hw/csr/regblock.py)."""
    blk = CsrBlock()
    blk._MustUse__silence = True      # only its signature is inspected, never elaborated
    members = blk.signature.members
    expect = {
        "table3_rows": (Flow.Out, 32), "table0_base_lo": (Flow.Out, 32),
        "table7_dim": (Flow.Out, 32), "lr": (Flow.Out, 32), "mlp_lag": (Flow.Out, 32),
        "status_busy": (Flow.In, 1), "status_recovering": (Flow.In, 1),
        "err_code": (Flow.In, 32), "perf_set_overflow": (Flow.In, 32),
        "region_staging_size_hi": (Flow.In, 32), "cap_log_slots": (Flow.In, 32),
        "control_recover": (Flow.Out, 1), "err_clear_clear": (Flow.Out, 1),
        "irq_status_cpl": (Flow.Out, 1), "irq_status_recovered_set": (Flow.In, 1),
        "irq_enable_err": (Flow.Out, 1),
        "cmd_tail": (Flow.Out, 32), "cmd_tail_next": (Flow.In, 32), "cmd_tail_we": (Flow.In, 1),
        "cmd_tail_swmod": (Flow.Out, 1), "cpl_base_hi_swmod": (Flow.Out, 1),
        "err_valid": (Flow.Out, 1), "err_event_code": (Flow.Out, 8),
        "err_event_value": (Flow.Out, 64),
    }
    for name, (flow, width) in expect.items():
        assert name in members, f"missing port {name}"
        assert members[name].flow == flow and Shape.cast(members[name].shape).width == width, \
            f"{name}: {members[name]}"
    assert "id" not in members and "version" not in members     # constants have no port
    axil = members["axil"]
    assert axil.flow == Flow.In and Shape.cast(axil.signature.members["awaddr"].shape).width == 12
    # every register of the brief is in the map
    for name in ("ID", "VERSION", "CONTROL", "STATUS", "ERR_CLEAR", "IRQ_STATUS", "IRQ_ENABLE",
                 "COMMITTED_HI", "MLP_EPOCH_HI", "RECOVERED_RECORDS", "ERR_VALUE_HI",
                 "ERR_COUNT", "CMD_HEAD", "CPL_HEAD", "LOG_SLOT", "CAP_TABLES", "CAP_FRAC_BITS",
                 "CAP_LOG_SET_ROWS", "CAP_LOG_WINDOW", "CAP_LOG_SLOTS", "PERF_LOG_BYTES_HI",
                 "PERF_DESC_DONE", "CMD_BASE_LO", "CMD_SIZE", "CPL_BASE_LO", "CMD_TAIL", "LR",
                 "MLP_LAG", *(f"REGION_{r}_{k}_{h}" for r in ("TABLE", "LOG", "SUPERBLOCK",
                                                               "SLOTS", "STAGING")
                              for k in ("BASE", "SIZE") for h in ("LO", "HI")),
                 *(f"TABLE{t}_{k}" for t in range(8) for k in ("BASE_LO", "BASE_HI", "ROWS",
                                                                "DIM"))):
        RMAP.register(name)
    offsets = [r.offset for r in RMAP.registers]
    assert len(set(offsets)) == len(offsets) and all(o % 4 == 0 for o in offsets)
    assert RMAP.space_bytes == 4096
    offs = csr_offsets()
    assert offs["cmd_tail"] == off("CMD_TAIL") and offs["table3_rows"] == off("TABLE3_ROWS")
    assert off("TABLE3_ROWS") == off("TABLE0_ROWS") + 3 * 16      # array stride 16 B


def test_generated_verilog_is_lint_clean(tmp_path):
    """`verilator --lint-only` with the project's three waivers reports nothing for CsrBlock."""
    from cosim import build as cb
    env = cb.verilator_env()
    v = tmp_path / "trainingcxl_csr.v"
    v.write_text(cb.generate_verilog(CsrBlock(), name="trainingcxl_csr"))
    r = subprocess.run(["verilator", "--lint-only", *cb.WAIVERS, "--top-module",
                        "trainingcxl_csr", str(v)], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "%Warning" not in r.stderr, r.stderr[-4000:]


def test_regmap_json_round_trips():
    assert RegMap.from_json(RMAP.to_json()) == RMAP


@pytest.mark.parametrize("body, complaint", [
    ("field { sw = r; hw = w; onread = rclr; } value[31:0];", "onread"),
    ("field { sw = rw; hw = r; counter; } value[31:0] = 0;", "counter"),
    ("field { sw = rw; hw = rw; } value[31:0] = 0;", "needs `we`"),
    ("field { sw = rw; hw = r; onwrite = woset; } value[31:0] = 0;", "onwrite"),
    ("field { sw = r; hw = r; } value[31:0] = 0;", "constant"),
])
def test_regmap_refuses_what_the_block_does_not_implement(tmp_path, body, complaint):
    """An RDL property the register block does not implement is an error, not ignored."""
    rdl = tmp_path / "bad.rdl"
    rdl.write_text("property space_bytes { type = longint unsigned; component = addrmap; };\n"
                   "addrmap bad { space_bytes = 4096; default regwidth = 32;\n"
                   f"  reg {{ {body} }} R @ 0x0; }};\n")
    with pytest.raises(ValueError, match=re.escape(complaint)):
        RegMap.from_rdl(rdl)


# ---------------------------------------------------------------------------- bus, all registers

def test_random_accesses_match_the_reference_model(seed):
    """Random reads and writes (random data, WSTRB, AW/W order and delays, B/R back-pressure)
    to every register and to unmapped addresses, with random hardware inputs and hardware
    writes (`_set`, `_we`) between accesses: every response,
    read value, error report and level output equals the reference model."""
    rng = make_rng(seed)
    dut = CsrBlock()
    model = RefModel(RMAP)
    errors, expected_errors = [], []
    mapped = [r.offset for r in RMAP.registers]
    unmapped = [a for a in range(0, 4096, 4) if a not in set(mapped)]
    outputs = storage_outputs(dut)
    hw_writers = [f for r in RMAP.registers for f in r.fields if f.hwset or f.we]

    async def tb(ctx):
        m = Master(dut.axil, rng)
        for port in model.inputs:
            v = rng.getrandbits(getattr(dut, port).shape().width)
            model.inputs[port] = v
            ctx.set(getattr(dut, port), v)
        # every register read once at reset
        for a in mapped:
            data, resp = await m.read(ctx, a)
            assert (data, resp) == model.read(a)[:2], f"reset read of {a:#x} (seed {seed})"
        for i in range(500):
            a = rng.choice(mapped) if rng.random() < 0.9 else rng.choice(unmapped)
            a |= rng.choice([0, 0, 0, 1, 2, 3])                    # low bits are ignored
            if rng.random() < 0.15:                                 # inputs change
                port = rng.choice(sorted(model.inputs))
                v = rng.getrandbits(getattr(dut, port).shape().width)
                model.inputs[port] = v
                ctx.set(getattr(dut, port), v)
            if rng.random() < 0.2:                                  # a hardware write
                f = rng.choice(hw_writers)
                if f.hwset:
                    ctx.set(getattr(dut, f.port + "_set"), 1)
                    model.store[f.port] = (1 << f.width) - 1
                else:
                    v = rng.getrandbits(f.width)
                    ctx.set(getattr(dut, f.port + "_next"), v)
                    ctx.set(getattr(dut, f.port + "_we"), 1)
                    model.store[f.port] = v
                await ctx.tick()
                ctx.set(getattr(dut, f.port + ("_set" if f.hwset else "_we")), 0)
            if rng.random() < 0.5:
                data = rng.getrandbits(32)
                strb = rng.choice([0xF, 0xF, rng.getrandbits(4)])
                resp = await m.write(ctx, a, data, strb)
                exp_resp, exp_err, _ = model.write(a & ~3, data, strb)
                exp_err = exp_err and (exp_err[0], a)
                assert resp == exp_resp, f"op {i}: write {a:#x} bresp {resp} (seed {seed})"
            else:
                data, resp = await m.read(ctx, a)
                exp_data, exp_resp, exp_err = model.read(a & ~3)
                exp_err = exp_err and (exp_err[0], a)
                assert (data, resp) == (exp_data, exp_resp), \
                    f"op {i}: read {a:#x} = {data:#x}/{resp}, model {exp_data:#x}/{exp_resp} " \
                    f"(seed {seed})"
            if exp_err:
                expected_errors.append(exp_err)
            for port, f in outputs:
                assert ctx.get(getattr(dut, port)) == model.store[port], \
                    f"op {i}: output {port} (seed {seed})"
        await ctx.tick()
        await ctx.tick()
        assert errors == expected_errors, f"error reports differ (seed {seed})"
        assert len(expected_errors) > 10

    simulate(dut, [tb], [error_monitor(dut, errors)], max_cycles=20000, name=f"csr_rand{seed}")


def test_write_strobes_update_only_enabled_bytes():
    """WSTRB per byte: 0b0101 on LR changes bytes 0 and 2 only; 0b0000 changes nothing but is
    still an OKAY write."""
    dut = CsrBlock()

    async def tb(ctx):
        m = Master(dut.axil)
        assert await m.write(ctx, off("LR"), 0x1122_3344) == OKAY
        assert await m.write(ctx, off("LR"), 0xAABB_CCDD, strb=0b0101) == OKAY
        assert await m.read(ctx, off("LR")) == (0x11BB_33DD, OKAY)
        assert ctx.get(dut.lr) == 0x11BB_33DD
        assert await m.write(ctx, off("LR"), 0, strb=0) == OKAY
        assert await m.read(ctx, off("LR")) == (0x11BB_33DD, OKAY)
        assert await m.write(ctx, off("TABLE5_DIM") + 3, 0x8000_0000, strb=0b1000) == OKAY
        assert ctx.get(dut.table5_dim) == 0x8000_0000 and ctx.get(dut.table4_dim) == 0

    simulate(dut, [tb], max_cycles=200, name="csr_wstrb")


def test_read_only_write_and_unmapped_access_answer_slverr_and_report():
    """Write to ID / STATUS / a perf counter: SLVERR, CSR_RO with the byte address, value
    unchanged. Read and write of unmapped offsets (a hole and the last word): SLVERR, CSR_ADDR,
    read data 0. Mapped accesses report nothing."""
    dut = CsrBlock()
    errors = []

    async def tb(ctx):
        m = Master(dut.axil)
        ctx.set(dut.perf_sat, 1234)
        assert await m.write(ctx, off("ID"), 0) == SLVERR
        assert await m.write(ctx, off("STATUS"), 0xF) == SLVERR
        assert await m.write(ctx, off("PERF_SAT"), 0) == SLVERR
        assert await m.read(ctx, off("ID")) == (0x5443_5843, OKAY)
        assert await m.read(ctx, off("VERSION")) == (0x0001_0000, OKAY)
        assert await m.read(ctx, off("PERF_SAT")) == (1234, OKAY)
        assert await m.read(ctx, 0x00C) == (0, SLVERR)
        assert await m.write(ctx, 0xFFC, 0xFFFF_FFFF) == SLVERR
        assert await m.read(ctx, 0xFFC) == (0, SLVERR)
        assert await m.write(ctx, off("LR"), 5) == OKAY
        await ctx.tick()
        assert errors == [(CSR_RO, off("ID")), (CSR_RO, off("STATUS")),
                          (CSR_RO, off("PERF_SAT")), (CSR_ADDR, 0x00C), (CSR_ADDR, 0xFFC),
                          (CSR_ADDR, 0xFFC)]

    simulate(dut, [tb], [error_monitor(dut, errors)], max_cycles=300, name="csr_errors")


# ---------------------------------------------------------------------------- cycle behaviour

async def write_aligned(ctx, dut, addr, data, during_apply=None, before_apply=None):
    """Write with AW and W in the same cycle; ``before_apply``/``during_apply`` are dicts of
    input port names -> values driven for exactly the cycle before the apply cycle / the apply
    cycle. Returns
    (bresp, swmod samples of CMD_TAIL over the transaction)."""
    b = dut.axil
    ctx.set(b.awaddr, addr)
    ctx.set(b.wdata, data)
    ctx.set(b.wstrb, 0xF)
    ctx.set(b.awvalid, 1)
    ctx.set(b.wvalid, 1)
    for k, v in (before_apply or {}).items():
        ctx.set(getattr(dut, k), v)
    *_, awr, wr, sw0 = await ctx.tick().sample(b.awready, b.wready, dut.cmd_tail_swmod)
    assert awr and wr
    ctx.set(b.awvalid, 0)
    ctx.set(b.wvalid, 0)
    for k in (before_apply or {}):
        ctx.set(getattr(dut, k), 0)
    for k, v in (during_apply or {}).items():
        ctx.set(getattr(dut, k), v)
    *_, sw1 = await ctx.tick().sample(dut.cmd_tail_swmod)     # the apply cycle
    for k in (during_apply or {}):
        ctx.set(getattr(dut, k), 0)
    ctx.set(b.bready, 1)
    swmod = [int(sw0), int(sw1)]
    while True:
        *_, bv, resp, sw = await ctx.tick().sample(b.bvalid, b.bresp, dut.cmd_tail_swmod)
        swmod.append(int(sw))
        if bv:
            break
    ctx.set(b.bready, 0)
    return int(resp), swmod


def test_singlepulse_fields_pulse_once_and_read_zero():
    """CONTROL.RECOVER and ERR_CLEAR.CLEAR: a write of 1 gives exactly one cycle high, a write of
    0 none; both read back 0 with OKAY (ERR_CLEAR is write-only)."""
    dut = CsrBlock()
    pulses = {"control_recover": [], "err_clear_clear": []}

    async def counter(ctx):
        cycle = 0
        while True:
            *_, a, b = await ctx.tick().sample(dut.control_recover, dut.err_clear_clear)
            cycle += 1
            for k, v in zip(pulses, (a, b)):
                if v:
                    pulses[k].append(cycle)

    async def tb(ctx):
        m = Master(dut.axil)
        assert await m.write(ctx, off("CONTROL"), 1) == OKAY
        for _ in range(5):
            await ctx.tick()
        assert len(pulses["control_recover"]) == 1 and not pulses["err_clear_clear"]
        assert await m.read(ctx, off("CONTROL")) == (0, OKAY)
        assert await m.write(ctx, off("CONTROL"), 0xFFFF_FFFE) == OKAY
        assert await m.write(ctx, off("ERR_CLEAR"), 1) == OKAY
        assert await m.write(ctx, off("ERR_CLEAR"), 1) == OKAY
        for _ in range(5):
            await ctx.tick()
        assert len(pulses["control_recover"]) == 1
        assert len(pulses["err_clear_clear"]) == 2
        assert pulses["err_clear_clear"][1] - pulses["err_clear_clear"][0] > 1
        assert await m.read(ctx, off("ERR_CLEAR")) == (0, OKAY)

    simulate(dut, [tb], [counter], max_cycles=300, name="csr_singlepulse")


def test_irq_status_woclr_and_hwset_with_hardware_winning():
    """IRQ_STATUS: `_set` sets a bit, writing 1 clears it, writing 0 keeps it; a set in the
    apply cycle of a clear wins, a set one cycle earlier is cleared by the write."""
    dut = CsrBlock()
    a = off("IRQ_STATUS")

    async def tb(ctx):
        m = Master(dut.axil)
        for port in ("irq_status_cpl_set", "irq_status_recovered_set"):
            ctx.set(getattr(dut, port), 1)
            await ctx.tick()
            ctx.set(getattr(dut, port), 0)
        assert await m.read(ctx, a) == (0b101, OKAY)
        assert (ctx.get(dut.irq_status_cpl), ctx.get(dut.irq_status_err)) == (1, 0)
        assert await m.write(ctx, a, 0b010) == OKAY           # clears nothing that is set
        assert await m.read(ctx, a) == (0b101, OKAY)
        assert await m.write(ctx, a, 0b001) == OKAY
        assert await m.read(ctx, a) == (0b100, OKAY)
        assert ctx.get(dut.irq_status_cpl) == 0
        # set in the apply cycle of a clear of the same bit: the set wins
        await write_aligned(ctx, dut, a, 0b100, during_apply={"irq_status_recovered_set": 1})
        assert await m.read(ctx, a) == (0b100, OKAY)
        # set one cycle before the apply cycle: the clear removes it
        await write_aligned(ctx, dut, a, 0b110, before_apply={"irq_status_err_set": 1})
        assert await m.read(ctx, a) == (0, OKAY)
        # IRQ_ENABLE is a plain read/write register of the same bits
        assert await m.write(ctx, off("IRQ_ENABLE"), 0xFFFF_FFFF) == OKAY
        assert await m.read(ctx, off("IRQ_ENABLE")) == (0b111, OKAY)
        assert ctx.get(dut.irq_enable_recovered) == 1

    simulate(dut, [tb], max_cycles=400, name="csr_irq")


def test_ring_register_we_swmod_and_hardware_precedence():
    """CMD_TAIL: swmod is high exactly in the apply cycle and the output shows the written value
    from the next cycle; `_we` loads `_next`; a `_we` in the apply cycle wins over the software
    write (so hardware can veto it with `_next` = the old value)."""
    dut = CsrBlock()
    a = off("CMD_TAIL")

    async def tb(ctx):
        m = Master(dut.axil)
        resp, swmod = await write_aligned(ctx, dut, a, 7)
        assert resp == OKAY and swmod == [0, 1, 0], swmod
        assert ctx.get(dut.cmd_tail) == 7
        ctx.set(dut.cmd_tail_next, 3)
        ctx.set(dut.cmd_tail_we, 1)
        await ctx.tick()
        ctx.set(dut.cmd_tail_we, 0)
        assert await m.read(ctx, a) == (3, OKAY)
        # same cycle: hardware wins
        resp, swmod = await write_aligned(ctx, dut, a, 9, during_apply={
            "cmd_tail_we": 1, "cmd_tail_next": 3})
        assert swmod == [0, 1, 0] and await m.read(ctx, a) == (3, OKAY)
        # hardware write a cycle early: the software write lands after it
        resp, swmod = await write_aligned(ctx, dut, a, 9, before_apply={
            "cmd_tail_we": 1, "cmd_tail_next": 5})
        assert await m.read(ctx, a) == (9, OKAY)
        # other ring registers: no swmod of CMD_TAIL for them, their own swmod
        resp, swmod = await write_aligned(ctx, dut, off("CMD_SIZE"), 64)
        assert swmod == [0, 0, 0] and ctx.get(dut.cmd_size) == 64

    simulate(dut, [tb], max_cycles=300, name="csr_we_swmod")


def test_write_and_read_outstanding_together_both_complete():
    """Reads and writes in flight together both complete, one register access per cycle: an AR
    accepted before the write is held reads the old value; an AR arriving in the cycle the held
    write is applied waits one cycle (arready low) and reads the new value."""
    dut = CsrBlock()

    async def both(ctx, ar_delay, value):
        b = dut.axil
        ctx.set(b.wdata, value)
        ctx.set(b.wstrb, 0xF)
        ctx.set(b.wvalid, 1)
        await ctx.tick()                                  # W held first
        ctx.set(b.wvalid, 0)
        ctx.set(b.awaddr, off("LR"))
        ctx.set(b.awvalid, 1)
        ctx.set(b.araddr, off("LR"))
        ctx.set(b.arvalid, ar_delay == 0)
        ctx.set(b.rready, 1)
        ctx.set(b.bready, 1)
        got_b = got_r = None
        ar_stalls = 0
        for t in range(10):
            *_, awr, arv, arr, bv, rv, rdata = await ctx.tick().sample(
                b.awready, b.arvalid, b.arready, b.bvalid, b.rvalid, b.rdata)
            if awr:
                ctx.set(b.awvalid, 0)
            if arv and arr:
                ctx.set(b.arvalid, 0)
            ar_stalls += bool(arv and not arr)
            if t + 1 == ar_delay:
                ctx.set(b.arvalid, 1)
            got_b = got_b or bool(bv)
            if rv and got_r is None:
                got_r = int(rdata)
        ctx.set(b.rready, 0)
        ctx.set(b.bready, 0)
        return got_b, got_r, ar_stalls

    async def tb(ctx):
        assert await both(ctx, 0, 0xCAFE) == (True, 0, 0)          # read first: old value
        assert await both(ctx, 1, 0xBEEF) == (True, 0xBEEF, 1)     # write first: new value

    simulate(dut, [tb], max_cycles=100, name="csr_concurrent")


# ---------------------------------------------------------------------------- generated files

def test_committed_generated_files_are_up_to_date(tmp_path):
    """`python -m hw.csr.gen` into a temporary directory reproduces every committed output."""
    gen.generate(tmp_path)
    for rel in gen.OUTPUTS:
        fresh = (tmp_path / rel).read_text()
        committed = gen.REPO_ROOT / rel
        assert committed.is_file(), f"{rel} missing: run `python -m hw.csr.gen`"
        assert committed.read_text() == fresh, f"{rel} is stale: run `python -m hw.csr.gen`"


def test_c_header_offsets(tmp_path):
    """The C header holds every register's offset define, and (with a C compiler) its struct
    layout and those defines agree with the register map."""
    header = (gen.REPO_ROOT / gen.HEADER).read_text()
    for r in RMAP.registers:
        assert re.search(rf"#define TRAININGCXL_{r.name}_OFFSET\s+0x{r.offset:03x}\b", header), \
            r.name
    assert "#define TRAININGCXL__IRQ_STATUS__RECOVERED_bm 0x4" in header
    cc = shutil.which("cc")
    if cc is None:
        print("no C compiler: checked the header text only")
        return
    checks = []
    for r in RMAP.registers:
        member = r.path                                        # TABLE[3].ROWS
        checks.append(f"_Static_assert(offsetof(trainingcxl_t, {member}) == "
                      f"TRAININGCXL_{r.name}_OFFSET, \"{r.name}\");")
        checks.append(f"_Static_assert(TRAININGCXL_{r.name}_OFFSET == {r.offset}, "
                      f"\"{r.name} value\");")
    src = tmp_path / "check.c"
    src.write_text("#include <stddef.h>\n#include \"trainingcxl_csr.h\"\n" + "\n".join(checks)
                   + "\n")
    r = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-fsyntax-only",
                        "-I", str(gen.REPO_ROOT / "hw" / "csr"), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
