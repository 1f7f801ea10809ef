"""Command processor: command/completion rings, doorbell, dispatch to the engines, errors.

Contract: docs/training.md sections 1-3. One descriptor at a time, in ring order:

FETCH (RdCur of the descriptor line, id 3) → DECODE (kind, table id, batch, widths; docs order)
→ the engine (LOOKUP: gather; its undo records may still be in flight when it completes.
UPDATE: first wait until the undo logger is idle, so every record is persistent before any
in-place write, then the update engine. COMMIT: the MLP lag check (docs/training.md section
9; waits while an in-flight snapshot would satisfy it), the same wait, then the persist engine.
SNAPSHOT: its checks, a wait while a snapshot is in flight, then the snapshot engine is started
and the completion written at once, the copy running in the background)
→ CPL (write the completion line, id 3, wait for its write response) → head += 1 and an
``irq_cpl`` pulse.

Ring CSRs arrive as the register block's values plus a one-cycle ``*_swmod`` pulse per software
write; the processor samples the new value the cycle after the pulse and either accepts it or
writes back the previous value (``*_we``/``*_next``). Every error (a descriptor's status, a bad
doorbell or ring write, a RECOVER while busy, or a CSR-block error event) updates the error
registers (last error wins; ``err_count`` counts all) and pulses ``irq_err``.
"""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import (CPL_FIELDS, DESC_FIELDS, FLAG_DESC_LR, FLAG_LOG, FLAG_NOLOG, N_TABLES,
                         DescKind, DeviceError)
from ..gather.layouts import cmd_layout as lookup_cmd_layout, cpl_layout as lookup_cpl_layout
from ..reqport import DeviceRequestSignature, RD_CUR
from ..snapshot.engine import snap_capacity, start_layout as snap_start_layout
from ..update.layouts import update_cmd_layout, update_cpl_layout

__all__ = ["CommandProcessor", "RING_REGS", "CMDPROC_ID"]

CMDPROC_ID = 3
# ring registers the processor owns (value in, restore out): name -> width
RING_REGS = ("cmd_base_lo", "cmd_base_hi", "cmd_size", "cpl_base_lo", "cpl_base_hi", "cmd_tail")
MAX_RING = 65536


def _field(line, fields, name):
    for n, off, w in fields:
        if n == name:
            return line[8 * off: 8 * (off + w)]
    raise KeyError(name)


