"""CommandProcessor: the device's command/completion rings and descriptor dispatch."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import CPL_FIELDS, N_TABLES, DescKind, DeviceError
from ..gather.layouts import cmd_layout as lookup_cmd_layout, cpl_layout as lookup_cpl_layout
from ..reqport import DeviceRequestSignature, RD_CUR
from ..snapshot.engine import start_layout as snap_start_layout
from ..update.layouts import update_cmd_layout, update_cpl_layout
from .decoder import DescriptorDecoder, desc_layout
from .errors import ErrorRegisters
from .ring import RING_REGS, RingRegisters, checked_csr_addr

__all__ = ["CommandProcessor", "RING_REGS", "CMDPROC_ID"]

CMDPROC_ID = 3
# the completion fields the processor fills in (CPL_FIELDS adds tag, kind and seq)
result_layout = data.StructLayout({"status": 8, "err_bag": 32, "err_value": 64, "rows": 32,
                                   "sat": 32, "lines": 32, "log_records": 32, "cycles": 32,
                                   "batch": 64})


class CommandProcessor(wiring.Component):
    """Executes the descriptors of the command ring, one at a time, in ring order.

    Contract: docs/training.md sections 1-3. FETCH (RdCur of the descriptor line, id 3) →
    CHECK (one cycle: the :class:`DescriptorDecoder` registers its checks) → DECODE (kind,
    table id, batch, widths; docs order: the first failing check) → the engine
    (LOOKUP: gather; its undo records may still be in flight when it completes. UPDATE: first
    wait until the undo logger is idle, so every record is persistent before any in-place
    write (``MEDIA`` instead if a record write of the batch failed), then the update engine. COMMIT: the MLP lag check (section 9; waits while an
    in-flight snapshot would satisfy it), the same wait, then the persist engine. SNAPSHOT: its
    checks, a wait while a snapshot is in flight, then the snapshot engine is started and the
    completion written at once, the copy running in the background) → CPL (write the completion
    line, id 3, wait for its write response) → head += 1 and an ``irq_cpl`` pulse.

    Ring CSRs are owned by :class:`RingRegisters` (a software write is sampled the cycle after
    its ``*_swmod`` pulse and accepted or written back through ``*_we``/``*_next``). Every
    error (a descriptor's status, a bad doorbell or ring write, a RECOVER while busy, a
    CSR-block error event, a background snapshot copy's media error) updates the error
    registers (:class:`ErrorRegisters`: last error wins, ``err_count`` counts all) and pulses
    ``irq_err``.

    Parameters
    ----------
    cfg : DeviceConfig
        Address width, staging region, log and snapshot sizes.
    csr_addr : dict
        CSR byte address of each of ``RING_REGS`` and ``"control"``, reported as the value of a
        ``CSR_BUSY`` error.

    Members
    -------
    mem : Out(DeviceRequestSignature(cfg.addr_bits))
        Id 3: descriptor reads, completion writes.
    <r>, <r>_swmod, <r>_next, <r>_we : In(32), In(1), Out(32), Out(1)
        For r in ``RING_REGS``; ``cmd_head``/``cpl_head`` Out(32).
    lr : In(32); table<t>_{base_lo,base_hi,rows,dim} : In(32), t < 8
        The LR CSR and the table directory.
    recover_req : In(1), recover : Out(1)
        CONTROL.RECOVER pulse, passed to the persist engine when allowed.
    csr_err_valid, csr_err_code, csr_err_value : In(1), In(8), In(64)
        CSR-block errors.
    err_clear : In(1); err_code, err_value, err_count, error, irq_err : Out
        Error registers (``error`` sticky until ``err_clear``), ``irq_cpl``/``irq_err`` Out(1)
        pulses.
    lk_cmd, lk_log, lk_table, lk_cpl
        Gather: Out stream, Out(1), Out(16), In stream.
    log_idle, log_settled, log_records, log_full_events : In; log_batch : Out(64)
        Undo logger: no record write in flight, no tee input pending, its counters; the open
        batch.
    log_media_err : In(1)
        Undo logger: a record write (or a synchronous-path row read) of the open batch failed
        (sticky until retire). An UPDATE or COMMIT that finds it set once the logger is idle
        completes with ``MEDIA`` and does nothing (the batch must be aborted by recovery).
    up_cmd, up_cpl
        Update engine: Out stream, In stream.
    committed, ready, persist_busy : In; commit : Out stream {batch}; commit_done : In stream
        Persist engine.
    snap_start, snap_busy, snap_accepted, snap_epoch, snap_err, snap_err_value, mlp_lag
        Snapshot engine (section 9): ``snap_start`` Out stream ``{epoch, src, length}``,
        ``snap_busy`` (a copy in flight), ``snap_accepted`` (A), ``snap_epoch`` (P; changes in
        the cycle ``snap_busy`` falls), ``snap_err`` pulse with ``snap_err_value`` (reported as
        ``MEDIA``, lowest priority of a cycle's error events), ``mlp_lag`` (k).
    rec_err : In(1)
        Pulse: the persist engine's first media error of a recovery (reported as ``MEDIA``,
        value 0, after every other source).
    busy : Out(1)
        A descriptor executing or pending.
    cyc_lookup, cyc_update, cyc_commit, desc_done, upd_stalls, sat_total, log_total : Out(32)
        Counters (``log_total``: undo records written by LOOKUPs and UPDATEs).

    Raises
    ------
    KeyError
        If ``csr_addr`` lacks a register of ``RING_REGS`` or ``"control"``.
    """

    def __init__(self, cfg: DeviceConfig, csr_addr: dict):
        self._cfg = cfg
        self._csr_addr = checked_csr_addr(csr_addr)
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
            "log_media_err": In(1),
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
            "rec_err": In(1),
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

        # ---- ring configuration and indices, error registers -------------------------------
        m.submodules.ring = ring = RingRegisters(cfg, self._csr_addr)
        for reg in RING_REGS:
            m.d.comb += [getattr(ring, reg).eq(getattr(self, reg)),
                         getattr(ring, reg + "_swmod").eq(getattr(self, reg + "_swmod")),
                         getattr(self, reg + "_next").eq(getattr(ring, reg + "_next")),
                         getattr(self, reg + "_we").eq(getattr(ring, reg + "_we"))]
        executing, head, mask = Signal(), ring.head, ring.mask
        m.d.comb += [ring.ready.eq(self.ready), ring.executing.eq(executing),
                     ring.persist_busy.eq(self.persist_busy),
                     ring.recover_req.eq(self.recover_req), self.recover.eq(ring.recover),
                     self.cmd_head.eq(head), self.cpl_head.eq(head),
                     self.busy.eq(ring.pending | executing)]
        m.submodules.errors = errors = ErrorRegisters()
        m.d.comb += [errors.err_clear.eq(self.err_clear), errors.ring.eq(ring.error),
                     errors.csr.eq(Cat(self.csr_err_valid, self.csr_err_code, self.csr_err_value)),
                     errors.snap.eq(Cat(self.snap_err, Const(DeviceError.MEDIA, 8),
                                        self.snap_err_value)),
                     errors.recovery.eq(Cat(self.rec_err, Const(DeviceError.MEDIA, 8),
                                            Const(0, 64))),
                     self.err_code.eq(errors.err_code), self.err_value.eq(errors.err_value),
                     self.err_count.eq(errors.err_count), self.error.eq(errors.error),
                     self.irq_err.eq(errors.irq_err)]

        # ---- descriptor: fields, checks, engine commands -----------------------------------
        m.submodules.decoder = dec = DescriptorDecoder(cfg)
        desc = Signal(desc_layout)
        kind, batch, length = desc.kind, desc.batch, desc.length
        m.d.comb += [dec.desc.eq(desc), dec.committed.eq(self.committed),
                     dec.snap_accepted.eq(self.snap_accepted), dec.snap_epoch.eq(self.snap_epoch),
                     dec.snap_busy.eq(self.snap_busy), dec.mlp_lag.eq(self.mlp_lag),
                     dec.lr.eq(self.lr)]
        for t in range(N_TABLES):
            m.d.comb += [dec.tables[t].base.eq(Cat(getattr(self, f"table{t}_base_lo"),
                                                   getattr(self, f"table{t}_base_hi"))),
                         dec.tables[t].rows.eq(getattr(self, f"table{t}_rows")),
                         dec.tables[t].dim.eq(getattr(self, f"table{t}_dim"))]
        open_batch = dec.open_batch
        m.d.comb += [self.log_batch.eq(open_batch), self.lk_cmd.payload.eq(dec.lk_cmd),
                     self.lk_log.eq(dec.lk_log), self.lk_table.eq(desc.table),
                     self.up_cmd.payload.eq(dec.up_cmd), self.snap_start.payload.eq(dec.snap_cmd),
                     self.commit.payload.batch.eq(open_batch)]

        # ---- per-descriptor result and its completion line ---------------------------------
        r = Signal(result_layout)  # the completion's fields, built while the descriptor runs
        rec0, full0 = Signal(32), Signal(32)    # logger records / full events at the start
        cpl_line = Signal(512)
        vals = {"tag": desc.tag, "kind": kind, "seq": ring.seq + 1,
                **{name: r[name] for name in result_layout.members}}
        for name, off, w in CPL_FIELDS:
            m.d.comb += cpl_line[8 * off: 8 * (off + w)].eq(vals[name])

        # ---- memory port: the head descriptor's line, its completion line ------------------
        rd, wr = self.mem.rd_req.payload, self.mem.wr_req.payload
        m.d.comb += [rd.id.eq(CMDPROC_ID), rd.op.eq(RD_CUR),
                     rd.addr.eq((ring.cmd_base >> 6) + (head & mask)),
                     wr.id.eq(CMDPROC_ID), wr.addr.eq((ring.cpl_base >> 6) + (head & mask)),
                     wr.be.eq(Const(-1, 64)), wr.data.eq(cpl_line),
                     self.mem.rd_resp.ready.eq(1), self.mem.wr_resp.ready.eq(1)]
        media_err, cpl_ev = Signal(), Signal()   # descriptor read error; completion written
        m.d.comb += [self.irq_cpl.eq(cpl_ev), ring.advance.eq(cpl_ev)]

        with m.FSM(name="cp") as fsm:
            with m.State("IDLE"):
                with m.If(ring.pending & self.ready):
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += self.mem.rd_req.valid.eq(1)
                m.d.sync += [r.eq(0), r.cycles.eq(1), r.batch.eq(r.batch), media_err.eq(0)]
                with m.If(self.mem.rd_req.ready):
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):
                with m.If(self.mem.rd_resp.valid):
                    m.d.sync += [desc.eq(self.mem.rd_resp.payload.data),
                                 media_err.eq(self.mem.rd_resp.payload.err)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                # (the decoder's checks of the descriptor are registered this cycle)
                m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += [r.batch.eq(batch), rec0.eq(self.log_records),
                             full0.eq(self.log_full_events)]
                with m.If(media_err):
                    m.d.sync += [r.status.eq(DeviceError.MEDIA), r.err_value.eq(0)]
                    m.next = "CPL"
                with m.Elif(dec.pre_code != 0):
                    m.d.sync += [r.status.eq(dec.pre_code), r.err_value.eq(dec.pre_value)]
                    m.next = "CPL"
                with m.Elif(kind == DescKind.LOOKUP):
                    m.next = "LOOKUP"
                with m.Elif(kind == DescKind.UPDATE):
                    m.next = "UPDATE_PRE"
                with m.Elif(kind == DescKind.SNAPSHOT):
                    m.next = "SNAP_WAIT"
                with m.Else():
                    m.next = "COMMIT_LAG"
            with m.State("SNAP_WAIT"):
                # the only wait for the snapshot engine: a copy still in flight
                with m.If(~self.snap_busy):
                    m.next = "SNAP_START"
            with m.State("SNAP_START"):
                m.d.comb += self.snap_start.valid.eq(1)
                with m.If(self.snap_start.ready):
                    m.d.sync += r.lines.eq((length + 63) >> 6)
                    m.next = "CPL"
            with m.State("COMMIT_LAG"):
                with m.If(dec.lag_ok):
                    m.next = "COMMIT_DRAIN"
                with m.Elif(~dec.lag_wait):
                    # value b - A (docs/training.md section 9): b - P unless an unhelpful
                    # snapshot is in flight
                    m.d.sync += [r.status.eq(DeviceError.MLP_LAG),
                                 r.err_value.eq((open_batch - self.snap_accepted)[:64])]
                    m.next = "CPL"
            with m.State("LOOKUP"):
                m.d.comb += self.lk_cmd.valid.eq(1)
                with m.If(self.lk_cmd.ready):
                    m.next = "LOOKUP_WAIT"
            with m.State("LOOKUP_WAIT"):
                m.d.comb += self.lk_cpl.ready.eq(1)
                with m.If(self.lk_cpl.valid):
                    c = self.lk_cpl.payload
                    m.d.sync += [r.status.eq(c.err_code), r.err_bag.eq(c.err_bag),
                                 r.err_value.eq(c.err_value), r.rows.eq(c.rows),
                                 r.sat.eq(c.sat), r.lines.eq(c.out_lines)]
                    m.next = "LOOKUP_DRAIN"
            with m.State("LOOKUP_DRAIN"):
                # every row the lookup read has been offered to the logger (its lines went
                # through the fork before the gather could complete); the logger's counters
                # settle one cycle later. Its record writes may still be in flight: UPDATE and
                # COMMIT wait for them (docs/training.md section 5).
                with m.If(self.log_settled):
                    m.d.sync += r.log_records.eq(self.log_records - rec0)
                    with m.If((r.status == 0) & (self.log_full_events != full0)):
                        m.d.sync += [r.status.eq(DeviceError.LOG_FULL),
                                     r.err_value.eq(cfg.log_slots)]
                    m.next = "CPL"
            with m.State("UPDATE_PRE"):
                # the LOOKUPs' undo records must be persistent before any in-place write
                with m.If(self.log_idle):
                    m.d.sync += rec0.eq(self.log_records)
                    with m.If(self.log_media_err):
                        # a record of this batch may be missing: no in-place write
                        m.d.sync += [r.status.eq(DeviceError.MEDIA), r.err_value.eq(0)]
                        m.next = "CPL"
                    with m.Else():
                        m.next = "UPDATE"
            with m.State("UPDATE"):
                m.d.comb += self.up_cmd.valid.eq(1)
                with m.If(self.up_cmd.ready):
                    m.next = "UPDATE_WAIT"
            with m.State("UPDATE_WAIT"):
                m.d.comb += self.up_cpl.ready.eq(1)
                with m.If(self.up_cpl.valid):
                    c = self.up_cpl.payload
                    m.d.sync += [r.status.eq(c.err_code), r.err_bag.eq(c.err_bag),
                                 r.err_value.eq(c.err_value), r.rows.eq(c.rows),
                                 r.sat.eq(c.sat), r.lines.eq(c.lines),
                                 self.upd_stalls.eq(self.upd_stalls + c.stalls)]
                    m.next = "UPDATE_DRAIN"
            with m.State("UPDATE_DRAIN"):
                with m.If(self.log_idle):
                    m.d.sync += r.log_records.eq(self.log_records - rec0)
                    m.next = "CPL"
            with m.State("COMMIT_DRAIN"):
                with m.If(self.log_idle):
                    m.d.sync += r.log_records.eq(self.log_records)
                    with m.If(self.log_media_err):
                        m.d.sync += [r.status.eq(DeviceError.MEDIA), r.err_value.eq(0)]
                        m.next = "CPL"
                    with m.Else():
                        m.next = "COMMIT"
            with m.State("COMMIT"):
                m.d.comb += self.commit.valid.eq(1)
                with m.If(self.commit.ready):
                    m.next = "COMMIT_WAIT"
            with m.State("COMMIT_WAIT"):
                m.d.comb += self.commit_done.ready.eq(1)
                with m.If(self.commit_done.valid):
                    m.d.sync += r.status.eq(self.commit_done.payload.err_code)
                    m.next = "CPL"
            with m.State("CPL"):
                m.d.comb += self.mem.wr_req.valid.eq(1)
                with m.If(self.mem.wr_req.ready):
                    m.next = "CPL_WAIT"
            with m.State("CPL_WAIT"):
                with m.If(self.mem.wr_resp.valid):
                    m.d.sync += [self.desc_done.eq(self.desc_done + 1),
                                 self.sat_total.eq(self.sat_total + r.sat),
                                 self.log_total.eq(self.log_total + Mux(kind == DescKind.COMMIT,
                                                                        0, r.log_records))]
                    m.d.comb += cpl_ev.eq(1)
                    m.next = "IDLE"

        # cycle counters: of the descriptor (FETCH to CPL) and per kind
        counted = {"cyc_lookup": ("LOOKUP", "LOOKUP_WAIT", "LOOKUP_DRAIN"),
                   "cyc_update": ("UPDATE_PRE", "UPDATE", "UPDATE_WAIT", "UPDATE_DRAIN"),
                   "cyc_commit": ("COMMIT_LAG", "COMMIT_DRAIN", "COMMIT", "COMMIT_WAIT")}
        for name, states in counted.items():
            with m.If(Cat(fsm.ongoing(st) for st in states).any()):
                m.d.sync += getattr(self, name).eq(getattr(self, name) + 1)
        with m.If(~Cat(fsm.ongoing(st) for st in ("IDLE", "FETCH", "CPL", "CPL_WAIT")).any()):
            m.d.sync += r.cycles.eq(r.cycles + 1)
        m.d.comb += executing.eq(~fsm.ongoing("IDLE"))

        # ---- error event of a completed descriptor (priority: ErrorRegisters) --------------
        # (a completion line whose write answered an error did not reach the ring: the host
        # cannot read it, so the error registers report MEDIA with the ring slot instead)
        cpl_wr_err = self.mem.wr_resp.payload.err
        m.d.comb += [errors.desc.valid.eq(cpl_ev & ((r.status != 0) | cpl_wr_err)),
                     errors.desc.code.eq(Mux(cpl_wr_err, DeviceError.MEDIA, r.status)),
                     errors.desc.value.eq(Mux(cpl_wr_err, head & mask, r.err_value))]
        return m
