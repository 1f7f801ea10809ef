"""PersistEngine: superblock format, COMMIT, undo-log recovery and the MLP slot choice
(docs/training.md sections 6 and 9)."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import LINE_BYTES
from ..crc32 import crc32_next
from ..encodings import LOG_HDR_FIELDS, LOG_MAGIC, SB_FIELDS, SB_MAGIC, SB_VERSION, DeviceError
from ..reqport import DeviceRequestSignature
from .apply import RecordApplier
from .fields import field
from .mlp_slot import SlotChooser
from .requests import ReadRegister, WriteRegister
from .scan import LogScanner

__all__ = ["PERSIST_ID", "PersistEngine", "commit_layout", "commit_done_layout"]

PERSIST_ID = 10

commit_layout = data.StructLayout({"batch": 64})
commit_done_layout = data.StructLayout({"err_code": 8})


def _pow2(v):
    return v >= 1 and v & (v - 1) == 0


class PersistEngine(wiring.Component):
    """Formats the superblock, commits batches and recovers from the undo log.

    Recovery (section 6 steps 1-4):

    1. Read the superblock. Fresh (magic or version wrong): write bytes 8..63 as zeros, wait
       for the response, write bytes 0..7 (magic, version), wait; C = 0, ``epoch`` = 0 (the
       zero write set ``recovery_epoch``; no epoch write); retire; ready.
    2. Else C = ``committed``, E = ``recovery_epoch``. A header is *current* if ``magic ==
       LOG_MAGIC``, ``batch == C+1`` and ``epoch == E``. Pass 1 (:class:`LogScanner`): header
       reads of slots 0, 1, ... with up to ``reads`` in flight; q = the first slot whose header
       is not current (else ``log_slots``).
    3. Pass 2 (:class:`RecordApplier`): slots ``min(q + log_window, log_slots) - 1`` down to
       0, each valid record (checks and CRC) written back to its row, in descending slot order.
    4. When every row write is acknowledged: write ``recovery_epoch = E+1`` (mod 2^64; one
       write of bytes 32..39 of the superblock line, ``be = 0xFF << 32``), wait for its
       response; then ``epoch`` = E+1, retire, (with ``snapshots``: choose the MLP slot,
       :class:`SlotChooser`), ready, ``recovered_records`` = records applied. Done also when no
       record was applied.

    In the cycle ``ready`` is set, ``mlp_load`` pulses with ``mlp_slot`` (0 none, 1 A, 2 B) and
    ``mlp_epoch`` (0 if none); after a format too (slot 0, epoch 0).

    Media errors during recovery (``rd_resp.err`` / ``wr_resp.err``) set ``media_err``:

    - superblock read or format write error: recovery stops there, ``ready`` stays 0 (C
      unknown; the host may retry ``recover``);
    - ``recovery_epoch`` write error: recovery stops there, ``ready`` stays 0, no retire,
      ``epoch`` keeps E (the superblock may still hold E: running with E would accept stale
      records of the cut attempt, running with E+1 would write records a later recovery
      ignores). The rollback writes have landed; a retried ``recover`` redoes them (same
      values) and the epoch write;
    - pass 1 header read error: the slot does not end the scan (it is skipped, the scan
      continues), so a transient error inside the valid run cannot shorten the scan window;
    - pass 2 header or data line read error: that slot is not applied (its data is not
      trusted);
    - any error of passes 1 and 2 (reads, table row writes): pass 2 runs to its end, then
      recovery stops before the epoch write: ``ready`` stays 0, no retire, ``epoch`` keeps E
      (a row may not have been rolled back; a retried ``recover`` redoes every rollback, same
      values);
    - MLP slot header or payload read error: that slot is invalid (recovery completes).

    ``rec_media`` pulses with the first error response of a recovery (the device reports it as
    ``ERR_CODE`` = ``MEDIA``, value 0).

    ``rd_resp`` and ``wr_resp`` are always ready (every response has a place reserved before
    its request is issued).

    Parameters
    ----------
    cfg : DeviceConfig
        Superblock, log, table and snapshot slot regions, ``addr_bits``, ``max_reads``.
    reads : int, optional
        Read requests in flight at most (default ``min(cfg.max_reads, 64)``), so pass 1 scans
        about ``reads / read latency`` slots per cycle.
    ring : int
        Pass 2 headers in flight or waiting for their data reads (default 32).
    buf_lines : int
        Pass 2 data line buffer (default 64, >= 8), which bounds the record data in flight
        (about ``buf_lines / read latency`` lines per cycle).
    writes : int
        Row writes in flight (default 64).
    snapshots : bool
        Choose the MLP slot at the end of a recovery (section 9; the device sets it; False is
        the engine of section 6 alone).

    Members
    -------
    mem : Out(DeviceRequestSignature(cfg.addr_bits))
        Every read (``RD_CUR``) and write uses id :data:`PERSIST_ID` (10). Reads: the
        superblock line, undo-log slot lines, snapshot slot lines. Writes: the superblock (byte
        enables of the words written only) and table rows (full lines).
    recover : In(1)
        Pulse: start recovery; ignored while ``busy``.
    snap_busy : In(1)
        A ``recover`` waits (busy, recovering) until it is 0 before reading the superblock, so
        no snapshot copy runs during recovery (unconnected: no wait).
    commit : In(stream.Signature(commit_layout))
        Write ``committed = batch`` (one write of bytes 8..15 of the superblock line, ``be =
        0xFF << 8``), wait for its ``wr_resp``; on success pulse ``retire`` and set
        ``committed``. The sender checks ``batch == committed + 1`` (not checked here).
        Accepted only while idle.
    commit_done : Out(stream.Signature(commit_done_layout))
        One per commit, after the write response: 0, or ``DeviceError.MEDIA`` if the write
        answered an error (then ``committed`` is unchanged, no ``retire``, ``media_err`` set).
    committed : Out(64)
        C.
    epoch : Out(64)
        The device's copy of the superblock's ``recovery_epoch``: 0 after a format, E+1 after a
        recovery that read E; valid whenever ``ready`` (the undo logger writes it into record
        headers).
    ready : Out(1)
        A recovery completed since reset; cleared when a recovery starts.
    recovering, busy : Out(1)
    recovered_records : Out(32)
        Records applied by the last recovery.
    retire : Out(1)
        One-cycle pulse: after a commit's write is acknowledged, and at the end of a recovery.
    rec_media : Out(1)
        Pulse: the first media error of this recovery.
    media_err : Out(1)
        Sticky until the next ``recover``.
    cyc_commit, cyc_recover : Out(32)
        Cycles spent in commits / recoveries since reset, wrapping.
    mlp_load : Out(1), mlp_slot : Out(2), mlp_epoch : Out(64)
        The MLP slot choice (above).

    Raises
    ------
    ValueError
        If ``reads``, ``ring``, ``buf_lines`` or ``writes`` is not a power of two of at least
        its minimum (2, 2, 8, 2).
    """

    def __init__(self, cfg, *, reads=None, ring=32, buf_lines=64, writes=64, snapshots=False):
        self.cfg = cfg
        self.snapshots = snapshots
        self.reads = reads if reads is not None else min(cfg.max_reads, 64)
        self.ring, self.buf_lines, self.writes = ring, buf_lines, writes
        for name, v, lo in (("reads", self.reads, 2), ("ring", ring, 2),
                            ("buf_lines", buf_lines, 8), ("writes", writes, 2)):
            if not (_pow2(v) and v >= lo):
                raise ValueError(f"PersistEngine: {name} must be a power of two >= {lo}, "
                                 f"got {v!r}")
        super().__init__({
            "mem": Out(DeviceRequestSignature(cfg.addr_bits)),
            "recover": In(1),
            "commit": In(stream.Signature(commit_layout)),
            "commit_done": Out(stream.Signature(commit_done_layout)),
            "committed": Out(64),
            "epoch": Out(64),
            "ready": Out(1),
            "recovering": Out(1),
            "busy": Out(1),
            "recovered_records": Out(32),
            "retire": Out(1),
            "media_err": Out(1),
            "rec_media": Out(1),
            "cyc_commit": Out(32),
            "cyc_recover": Out(32),
            "snap_busy": In(1),
            "mlp_load": Out(1),
            "mlp_slot": Out(2),
            "mlp_epoch": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        sb_line = cfg.superblock_base // LINE_BYTES

        # ---- parts: request registers, recovery passes, MLP slot choice --------------------
        m.submodules.reads = rdr = ReadRegister(cfg.addr_bits, depth=self.reads, rd_id=PERSIST_ID)
        m.submodules.writes = wrr = WriteRegister(cfg.addr_bits, max_writes=self.writes,
                                                  wr_id=PERSIST_ID)
        m.submodules.scan = scan = LogScanner(cfg)
        m.submodules.apply = app = RecordApplier(cfg, ring=self.ring, buf_lines=self.buf_lines)
        m.submodules.mlp = mlp = SlotChooser(cfg)
        wiring.connect(m, rdr.rd_req, wiring.flipped(self.mem.rd_req))
        wiring.connect(m, wiring.flipped(self.mem.rd_resp), rdr.rd_resp)
        wiring.connect(m, wrr.wr_req, wiring.flipped(self.mem.wr_req))
        wiring.connect(m, wiring.flipped(self.mem.wr_resp), wrr.wr_resp)
        rsp, rsp_v = self.mem.rd_resp.payload, self.mem.rd_resp.valid
        line = rsp.data
        wack, wack_err = self.mem.wr_resp.valid, self.mem.wr_resp.payload.err

        # read loads (one source at a time: SB_READ below, SCAN, APPLY or the MLP check)
        for part in (scan, app, mlp):
            with m.If(part.rd_load):
                m.d.comb += [rdr.load.eq(1), rdr.addr.eq(part.rd_addr),
                             rdr.kind.eq(part.rd_kind if part is not scan else 0)]
        for part in (scan, app, mlp):
            m.d.comb += part.rd_free.eq(rdr.free)
        for part in (app, mlp):
            m.d.comb += [part.rsp_valid.eq(rsp_v), part.rsp_kind.eq(rdr.resp_kind),
                         part.rsp_err.eq(rsp.err), part.rsp_data.eq(line)]
        m.d.comb += [scan.rsp_valid.eq(rsp_v), scan.rsp_err.eq(rsp.err),
                     scan.reads_idle.eq(rdr.idle), mlp.reads_idle.eq(rdr.idle),
                     app.top.eq(scan.top)]
        # write loads: row lines from the applier (the control FSM's superblock writes below)
        with m.If(app.wr_load):
            m.d.comb += [wrr.load.eq(1), wrr.addr.eq(app.wr_addr),
                         wrr.be.eq(Const(-1, LINE_BYTES)), wrr.from_buf.eq(1)]
        m.d.comb += [app.wr_room.eq(wrr.free & (wrr.outstanding < self.writes)),
                     app.buf_en.eq(wrr.buf_en), wrr.buf_data.eq(app.buf_data)]

        def sb_write(be, data, hi=0):
            m.d.comb += [wrr.load.eq(1), wrr.addr.eq(sb_line), wrr.be.eq(be), wrr.data.eq(data),
                         wrr.hi.eq(hi)]

        # ---- one CRC network for pass 2 and the MLP slot check ------------------------------
        # (signals, not expressions: the network reads its inputs once per output bit)
        net_st, net_in = Signal(32), Signal(8 * LINE_BYTES)
        m.d.comb += [net_st.eq(Mux(mlp.crc_active, mlp.crc_st, app.crc_st)),
                     net_in.eq(Mux(mlp.crc_active, mlp.crc_in, app.crc_in))]
        crc_nx = Signal(32)
        m.d.comb += [crc_nx.eq(crc32_next(m, net_st, net_in, LINE_BYTES)),
                     app.crc_nx.eq(crc_nx), mlp.crc_nx.eq(crc_nx)]

        # ---- registers (the ports themselves), superblock and record header fields ---------
        committed, epoch, ready, media_err = self.committed, self.epoch, self.ready, self.media_err
        retire, cd_valid, cd_err = self.retire, self.commit_done.valid, self.commit_done.payload
        # the open batch, committed + 1, kept in a register written with ``committed`` (not an
        # adder in front of the log scan's header compare)
        open_batch, batch_reg = Signal(64, init=1), Signal(64)

        def set_committed(value):
            m.d.sync += [committed.eq(value), open_batch.eq(value + 1)]
        m.d.comb += [self.recovered_records.eq(app.recovered),
                     mlp.committed.eq(committed), self.mlp_slot.eq(mlp.slot),
                     self.mlp_epoch.eq(mlp.epoch)]
        m.d.sync += retire.eq(0)
        resp_err = (rsp_v & rsp.err) | (wack & wack_err)
        with m.If(resp_err):
            m.d.sync += media_err.eq(1)

        sb_word0 = SB_MAGIC | (SB_VERSION << 32)
        hdr_live = ((field(line, LOG_HDR_FIELDS, "magic") == LOG_MAGIC) &
                    (field(line, LOG_HDR_FIELDS, "batch") == open_batch) &
                    (field(line, LOG_HDR_FIELDS, "epoch") == epoch))
        m.d.comb += [scan.hdr_live.eq(hdr_live), app.hdr_live.eq(hdr_live)]
        ep_off = next(off for n, off, w in SB_FIELDS if n == "recovery_epoch")
        assert ep_off == 32, "WriteRegister.hi places the epoch word at bytes 32..39"
        rec_states = ("SNAP_HOLD", "SB_READ", "SB_WAIT", "FMT1", "FMT1_WAIT", "FMT2", "FMT2_WAIT",
                      "SCAN", "APPLY", "EPOCH", "EPOCH_WAIT") + (("MLP",) if self.snapshots else ())
        com_states = ("COMMIT_WAIT", "COMMIT_DONE")

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += self.commit.ready.eq(~self.recover)
                with m.If(self.recover):
                    m.d.comb += [app.clear.eq(1), mlp.clear.eq(1)]
                    m.d.sync += [ready.eq(0), media_err.eq(0)]
                    with m.If(self.snap_busy):
                        m.next = "SNAP_HOLD"
                    with m.Else():
                        m.next = "SB_READ"
                with m.Elif(self.commit.valid):
                    sb_write(0xFF << 8, self.commit.payload.batch << 64)
                    m.d.sync += batch_reg.eq(self.commit.payload.batch)
                    m.next = "COMMIT_WAIT"

            with m.State("COMMIT_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.d.sync += cd_err.err_code.eq(DeviceError.MEDIA)
                    with m.Else():
                        m.d.sync += [cd_err.err_code.eq(0), retire.eq(1)]
                        set_committed(batch_reg)
                    m.d.sync += cd_valid.eq(1)
                    m.next = "COMMIT_DONE"

            with m.State("COMMIT_DONE"):
                with m.If(self.commit_done.ready):
                    m.d.sync += cd_valid.eq(0)
                    m.next = "IDLE"

            with m.State("SNAP_HOLD"):                       # a snapshot copy ends first
                with m.If(~self.snap_busy):
                    m.next = "SB_READ"

            with m.State("SB_READ"):
                with m.If(rdr.free):
                    m.d.comb += [rdr.load.eq(1), rdr.addr.eq(sb_line), rdr.kind.eq(0)]
                    m.next = "SB_WAIT"

            with m.State("SB_WAIT"):
                with m.If(rsp_v):
                    with m.If(rsp.err):
                        m.next = "IDLE"                      # C unknown: not ready
                    with m.Elif((field(line, SB_FIELDS, "magic") != SB_MAGIC) |
                               (field(line, SB_FIELDS, "version") != SB_VERSION)):
                        m.next = "FMT1"
                    with m.Else():
                        m.d.comb += scan.start.eq(1)
                        set_committed(field(line, SB_FIELDS, "committed"))
                        m.d.sync += epoch.eq(field(line, SB_FIELDS, "recovery_epoch"))
                        m.next = "SCAN"

            with m.State("FMT1"):                            # bytes 8..63 := 0
                with m.If(wrr.free):
                    sb_write(((1 << LINE_BYTES) - 1) & ~0xFF, 0)
                    m.next = "FMT1_WAIT"

            with m.State("FMT1_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "FMT2"

            with m.State("FMT2"):                            # bytes 0..7 := magic, version
                with m.If(wrr.free):
                    sb_write(0xFF, sb_word0)
                    m.next = "FMT2_WAIT"

            with m.State("FMT2_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.next = "IDLE"
                    with m.Else():
                        set_committed(0)
                        m.d.sync += [epoch.eq(0), retire.eq(1), ready.eq(1)]
                        m.d.comb += self.mlp_load.eq(1)      # no slot (chosen slot 0)
                        m.next = "IDLE"

            with m.State("SCAN"):                            # pass 1 (LogScanner)
                m.d.comb += scan.active.eq(1)
                with m.If(scan.done):
                    m.d.comb += app.start.eq(1)
                    m.next = "APPLY"

            with m.State("APPLY"):                           # pass 2 (RecordApplier)
                m.d.comb += app.active.eq(1)
                with m.If(app.idle & rdr.idle & ~wrr.wr_req.valid & (wrr.outstanding == 0)):
                    with m.If(media_err | resp_err):
                        # a record may not have been rolled back (or a header not seen):
                        # stop before the epoch write; not ready, RECOVER again
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "EPOCH"

            with m.State("EPOCH"):                           # bytes 32..39 := E+1
                with m.If(wrr.free):
                    sb_write(0xFF << ep_off, (epoch + 1)[:64], hi=1)
                    m.next = "EPOCH_WAIT"

            with m.State("EPOCH_WAIT"):
                with m.If(wack):
                    with m.If(~wack_err):
                        m.d.sync += [epoch.eq((epoch + 1)[:64]), retire.eq(1)]
                        if self.snapshots:
                            m.d.comb += mlp.start.eq(1)
                            m.next = "MLP"
                        else:
                            m.d.sync += ready.eq(1)
                            m.d.comb += self.mlp_load.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.next = "IDLE"

            with m.State("MLP"):                             # slot choice (SlotChooser)
                with m.If(mlp.done):
                    m.d.sync += ready.eq(1)
                    m.d.comb += self.mlp_load.eq(1)
                    m.next = "IDLE"

        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        rec = Cat(fsm.ongoing(st) for st in rec_states).any()
        m.d.comb += [self.recovering.eq(rec),
                     self.rec_media.eq(rec & resp_err & ~media_err)]
        with m.If(rec):
            m.d.sync += self.cyc_recover.eq(self.cyc_recover + 1)
        with m.If(Cat(fsm.ongoing(st) for st in com_states).any()):
            m.d.sync += self.cyc_commit.eq(self.cyc_commit + 1)
        return m