class CommandProcessor(wiring.Component):
    """Ports (all widths in bits):

    - ``mem``: device request port (id 3): descriptor reads, completion writes.
    - ring registers: ``<r>`` In(32), ``<r>_swmod`` In(1), ``<r>_next`` Out(32), ``<r>_we`` Out(1)
      for r in ``RING_REGS``; ``cmd_head``/``cpl_head`` Out(32).
    - ``lr`` In(32); table directory ``table<t>_{base_lo,base_hi,rows,dim}`` In(32), t < 8.
    - ``recover_req`` In(1) (CONTROL.RECOVER pulse) → ``recover`` Out(1) to the persist engine.
    - ``csr_err_valid`` In(1), ``csr_err_code`` In(8), ``csr_err_value`` In(64): CSR-block errors.
    - ``err_clear`` In(1); ``err_code`` Out(8), ``err_value`` Out(64), ``err_count`` Out(32),
      ``error`` Out(1) (sticky until ``err_clear``), ``irq_cpl``/``irq_err`` Out(1) pulses.
    - gather: ``lk_cmd`` Out stream, ``lk_log`` Out(1), ``lk_table`` Out(16), ``lk_cpl`` In
      stream; undo logger: ``log_idle`` In(1) (no record write in flight), ``log_settled``
      In(1) (no tee input pending), ``log_records`` In(32), ``log_full_events``
      In(32), ``log_batch`` Out(64).
    - update: ``up_cmd`` Out stream, ``up_cpl`` In stream.
    - persist: ``committed`` In(64), ``ready`` In(1), ``persist_busy`` In(1), ``commit`` Out
      stream {batch}, ``commit_done`` In stream {err_code}.
    - snapshot engine (section 9): ``snap_start`` Out stream ``{epoch, src, length}``,
      ``snap_busy`` In(1) (a copy in flight), ``snap_accepted`` In(64) (A, the epoch of the last
      accepted snapshot), ``snap_epoch`` In(64) (P, the last completed or recovered one; changes
      in the cycle ``snap_busy`` falls), ``snap_err`` In(1) pulse with ``snap_err_value`` In(64):
      a media error of the background copy, reported as ``MEDIA`` (lowest priority of the error
      events of a cycle); ``mlp_lag`` In(32) (the ``MLP_LAG`` CSR, k).
    - ``busy`` Out(1) (descriptor executing or pending), counters ``cyc_lookup``, ``cyc_update``,
      ``cyc_commit``, ``desc_done``, ``upd_stalls``, ``sat_total``, ``log_total`` (undo records
      written by LOOKUPs and UPDATEs) Out(32).

    ``csr_addr`` maps register names (``RING_REGS`` and ``"control"``) to CSR byte addresses,
    reported as the value of ``CSR_BUSY``.
    """

    def __init__(self, cfg: DeviceConfig, csr_addr: dict):
        self._cfg = cfg
        self._csr_addr = dict(csr_addr)
        ab = cfg.addr_bits
        members = {
            "mem": Out(DeviceRequestSignature(ab)),
            "cmd_head": Out(32), "cpl_head": Out(32),
            "lr": In(32),
            "recover_req": In(1), "recover": Out(1),
            "csr_err_valid": In(1), "csr_err_code": In(8), "csr_err_value": In(64),
            "err_clear": In(1), "err_code": Out(8), "err_value": Out(64), "err_count": Out(32),
            "error": Out(1), "irq_cpl": Out(1), "irq_err": Out(1),
            "lk_cmd": Out(stream.Signature(lookup_cmd_layout(ab))), "lk_log": Out(1),
            "lk_table": Out(16), "lk_cpl": In(stream.Signature(lookup_cpl_layout(ab))),
            "log_idle": In(1), "log_settled": In(1), "log_records": In(32),
            "log_full_events": In(32),
            "log_batch": Out(64),
            "up_cmd": Out(stream.Signature(update_cmd_layout(ab))),
            "up_cpl": In(stream.Signature(update_cpl_layout())),
            "committed": In(64), "ready": In(1), "persist_busy": In(1),
            "commit": Out(stream.Signature(data.StructLayout({"batch": 64}))),
            "commit_done": In(stream.Signature(data.StructLayout({"err_code": 8}))),
            "busy": Out(1),
            "cyc_lookup": Out(32), "cyc_update": Out(32), "cyc_commit": Out(32),
            "desc_done": Out(32), "upd_stalls": Out(32), "sat_total": Out(32),
            "log_total": Out(32),
            "snap_start": Out(stream.Signature(snap_start_layout(ab))),
            "snap_busy": In(1), "snap_accepted": In(64), "snap_epoch": In(64),
            "snap_err": In(1), "snap_err_value": In(64), "mlp_lag": In(32),
        }
        for r in RING_REGS:
            members[r] = In(32)
            members[r + "_swmod"] = In(1)
            members[r + "_next"] = Out(32)
            members[r + "_we"] = Out(1)
        for t in range(N_TABLES):
            for f in ("base_lo", "base_hi", "rows", "dim"):
                members[f"table{t}_{f}"] = In(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ab = cfg.addr_bits
        s_base, s_end = cfg.staging_base, cfg.staging_base + cfg.staging_size

        # ---- accepted ring configuration and indices ---------------------------------------
        cmd_base = Signal(64)
        cpl_base = Signal(64)
        size = Signal(32)
        head = Signal(32)
        tail = Signal(32)
        seq = Signal(32)
        mask = Signal(32)
        m.d.comb += mask.eq(size - 1)
        pending = Signal()
        executing = Signal()
        m.d.comb += [pending.eq(head != tail), self.cmd_head.eq(head), self.cpl_head.eq(head),
                     self.busy.eq(pending | executing)]

        # ---- error registers -----------------------------------------------------------------
        ev_valid = Signal()            # one error event this cycle (priority mux below)
        ev_code = Signal(8)
        ev_value = Signal(64)
        ev_count = Signal(3)
        with m.If(self.err_clear):
            m.d.sync += self.error.eq(0)
        with m.If(ev_valid):
            m.d.sync += [self.err_code.eq(ev_code), self.err_value.eq(ev_value),
                         self.error.eq(1)]
        m.d.sync += self.err_count.eq(self.err_count + ev_count)
        m.d.comb += self.irq_err.eq(ev_valid)

        # ---- software writes of the ring registers (sampled one cycle after the pulse) ------
        sw_d = {r: Signal(name=f"{r}_swmod_d") for r in RING_REGS}
        for r in RING_REGS:
            m.d.sync += sw_d[r].eq(getattr(self, r + "_swmod"))
        cfg_regs = [r for r in RING_REGS if r != "cmd_tail"]
        shadow = {"cmd_base_lo": cmd_base[:32], "cmd_base_hi": cmd_base[32:],
                  "cmd_size": size, "cpl_base_lo": cpl_base[:32], "cpl_base_hi": cpl_base[32:]}
        ring_ev = Signal()
        ring_code = Signal(8)
        ring_value = Signal(64)
        busy_now = pending | executing
        for r in cfg_regs:
            with m.If(sw_d[r]):
                with m.If(busy_now):
                    m.d.comb += [ring_ev.eq(1), ring_code.eq(DeviceError.CSR_BUSY),
                                 ring_value.eq(self._csr_addr[r]),
                                 getattr(self, r + "_we").eq(1),
                                 getattr(self, r + "_next").eq(shadow[r])]
                with m.Else():
                    m.d.sync += [shadow[r].eq(getattr(self, r)), head.eq(0), tail.eq(0),
                                 seq.eq(0)]
                    m.d.comb += [self.cmd_tail_we.eq(1), self.cmd_tail_next.eq(0)]

        # ring configuration checks (at the doorbell)
        size_ok = Signal()
        m.d.comb += size_ok.eq((size >= 2) & (size <= MAX_RING) & ((size & (size - 1)) == 0))
        ring_bytes = size * 64

        def ring_ok(base):
            return ((base[:6] == 0) & (base >= s_base) & (base + ring_bytes <= s_end))
        v = self.cmd_tail
        n_new = Signal(32)
        free = Signal(32)
        m.d.comb += [n_new.eq((v - tail) & mask), free.eq(size - 1 - ((tail - head) & mask))]
        with m.If(sw_d["cmd_tail"]):
            bad = Signal()
            m.d.comb += bad.eq(1)
            with m.If(~self.ready):
                m.d.comb += [ring_code.eq(DeviceError.NOT_READY), ring_value.eq(v)]
            with m.Elif(~size_ok):
                m.d.comb += [ring_code.eq(DeviceError.RING_CONFIG), ring_value.eq(size)]
            with m.Elif(~ring_ok(cmd_base)):
                m.d.comb += [ring_code.eq(DeviceError.RING_CONFIG), ring_value.eq(cmd_base)]
            with m.Elif(~ring_ok(cpl_base)):
                m.d.comb += [ring_code.eq(DeviceError.RING_CONFIG), ring_value.eq(cpl_base)]
            with m.Elif(v >= size):
                m.d.comb += [ring_code.eq(DeviceError.DOORBELL_RANGE), ring_value.eq(v)]
            with m.Elif(n_new > free):
                m.d.comb += [ring_code.eq(DeviceError.RING_OVERFLOW), ring_value.eq(v)]
            with m.Else():
                m.d.comb += bad.eq(0)
                m.d.sync += tail.eq(v)
            with m.If(bad):
                m.d.comb += [ring_ev.eq(1), self.cmd_tail_we.eq(1), self.cmd_tail_next.eq(tail)]

        # RECOVER: only while nothing executes or is pending
        with m.If(self.recover_req):
            with m.If(busy_now | self.persist_busy):
                m.d.comb += [ring_ev.eq(1), ring_code.eq(DeviceError.CSR_BUSY),
                             ring_value.eq(self._csr_addr["control"])]
            with m.Else():
                m.d.comb += self.recover.eq(1)

        # ---- descriptor ---------------------------------------------------------------------
        desc = Signal(512)
        kind = _field(desc, DESC_FIELDS, "kind")
        flags = _field(desc, DESC_FIELDS, "flags")
        table = _field(desc, DESC_FIELDS, "table")
        tag = _field(desc, DESC_FIELDS, "tag")
        batch = _field(desc, DESC_FIELDS, "batch")
        n_bags = _field(desc, DESC_FIELDS, "n_bags")
        d_lr = _field(desc, DESC_FIELDS, "lr")
        offsets_addr = _field(desc, DESC_FIELDS, "offsets_addr")
        indices_addr = _field(desc, DESC_FIELDS, "indices_addr")
        data_addr = _field(desc, DESC_FIELDS, "data_addr")
        length = _field(desc, DESC_FIELDS, "length")

        t_base = Signal(64)
        t_rows = Signal(32)
        t_dim = Signal(32)
        with m.Switch(table):
            for t in range(N_TABLES):
                with m.Case(t):
                    m.d.comb += [t_base.eq(Cat(getattr(self, f"table{t}_base_lo"),
                                               getattr(self, f"table{t}_base_hi"))),
                                 t_rows.eq(getattr(self, f"table{t}_rows")),
                                 t_dim.eq(getattr(self, f"table{t}_dim"))]
        open_batch = Signal(64)
        m.d.comb += [open_batch.eq(self.committed + 1), self.log_batch.eq(open_batch)]
        is_lookup = kind == DescKind.LOOKUP
        is_update = kind == DescKind.UPDATE
        is_commit = kind == DescKind.COMMIT
        is_snap = kind == DescKind.SNAPSHOT
        is_lu = is_lookup | is_update
        log_flag = (flags & FLAG_LOG) != 0
        checks_batch = (is_lookup & log_flag) | is_update | is_commit

        def too_wide(x):
            return (x >> ab) != 0

        pre_code = Signal(8)
        pre_value = Signal(64)
        # SNAPSHOT (section 9): epoch in (A, C+1], source address width, length, staging range
        snap_cap = snap_capacity(cfg)
        len_bad = (length > snap_cap) if snap_cap < (1 << 32) - 1 else 0
        src_in = ((data_addr >= s_base) if s_base else 1) & Mux(
            length == 0, data_addr < s_end, data_addr + length <= s_end)
        checks = [
            (~(is_lu | is_commit | is_snap), DeviceError.UNKNOWN_KIND, kind),
            (is_lu & (table >= N_TABLES), DeviceError.BAD_TABLE, table),
            (checks_batch & (batch != open_batch), DeviceError.WRONG_BATCH, batch),
            (is_lu & (t_dim >> 16 != 0), DeviceError.BAD_DIM, t_dim),
            (is_lu & too_wide(t_base), DeviceError.ADDR_RANGE, t_base),
            (is_lu & too_wide(offsets_addr), DeviceError.ADDR_RANGE, offsets_addr),
            (is_lu & too_wide(indices_addr), DeviceError.ADDR_RANGE, indices_addr),
            (is_lu & too_wide(data_addr), DeviceError.ADDR_RANGE, data_addr),
            (is_snap & ~((self.snap_accepted < batch) & (batch <= open_batch)),
             DeviceError.BAD_EPOCH, batch),
            (is_snap & too_wide(data_addr), DeviceError.ADDR_RANGE, data_addr),
            (is_snap & len_bad, DeviceError.SNAP_LENGTH, length),
            (is_snap & ~src_in, DeviceError.ADDR_RANGE, data_addr),
        ]

        # COMMIT lag check (section 9): b = C+1, P = last completed snapshot, k = MLP_LAG
        lag_p = Signal(64)
        lag_ok = Signal()
        lag_wait = Signal()
        m.d.comb += [
            lag_p.eq(open_batch - self.snap_epoch),
            lag_ok.eq((open_batch <= self.snap_epoch) | (lag_p <= self.mlp_lag)),
            lag_wait.eq(self.snap_busy & ((open_batch <= self.snap_accepted) |
                                          ((open_batch - self.snap_accepted)[:64] <=
                                           self.mlp_lag))),
        ]
        for i, (cond, code, value) in enumerate(checks):
            with (m.If if i == 0 else m.Elif)(cond):
                m.d.comb += [pre_code.eq(code), pre_value.eq(value)]

        # ---- per-descriptor result ------------------------------------------------------------
        r_status = Signal(8)
        r_err_bag = Signal(32)
        r_err_value = Signal(64)
        r_rows = Signal(32)
        r_sat = Signal(32)
        r_lines = Signal(32)
        r_log = Signal(32)
        r_cycles = Signal(32)
        r_batch = Signal(64)
        rec0 = Signal(32)          # logger records / full events at the start
        full0 = Signal(32)

        cpl_line = Signal(512)
        vals = {"tag": tag, "kind": kind, "status": r_status, "err_bag": r_err_bag,
                "rows": r_rows, "err_value": r_err_value, "sat": r_sat, "lines": r_lines,
                "log_records": r_log, "cycles": r_cycles, "batch": r_batch, "seq": seq + 1}
        for name, off, w in CPL_FIELDS:
            m.d.comb += cpl_line[8 * off: 8 * (off + w)].eq(vals[name])

        # engine command payloads
        lk = self.lk_cmd.payload
        m.d.comb += [lk.tag.eq(tag), lk.dim.eq(t_dim), lk.table_rows.eq(t_rows),
                     lk.n_bags.eq(n_bags), lk.table_base.eq(t_base),
                     lk.offsets_addr.eq(offsets_addr), lk.indices_addr.eq(indices_addr),
                     lk.out_addr.eq(data_addr), self.lk_log.eq(log_flag),
                     self.lk_table.eq(table)]
        up = self.up_cmd.payload
        m.d.comb += [up.table_id.eq(table), up.dim.eq(t_dim), up.table_rows.eq(t_rows),
                     up.n_bags.eq(n_bags), up.table_base.eq(t_base),
                     up.offsets_addr.eq(offsets_addr), up.indices_addr.eq(indices_addr),
                     up.grads_addr.eq(data_addr),
                     up.lr.eq(Mux((flags & FLAG_DESC_LR) != 0, d_lr, self.lr)),
                     up.nolog.eq((flags & FLAG_NOLOG) != 0)]
        m.d.comb += self.commit.payload.batch.eq(open_batch)
        sp = self.snap_start.payload
        m.d.comb += [sp.epoch.eq(batch), sp.src.eq(data_addr), sp.length.eq(length)]

        # ---- memory port ----------------------------------------------------------------------
        rd = self.mem.rd_req.payload
        wr = self.mem.wr_req.payload
        m.d.comb += [rd.id.eq(CMDPROC_ID), rd.op.eq(RD_CUR),
                     rd.addr.eq((cmd_base >> 6) + (head & mask)),
                     wr.id.eq(CMDPROC_ID), wr.addr.eq((cpl_base >> 6) + (head & mask)),
                     wr.be.eq(Const(-1, 64)), wr.data.eq(cpl_line),
                     self.mem.rd_resp.ready.eq(1), self.mem.wr_resp.ready.eq(1)]
        media_err = Signal()

        # ---- counters ---------------------------------------------------------------------------
        cpl_ev = Signal()
        m.d.comb += self.irq_cpl.eq(cpl_ev)

        with m.FSM(name="cp"):
            with m.State("IDLE"):
                with m.If(pending & self.ready):
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += [executing.eq(1), self.mem.rd_req.valid.eq(1)]
                m.d.sync += [r_status.eq(0), r_err_bag.eq(0), r_err_value.eq(0), r_rows.eq(0),
                             r_sat.eq(0), r_lines.eq(0), r_log.eq(0), r_cycles.eq(1),
                             media_err.eq(0)]
                with m.If(self.mem.rd_req.ready):
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):
                m.d.comb += executing.eq(1)
                m.d.sync += r_cycles.eq(r_cycles + 1)
                with m.If(self.mem.rd_resp.valid):
                    m.d.sync += [desc.eq(self.mem.rd_resp.payload.data),
                                 media_err.eq(self.mem.rd_resp.payload.err)]
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), r_batch.eq(batch),
                             rec0.eq(self.log_records), full0.eq(self.log_full_events)]
                with m.If(media_err):
                    m.d.sync += [r_status.eq(DeviceError.MEDIA), r_err_value.eq(0)]
                    m.next = "CPL"
                with m.Elif(pre_code != 0):
                    m.d.sync += [r_status.eq(pre_code), r_err_value.eq(pre_value)]
                    m.next = "CPL"
                with m.Elif(is_lookup):
                    m.next = "LOOKUP"
                with m.Elif(is_update):
                    m.next = "UPDATE_PRE"
                with m.Elif(is_snap):
                    m.next = "SNAP_WAIT"
                with m.Else():
                    m.next = "COMMIT_LAG"
            with m.State("SNAP_WAIT"):
                # the only wait for the snapshot engine: a copy still in flight
                m.d.comb += executing.eq(1)
                m.d.sync += r_cycles.eq(r_cycles + 1)
                with m.If(~self.snap_busy):
                    m.next = "SNAP_START"
            with m.State("SNAP_START"):
                m.d.comb += [executing.eq(1), self.snap_start.valid.eq(1)]
                m.d.sync += r_cycles.eq(r_cycles + 1)
                with m.If(self.snap_start.ready):
                    m.d.sync += r_lines.eq((length + 63) >> 6)
                    m.next = "CPL"
            with m.State("COMMIT_LAG"):
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_commit.eq(self.cyc_commit + 1)]
                with m.If(lag_ok):
                    m.next = "COMMIT_DRAIN"
                with m.Elif(~lag_wait):
                    # value b - A (docs/training.md section 9): b - P unless an unhelpful
                    # snapshot is in flight
                    m.d.sync += [r_status.eq(DeviceError.MLP_LAG),
                                 r_err_value.eq((open_batch - self.snap_accepted)[:64])]
                    m.next = "CPL"
            with m.State("LOOKUP"):
                m.d.comb += [executing.eq(1), self.lk_cmd.valid.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_lookup.eq(self.cyc_lookup + 1)]
                with m.If(self.lk_cmd.ready):
                    m.next = "LOOKUP_WAIT"
            with m.State("LOOKUP_WAIT"):
                m.d.comb += [executing.eq(1), self.lk_cpl.ready.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_lookup.eq(self.cyc_lookup + 1)]
                with m.If(self.lk_cpl.valid):
                    c = self.lk_cpl.payload
                    m.d.sync += [r_status.eq(c.err_code), r_err_bag.eq(c.err_bag),
                                 r_err_value.eq(c.err_value), r_rows.eq(c.rows),
                                 r_sat.eq(c.sat), r_lines.eq(c.out_lines)]
                    m.next = "LOOKUP_DRAIN"
            with m.State("LOOKUP_DRAIN"):
                # every row the lookup read has been offered to the logger (its lines went
                # through the fork before the gather could complete); the logger's counters
                # settle one cycle later. Its record writes may still be in flight: UPDATE and
                # COMMIT wait for them (docs/training.md section 5).
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_lookup.eq(self.cyc_lookup + 1)]
                with m.If(self.log_settled):
                    m.d.sync += r_log.eq(self.log_records - rec0)
                    with m.If((r_status == 0) & (self.log_full_events != full0)):
                        m.d.sync += [r_status.eq(DeviceError.LOG_FULL),
                                     r_err_value.eq(cfg.log_slots)]
                    m.next = "CPL"
            with m.State("UPDATE_PRE"):
                # the LOOKUPs' undo records must be persistent before any in-place write
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_update.eq(self.cyc_update + 1)]
                with m.If(self.log_idle):
                    m.d.sync += rec0.eq(self.log_records)
                    m.next = "UPDATE"
            with m.State("UPDATE"):
                m.d.comb += [executing.eq(1), self.up_cmd.valid.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_update.eq(self.cyc_update + 1)]
                with m.If(self.up_cmd.ready):
                    m.next = "UPDATE_WAIT"
            with m.State("UPDATE_WAIT"):
                m.d.comb += [executing.eq(1), self.up_cpl.ready.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_update.eq(self.cyc_update + 1)]
                with m.If(self.up_cpl.valid):
                    c = self.up_cpl.payload
                    m.d.sync += [r_status.eq(c.err_code), r_err_bag.eq(c.err_bag),
                                 r_err_value.eq(c.err_value), r_rows.eq(c.rows),
                                 r_sat.eq(c.sat), r_lines.eq(c.lines),
                                 self.upd_stalls.eq(self.upd_stalls + c.stalls)]
                    m.next = "UPDATE_DRAIN"
            with m.State("UPDATE_DRAIN"):
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_update.eq(self.cyc_update + 1)]
                with m.If(self.log_idle):
                    m.d.sync += r_log.eq(self.log_records - rec0)
                    m.next = "CPL"
            with m.State("COMMIT_DRAIN"):
                m.d.comb += executing.eq(1)
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_commit.eq(self.cyc_commit + 1)]
                with m.If(self.log_idle):
                    m.d.sync += r_log.eq(self.log_records)
                    m.next = "COMMIT"
            with m.State("COMMIT"):
                m.d.comb += [executing.eq(1), self.commit.valid.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_commit.eq(self.cyc_commit + 1)]
                with m.If(self.commit.ready):
                    m.next = "COMMIT_WAIT"
            with m.State("COMMIT_WAIT"):
                m.d.comb += [executing.eq(1), self.commit_done.ready.eq(1)]
                m.d.sync += [r_cycles.eq(r_cycles + 1), self.cyc_commit.eq(self.cyc_commit + 1)]
                with m.If(self.commit_done.valid):
                    m.d.sync += r_status.eq(self.commit_done.payload.err_code)
                    m.next = "CPL"
            with m.State("CPL"):
                m.d.comb += [executing.eq(1), self.mem.wr_req.valid.eq(1)]
                with m.If(self.mem.wr_req.ready):
                    m.next = "CPL_WAIT"
            with m.State("CPL_WAIT"):
                m.d.comb += executing.eq(1)
                with m.If(self.mem.wr_resp.valid):
                    m.d.sync += [head.eq((head + 1) & mask), seq.eq(seq + 1),
                                 self.desc_done.eq(self.desc_done + 1),
                                 self.sat_total.eq(self.sat_total + r_sat),
                                 self.log_total.eq(self.log_total + Mux(is_commit, 0, r_log))]
                    m.d.comb += cpl_ev.eq(1)
                    m.next = "IDLE"

        # ---- error event priority: CSR block, then ring/recover, then descriptor status -----
        desc_err = cpl_ev & (r_status != 0)
        m.d.comb += ev_count.eq(self.csr_err_valid + ring_ev + desc_err + self.snap_err)
        with m.If(self.csr_err_valid):
            m.d.comb += [ev_valid.eq(1), ev_code.eq(self.csr_err_code),
                         ev_value.eq(self.csr_err_value)]
        with m.Elif(ring_ev):
            m.d.comb += [ev_valid.eq(1), ev_code.eq(ring_code), ev_value.eq(ring_value)]
        with m.Elif(desc_err):
            m.d.comb += [ev_valid.eq(1), ev_code.eq(r_status), ev_value.eq(r_err_value)]
        with m.Elif(self.snap_err):
            m.d.comb += [ev_valid.eq(1), ev_code.eq(DeviceError.MEDIA),
                         ev_value.eq(self.snap_err_value)]
        return m
