"""Persist engine: superblock format, COMMIT and undo-log recovery (docs/training.md section 6).

Ports
-----
- ``mem`` (device request port, requester side): every read (``RD_CUR``) and write uses id
  :data:`PERSIST_ID` (10). Reads: the superblock line and undo-log slot lines. Writes: the
  superblock (byte enables of the words written only) and table rows (full lines).
- ``recover`` (in, pulse): start recovery; ignored while ``busy``.
- ``commit`` (in stream ``{batch: 64}``): write ``committed = batch`` (one write of bytes 8..15 of
  the superblock line, ``be = 0xFF << 8``), wait for its ``wr_resp``; on success pulse ``retire``
  and set ``committed``. The sender checks ``batch == committed + 1`` (not checked here). Accepted
  only while idle.
- ``commit_done`` (out stream ``{err_code: 8}``): one per commit, after the write response:
  0, or ``DeviceError.MEDIA`` if the write answered an error (then ``committed`` is unchanged,
  no ``retire``, ``media_err`` set).
- ``epoch`` (out, 64): the device's copy of the superblock's ``recovery_epoch``: 0 after a
  format, E+1 after a recovery that read E; valid whenever ``ready`` (the undo logger writes it
  into record headers).
- ``committed`` (C), ``recovered_records`` (records applied by the last recovery), ``ready``
  (a recovery completed since reset; cleared when a recovery starts), ``recovering``, ``busy``,
  ``media_err`` (sticky until the next ``recover``), ``cyc_commit`` / ``cyc_recover`` (cycles spent
  in commits / recoveries since reset, wrapping), ``retire`` (one-cycle pulse: after a commit's
  write is acknowledged, and at the end of a recovery).

Recovery (section 6 steps 1-4)
------------------------------
1. Read the superblock. Fresh (magic or version wrong): write bytes 8..63 as zeros, wait for the
   response, write bytes 0..7 (magic, version), wait; C = 0, ``epoch`` = 0 (the zero write set
   ``recovery_epoch``; no epoch write); retire; ready.
2. Else C = ``committed``, E = ``recovery_epoch``. A header is *current* if ``magic ==
   LOG_MAGIC``, ``batch == C+1`` and ``epoch == E``. Pass 1: header reads of slots 0, 1, ...
   with up to ``reads`` in flight; q = the first slot whose header is not current (else
   ``log_slots``).
3. Pass 2: slots ``min(q + log_window, log_slots) - 1`` down to 0. Header reads run ahead (up to
   ``ring`` headers read or waiting for their data); a header that passes the checks (current,
   dim, 64 B alignment, row inside the table region) gets its ``dim/16`` data lines read
   into a ``buf_lines`` line buffer (reserved before the reads are issued); the CRC (data lines,
   then the whole header line with bytes 20..23 zero) is checked one cycle after the last
   data line; passing records are written to ``addr`` line by line. (The header's share of the
   CRC, ``crc32_next(0, header)``, is computed when the header arrives and kept in the ring;
   CRC-32 is linear, so the check adds ``crc32_next(state, 0)`` of the data lines to it.) Records are written strictly
   in descending slot order (one request stream, in-order responses), so for two records of one
   row the lower slot's (older) contents land last.
4. When every row write is acknowledged: write ``recovery_epoch = E+1`` (mod 2^64; one write of
   bytes 32..39 of the superblock line, ``be = 0xFF << 32``), wait for its response; then
   ``epoch`` = E+1, retire, (with ``snapshots``: choose the MLP slot, below), ready,
   ``recovered_records`` = records applied. Done also when no record was applied.

MLP slot choice (section 9; only with ``snapshots=True``, as in the device; reads only, id 10):
for slot A then slot B, read the header line; if ``magic == SNAP_MAGIC``, ``length`` <= the
capacity and ``epoch`` <= C, read its ``ceil(length/64)`` payload lines (pipelined, up to
``reads`` in flight) and check the CRC over them (bytes past ``length`` taken as 0) then the
header with its crc bytes zero (the header's share ``crc32_next(0, header)`` is kept, as in
pass 2). The valid slot with the larger epoch wins (A on a tie). A read error makes that slot
invalid (and sets ``media_err``). In the cycle ``ready`` is set, ``mlp_load`` pulses with
``mlp_slot`` (0 none, 1 A, 2 B) and ``mlp_epoch`` (0 if none); after a format too (slot 0,
epoch 0). ``snap_busy`` (in): a ``recover`` waits (busy, recovering) until it is 0 before
reading the superblock, so no snapshot copy runs during recovery (unconnected: no wait).

Media errors during recovery (``rd_resp.err`` / ``wr_resp.err``) set ``media_err``:
- superblock read or format write error: recovery stops there, ``ready`` stays 0 (C unknown;
  the host may retry ``recover``);
- ``recovery_epoch`` write error: recovery stops there, ``ready`` stays 0, no retire, ``epoch``
  keeps E (the superblock may still hold E: running with E would accept stale records of the
  cut attempt, running with E+1 would write records a later recovery ignores). The rollback
  writes have landed; a retried ``recover`` redoes them (same values) and the epoch write;
- pass 1 header read error: the slot does not end the scan (it is skipped, the scan continues),
  so a transient error inside the valid run cannot shorten the scan window;
- pass 2 header or data line read error: that slot is treated as invalid (not applied);
- table row write error: recovery still completes (``ready`` = 1), ``media_err`` reports it.

``rd_resp`` and ``wr_resp`` are always ready (every response has a place reserved before its
request is issued).
"""
from amaranth.hdl import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2, exact_log2

from ..config import LINE_BYTES, SUPPORTED_DIMS
from ..crc32 import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..encodings import (LOG_HDR_FIELDS, LOG_MAGIC, SB_FIELDS, SB_MAGIC,
                         SB_VERSION, SNAP_HDR_FIELDS, SNAP_MAGIC, DeviceError)
from ..reqport import RD_CUR, DeviceRequestSignature

__all__ = ["PERSIST_ID", "PersistEngine", "commit_layout", "commit_done_layout"]

PERSIST_ID = 10

commit_layout = data.StructLayout({"batch": 64})
commit_done_layout = data.StructLayout({"err_code": 8})


def _field(value, fields, name):
    """Bits of byte field ``name`` (from an encodings byte layout) of a line value."""
    for n, off, w in fields:
        if n == name:
            return value[8 * off:8 * (off + w)]
    raise KeyError(name)


def _pow2(v):
    return v >= 1 and v & (v - 1) == 0


class PersistEngine(wiring.Component):
    """See the module docstring. Sizing (powers of two): ``reads`` (default
    ``min(cfg.max_reads, 64)``): read requests in flight at most, so pass 1 scans about
    ``reads / read latency`` slots per cycle; ``ring`` (32): pass 2 headers in flight or waiting
    for their data reads; ``buf_lines`` (64, >= 8): pass 2 data line buffer, which bounds the
    record data in flight (about ``buf_lines / read latency`` lines per cycle); ``writes`` (64):
    row writes in flight. ``snapshots`` (False): choose the MLP slot at the end of a recovery
    (section 9; the device sets it; False is the engine of section 6 alone)."""

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
        mem = self.mem
        la_bits = cfg.addr_bits - 6
        n_slots = cfg.log_slots
        window = cfg.log_window
        sb_line = cfg.superblock_base // LINE_BYTES
        log_line = cfg.log_base // LINE_BYTES
        tbl_lo = cfg.table_base
        tbl_hi = cfg.table_base + cfg.table_size
        slot_w = max(1, ceil_log2(n_slots))

        def slot_line(slot):
            return (log_line + (slot << 3) + slot)[:la_bits]       # 9 lines per slot

        # ---- shared request registers ----------------------------------------------------------
        # read: one registered request; every loaded read pushes its kind (0 header / superblock,
        # 1 data line) into ``tags``; responses (in order, one id) pop it.
        tags = m.submodules.tags = fifo.SyncFIFO(width=1, depth=self.reads)
        rq_valid = Signal()
        rq_addr = Signal(la_bits)
        rd_load = Signal()
        rd_load_addr = Signal(la_bits)
        rd_load_kind = Signal()
        rq_free = (~rq_valid | mem.rd_req.ready) & tags.w_rdy
        m.d.comb += [
            mem.rd_req.valid.eq(rq_valid),
            mem.rd_req.payload.id.eq(PERSIST_ID),
            mem.rd_req.payload.op.eq(RD_CUR),
            mem.rd_req.payload.addr.eq(rq_addr),
            tags.w_en.eq(rd_load),
            tags.w_data.eq(rd_load_kind),
            mem.rd_resp.ready.eq(1),
            tags.r_en.eq(mem.rd_resp.valid),
        ]
        with m.If(rd_load):
            m.d.sync += [rq_valid.eq(1), rq_addr.eq(rd_load_addr)]
        with m.Elif(mem.rd_req.ready):
            m.d.sync += rq_valid.eq(0)
        rsp = mem.rd_resp.payload
        rsp_v = mem.rd_resp.valid
        rsp_kind = tags.r_data

        # write: one registered request; ``wr_out`` counts loaded writes not yet acknowledged.
        # Row lines come from the line buffer's read port (held while the write stalls).
        buf = m.submodules.buf = Memory(shape=8 * LINE_BYTES, depth=self.buf_lines, init=[])
        buf_w = buf.write_port()
        buf_r = buf.read_port()
        wv = Signal()
        w_addr = Signal(la_bits)
        w_be = Signal(LINE_BYTES)
        w_from_buf = Signal()
        w_data = Signal(128)           # bytes 0..15 of a superblock write ...
        w_hi = Signal()                # ... or w_data[:64] in bytes 32..39 (recovery_epoch)
        wr_out = Signal(range(self.writes + 1))
        w_free = ~wv | mem.wr_req.ready
        wl = Signal()                  # load a write (comb)
        wl_addr = Signal(la_bits)
        wl_be = Signal(LINE_BYTES)
        wl_buf = Signal()
        wl_data = Signal(128)
        wl_hi = Signal()
        m.d.comb += [
            mem.wr_req.valid.eq(wv),
            mem.wr_req.payload.id.eq(PERSIST_ID),
            mem.wr_req.payload.addr.eq(w_addr),
            mem.wr_req.payload.be.eq(w_be),
            mem.wr_req.payload.data.eq(Mux(w_from_buf, buf_r.data,
                                           Mux(w_hi, w_data[:64] << 256, w_data))),
            buf_r.en.eq(w_free),
            mem.wr_resp.ready.eq(1),
        ]
        with m.If(wl):
            m.d.sync += [wv.eq(1), w_addr.eq(wl_addr), w_be.eq(wl_be), w_from_buf.eq(wl_buf),
                         w_data.eq(wl_data), w_hi.eq(wl_hi)]
        with m.Elif(mem.wr_req.ready):
            m.d.sync += wv.eq(0)
        m.d.sync += wr_out.eq(wr_out + wl - mem.wr_resp.valid)
        wack = mem.wr_resp.valid
        wack_err = mem.wr_resp.payload.err

        # ---- registers ---------------------------------------------------------------------------
        committed = Signal(64)
        epoch = Signal(64)
        open_batch = Signal(64)
        ready = Signal()
        media_err = Signal()
        recovered = Signal(32)
        retire = Signal()
        cyc_commit = Signal(32)
        cyc_recover = Signal(32)
        batch_reg = Signal(64)
        cd_valid = Signal()
        cd_err = Signal(8)
        m.d.comb += [
            self.committed.eq(committed), self.epoch.eq(epoch), self.ready.eq(ready), self.media_err.eq(media_err),
            self.recovered_records.eq(recovered), self.retire.eq(retire),
            self.cyc_commit.eq(cyc_commit), self.cyc_recover.eq(cyc_recover),
            self.commit_done.valid.eq(cd_valid), self.commit_done.payload.err_code.eq(cd_err),
            open_batch.eq(committed + 1),
        ]
        m.d.sync += retire.eq(0)
        with m.If((rsp_v & rsp.err) | (wack & wack_err)):
            m.d.sync += media_err.eq(1)

        # pass 1
        s_issue = Signal(range(n_slots + 1))
        s_rsp = Signal(range(n_slots + 1))
        stop = Signal()
        q = Signal(range(n_slots + 1))
        # pass 2
        h_left = Signal(range(n_slots + 1))        # header reads to issue (next: slot h_left-1)
        hr_slot = Signal(slot_w)                   # slot of the next header response
        hdr_used = Signal(range(self.ring + 1))    # headers in flight + ring entries
        buf_free = Signal(range(self.buf_lines + 1), init=self.buf_lines)
        d_left = Signal(3)                         # data reads left in the current burst
        d_line = Signal(la_bits)
        ring_bits = 256 + 32 + slot_w              # header bytes 0..31, its CRC share, slot
        ring = m.submodules.ring = Memory(shape=ring_bits, depth=self.ring, init=[])
        ring_w = ring.write_port()
        ring_ri = ring.read_port(domain="comb")    # issuer
        ring_rd = ring.read_port(domain="comb")    # data processor
        rb = exact_log2(self.ring)
        wptr = Signal(rb + 1)                      # one wrap bit: full ring != empty ring
        iptr = Signal(rb + 1)
        dptr = Signal(rb + 1)
        m.d.comb += [ring_ri.addr.eq(iptr[:rb]), ring_rd.addr.eq(dptr[:rb])]
        bwptr = Signal(range(self.buf_lines))
        rptr = Signal(range(self.buf_lines))
        m.d.comb += [buf_w.addr.eq(bwptr), buf_w.data.eq(rsp.data), buf_r.addr.eq(rptr)]
        dk = Signal(3)                             # data line index within the record
        crc = Signal(32)
        derr = Signal()
        chk_valid = Signal()
        chk_crc = Signal(32)
        chk_hdr = Signal(256)
        chk_g = Signal(32)
        chk_err = Signal()
        jobs = m.submodules.jobs = fifo.SyncFIFO(width=la_bits + 4 + 1, depth=self.buf_lines)
        job_active = Signal()
        j_addr = Signal(la_bits)
        j_left = Signal(4)
        m.d.sync += chk_valid.eq(0)

        def dim_n(hdr):
            return _field(hdr, LOG_HDR_FIELDS, "dim")[4:8]       # dim/16 for a valid dim

        # ---- pass 2 (active only in APPLY; idle otherwise by construction) ---------------------
        in_apply = Signal()
        hdr_inc = Signal()
        hdr_dec = Signal()
        buf_take = Signal(4)
        buf_give = Signal(4)
        m.d.sync += [hdr_used.eq(hdr_used + hdr_inc - hdr_dec),
                     buf_free.eq(buf_free - buf_take + buf_give)]

        # issuer
        ent_i = ring_ri.data
        n_i = dim_n(ent_i[:256])
        with m.If(in_apply & rq_free):
            with m.If(d_left != 0):
                m.d.comb += [rd_load.eq(1), rd_load_addr.eq(d_line), rd_load_kind.eq(1)]
                m.d.sync += [d_line.eq(d_line + 1), d_left.eq(d_left - 1)]
            with m.Elif((iptr != wptr) & (buf_free >= n_i)):
                first = slot_line(ent_i[288:])
                m.d.comb += [rd_load.eq(1), rd_load_addr.eq(first + 1), rd_load_kind.eq(1),
                             buf_take.eq(n_i)]
                m.d.sync += [d_line.eq(first + 2), d_left.eq(n_i - 1), iptr.eq(iptr + 1)]
            with m.Elif((h_left != 0) & (hdr_used < self.ring)):
                m.d.comb += [rd_load.eq(1), rd_load_addr.eq(slot_line(h_left - 1)),
                             rd_load_kind.eq(0), hdr_inc.eq(1)]
                m.d.sync += h_left.eq(h_left - 1)

        # header responses
        line = rsp.data
        # one CRC network: data lines continue the record's CRC; a header line (crc bytes
        # zeroed) from state 0 gives its share, crc32_next(0, header), kept in the ring
        is_hdr = rsp_kind == 0
        crc_in = Cat(line[:160], Mux(is_hdr, 0, line[160:192]), line[192:])
        crc_st = Mux(is_hdr, 0, Mux(dk == 0, CRC32_INIT, crc))
        # MLP slot check (section 9): the same network, state = the slot's running CRC (0 for
        # its header), input = the header with crc bytes 4..7 zero, or a payload line with the
        # bytes past ``length`` zero
        in_mlp = Signal()
        mcrc = Signal(32)
        mrem = Signal(32)                          # payload bytes not yet received
        m_be = Signal(LINE_BYTES)
        m.d.comb += m_be.eq(Mux(mrem >= LINE_BYTES, Const(-1, LINE_BYTES),
                                (Const(1, LINE_BYTES + 1) << mrem[:6]) - 1))
        m_mask = Cat(*[m_be[i].replicate(8) for i in range(LINE_BYTES)])
        snap_crc_off = next(off for n, off, w in SNAP_HDR_FIELDS if n == "crc")
        assert snap_crc_off == 4
        # (signals, not expressions: the network reads its inputs once per output bit)
        net_st, net_in = Signal(32), Signal(8 * LINE_BYTES)
        m.d.comb += [
            net_st.eq(Mux(in_mlp, Mux(is_hdr, 0, mcrc), crc_st)),
            net_in.eq(Mux(in_mlp, Mux(is_hdr, Cat(line[:32], Const(0, 32), line[64:]),
                                      line & m_mask), crc_in)),
        ]
        crc_nx = Signal(32)
        m.d.comb += crc_nx.eq(crc32_next(net_st, net_in, LINE_BYTES))
        h_magic = _field(line, LOG_HDR_FIELDS, "magic")
        h_batch = _field(line, LOG_HDR_FIELDS, "batch")
        h_dim = _field(line, LOG_HDR_FIELDS, "dim")
        h_addr = _field(line, LOG_HDR_FIELDS, "addr")
        h_epoch = _field(line, LOG_HDR_FIELDS, "epoch")
        hdr_live = (h_magic == LOG_MAGIC) & (h_batch == open_batch) & (h_epoch == epoch)
        dim_ok = 0
        for d in SUPPORTED_DIMS:
            dim_ok = dim_ok | (h_dim == d)
        end = h_addr + (h_dim << 2)
        hdr_ok = ~rsp.err & hdr_live & dim_ok & (h_addr[:6] == 0) & (end <= tbl_hi)
        if tbl_lo > 0:                           # (a compare with 0 is a lint warning)
            hdr_ok = hdr_ok & (h_addr >= tbl_lo)
        with m.If(in_apply & rsp_v & (rsp_kind == 0)):
            m.d.sync += hr_slot.eq(hr_slot - 1)
            with m.If(hdr_ok):
                m.d.comb += [ring_w.en.eq(1), ring_w.addr.eq(wptr[:rb]),
                             ring_w.data.eq(Cat(line[:256], crc_nx, hr_slot))]
                m.d.sync += wptr.eq(wptr + 1)
            with m.Else():
                m.d.comb += hdr_dec.eq(1)

        # data responses: CRC and buffer
        ent_d = ring_rd.data[:256]
        n_d = dim_n(ent_d)
        err_nx = rsp.err | ((dk != 0) & derr)
        with m.If(in_apply & rsp_v & (rsp_kind == 1)):
            m.d.comb += buf_w.en.eq(1)
            m.d.sync += [bwptr.eq(bwptr + 1), crc.eq(crc_nx), derr.eq(err_nx)]
            with m.If(dk == n_d - 1):
                m.d.comb += hdr_dec.eq(1)
                m.d.sync += [dk.eq(0), dptr.eq(dptr + 1), chk_valid.eq(1), chk_crc.eq(crc_nx),
                             chk_hdr.eq(ent_d), chk_g.eq(ring_rd.data[256:288]),
                             chk_err.eq(err_nx)]
            with m.Else():
                m.d.sync += dk.eq(dk + 1)

        # CRC check -> write job (never full: jobs <= records holding buffer lines <= buf_lines)
        # crc32_next(chk_crc, header) = crc32_next(chk_crc, 0) ^ crc32_next(0, header)
        final = crc32_next(chk_crc, C(0, 8 * LINE_BYTES), LINE_BYTES) ^ chk_g ^ CRC32_XOROUT
        chk_ok = (final == _field(chk_hdr, LOG_HDR_FIELDS, "crc")) & ~chk_err
        chk_addr = _field(chk_hdr, LOG_HDR_FIELDS, "addr")[6:6 + la_bits]
        m.d.comb += [jobs.w_en.eq(chk_valid),
                     jobs.w_data.eq(Cat(chk_addr, dim_n(chk_hdr), chk_ok))]

        # writer: pop a job; valid -> write its lines in order; invalid -> free its lines
        jq_addr = jobs.r_data[:la_bits]
        jq_n = jobs.r_data[la_bits:la_bits + 4]
        jq_ok = jobs.r_data[la_bits + 4]
        with m.If(~job_active & jobs.r_rdy):
            m.d.comb += jobs.r_en.eq(1)
            with m.If(jq_ok):
                m.d.sync += [job_active.eq(1), j_addr.eq(jq_addr), j_left.eq(jq_n),
                             recovered.eq(recovered + 1)]
            with m.Else():
                m.d.comb += buf_give.eq(jq_n)
                m.d.sync += rptr.eq(rptr + jq_n)
        with m.If(job_active & w_free & (wr_out < self.writes)):
            m.d.comb += [wl.eq(1), wl_addr.eq(j_addr), wl_be.eq(Const(-1, LINE_BYTES)),
                         wl_buf.eq(1), buf_give.eq(1)]
            m.d.sync += [j_addr.eq(j_addr + 1), j_left.eq(j_left - 1), rptr.eq(rptr + 1)]
            with m.If(j_left == 1):
                m.d.sync += job_active.eq(0)

        apply_idle = ((h_left == 0) & ~rq_valid & ~tags.r_rdy & (hdr_used == 0) & ~chk_valid
                      & ~jobs.r_rdy & ~job_active & ~wv & (wr_out == 0))

        # ---- control -----------------------------------------------------------------------------
        sb_word0 = SB_MAGIC | (SB_VERSION << 32)
        sb_magic = _field(line, SB_FIELDS, "magic")
        sb_version = _field(line, SB_FIELDS, "version")
        sb_committed = _field(line, SB_FIELDS, "committed")
        sb_epoch = _field(line, SB_FIELDS, "recovery_epoch")

        # MLP slot choice registers (section 9)
        snap_cap = (cfg.slots_size // 2) // LINE_BYTES * LINE_BYTES - LINE_BYTES
        slot_lines = (cfg.slots_size // 2) // LINE_BYTES
        slots_line = cfg.slots_base // LINE_BYTES
        ms = Signal()                              # slot being checked
        ms_line = Signal(la_bits)                  # its header line
        m_crc = Signal(32)                         # header: crc field
        m_g = Signal(32)                           # header: crc32_next(0, header crc-zeroed)
        m_ep = Signal(64)
        m_err = Signal()
        nd = Signal(32)                            # payload lines
        d_iss = Signal(32)
        d_rcv = Signal(32)
        ok = [Signal(name=f"mlp_ok{i}") for i in range(2)]
        ep = [Signal(64, name=f"mlp_ep{i}") for i in range(2)]
        ch_slot = Signal(2)
        ch_epoch = Signal(64)
        m.d.comb += [self.mlp_slot.eq(ch_slot), self.mlp_epoch.eq(ch_epoch)]
        s_magic = _field(line, SNAP_HDR_FIELDS, "magic")
        s_len = _field(line, SNAP_HDR_FIELDS, "length")
        s_ep = _field(line, SNAP_HDR_FIELDS, "epoch")
        len_ok = (s_len <= snap_cap) if snap_cap < (1 << 32) - 1 else 1
        s_plausible = ~rsp.err & (s_magic == SNAP_MAGIC) & len_ok & (s_ep <= committed)
        m_final = crc32_next(mcrc, C(0, 8 * LINE_BYTES), LINE_BYTES) ^ m_g ^ CRC32_XOROUT
        with m.If(in_mlp & rsp_v & (rsp_kind == 1)):
            m.d.sync += [mcrc.eq(crc_nx), mrem.eq(mrem - LINE_BYTES), d_rcv.eq(d_rcv + 1)]
            with m.If(rsp.err):
                m.d.sync += m_err.eq(1)
        ep_off = next(off for n, off, w in SB_FIELDS if n == "recovery_epoch")
        assert ep_off == 32, "w_hi places the epoch word at bytes 32..39"
        rec_states = ("SNAP_HOLD", "SB_READ", "SB_WAIT", "FMT1", "FMT1_WAIT", "FMT2", "FMT2_WAIT",
                      "SCAN", "APPLY", "EPOCH", "EPOCH_WAIT")
        if self.snapshots:
            rec_states += ("MLP_HDR", "MLP_HDR_WAIT", "MLP_DATA", "MLP_CHK", "MLP_NEXT",
                           "MLP_DONE")
        com_states = ("COMMIT_WAIT", "COMMIT_DONE")

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += self.commit.ready.eq(~self.recover)
                with m.If(self.recover):
                    m.d.sync += [ready.eq(0), media_err.eq(0), recovered.eq(0),
                                 ch_slot.eq(0), ch_epoch.eq(0)]
                    with m.If(self.snap_busy):
                        m.next = "SNAP_HOLD"
                    with m.Else():
                        m.next = "SB_READ"
                with m.Elif(self.commit.valid):
                    m.d.comb += [wl.eq(1), wl_addr.eq(sb_line), wl_be.eq(0xFF << 8),
                                 wl_data.eq(self.commit.payload.batch << 64)]
                    m.d.sync += batch_reg.eq(self.commit.payload.batch)
                    m.next = "COMMIT_WAIT"

            with m.State("COMMIT_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.d.sync += cd_err.eq(DeviceError.MEDIA)
                    with m.Else():
                        m.d.sync += [cd_err.eq(0), committed.eq(batch_reg), retire.eq(1)]
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
                with m.If(rq_free):
                    m.d.comb += [rd_load.eq(1), rd_load_addr.eq(sb_line), rd_load_kind.eq(0)]
                    m.next = "SB_WAIT"

            with m.State("SB_WAIT"):
                with m.If(rsp_v):
                    with m.If(rsp.err):
                        m.next = "IDLE"                      # C unknown: not ready
                    with m.Elif((sb_magic != SB_MAGIC) | (sb_version != SB_VERSION)):
                        m.next = "FMT1"
                    with m.Else():
                        m.d.sync += [committed.eq(sb_committed), epoch.eq(sb_epoch),
                                     s_issue.eq(0), s_rsp.eq(0),
                                     stop.eq(0), q.eq(n_slots)]
                        m.next = "SCAN"

            with m.State("FMT1"):                            # bytes 8..63 := 0
                with m.If(w_free):
                    m.d.comb += [wl.eq(1), wl_addr.eq(sb_line),
                                 wl_be.eq(((1 << LINE_BYTES) - 1) & ~0xFF), wl_data.eq(0)]
                    m.next = "FMT1_WAIT"

            with m.State("FMT1_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "FMT2"

            with m.State("FMT2"):                            # bytes 0..7 := magic, version
                with m.If(w_free):
                    m.d.comb += [wl.eq(1), wl_addr.eq(sb_line), wl_be.eq(0xFF),
                                 wl_data.eq(sb_word0)]
                    m.next = "FMT2_WAIT"

            with m.State("FMT2_WAIT"):
                with m.If(wack):
                    with m.If(wack_err):
                        m.next = "IDLE"
                    with m.Else():
                        m.d.sync += [committed.eq(0), epoch.eq(0), retire.eq(1), ready.eq(1)]
                        m.d.comb += self.mlp_load.eq(1)      # no slot (ch_* are 0)
                        m.next = "IDLE"

            with m.State("SCAN"):
                with m.If(~stop & (s_issue != n_slots) & rq_free):
                    m.d.comb += [rd_load.eq(1), rd_load_addr.eq(slot_line(s_issue)),
                                 rd_load_kind.eq(0)]
                    m.d.sync += s_issue.eq(s_issue + 1)
                with m.If(rsp_v):
                    m.d.sync += s_rsp.eq(s_rsp + 1)
                    with m.If(~stop & ~rsp.err & ~hdr_live):
                        m.d.sync += [stop.eq(1), q.eq(s_rsp)]
                with m.If((stop | (s_issue == n_slots)) & ~rq_valid & ~tags.r_rdy):
                    top = Mux(q + window > n_slots, n_slots, q + window)
                    m.d.sync += [h_left.eq(top), hr_slot.eq(top - 1), d_left.eq(0), dk.eq(0),
                                 iptr.eq(wptr), dptr.eq(wptr), rptr.eq(bwptr)]
                    m.next = "APPLY"

            with m.State("APPLY"):
                m.d.comb += in_apply.eq(1)
                with m.If(apply_idle):
                    m.next = "EPOCH"

            with m.State("EPOCH"):                           # bytes 32..39 := E+1
                with m.If(w_free):
                    m.d.comb += [wl.eq(1), wl_addr.eq(sb_line), wl_be.eq(0xFF << ep_off),
                                 wl_hi.eq(1), wl_data.eq((epoch + 1)[:64])]
                    m.next = "EPOCH_WAIT"

            with m.State("EPOCH_WAIT"):
                with m.If(wack):
                    with m.If(~wack_err):
                        m.d.sync += [epoch.eq((epoch + 1)[:64]), retire.eq(1)]
                        if self.snapshots:
                            m.d.sync += [ms.eq(0), ms_line.eq(slots_line)]
                            m.next = "MLP_HDR"
                        else:
                            m.d.sync += ready.eq(1)
                            m.d.comb += self.mlp_load.eq(1)
                            m.next = "IDLE"
                    with m.Else():
                        m.next = "IDLE"

            # ---- MLP slot choice (section 9): slot A, then slot B ---------------------------
            with m.State("MLP_HDR"):
                m.d.comb += in_mlp.eq(1)
                with m.If(rq_free):
                    m.d.comb += [rd_load.eq(1), rd_load_addr.eq(ms_line), rd_load_kind.eq(0)]
                    m.next = "MLP_HDR_WAIT"

            with m.State("MLP_HDR_WAIT"):
                m.d.comb += in_mlp.eq(1)
                with m.If(rsp_v):
                    m.d.sync += [m_crc.eq(_field(line, SNAP_HDR_FIELDS, "crc")), m_g.eq(crc_nx),
                                 m_ep.eq(s_ep), m_err.eq(0), mcrc.eq(CRC32_INIT),
                                 mrem.eq(s_len), nd.eq((s_len + 63) >> 6), d_iss.eq(0),
                                 d_rcv.eq(0)]
                    with m.If(s_plausible):
                        m.next = "MLP_DATA"
                    with m.Else():
                        with m.If(ms):
                            m.d.sync += ok[1].eq(0)
                        with m.Else():
                            m.d.sync += ok[0].eq(0)
                        m.next = "MLP_NEXT"

            with m.State("MLP_DATA"):
                m.d.comb += in_mlp.eq(1)
                with m.If((d_iss != nd) & rq_free):
                    m.d.comb += [rd_load.eq(1), rd_load_addr.eq(ms_line + 1 + d_iss),
                                 rd_load_kind.eq(1)]
                    m.d.sync += d_iss.eq(d_iss + 1)
                with m.If((d_rcv == nd) & ~rq_valid & ~tags.r_rdy):
                    m.next = "MLP_CHK"

            with m.State("MLP_CHK"):
                good = (m_final == m_crc) & ~m_err
                with m.If(ms):
                    m.d.sync += [ok[1].eq(good), ep[1].eq(m_ep)]
                with m.Else():
                    m.d.sync += [ok[0].eq(good), ep[0].eq(m_ep)]
                m.next = "MLP_NEXT"

            with m.State("MLP_NEXT"):
                with m.If(~ms):
                    m.d.sync += [ms.eq(1), ms_line.eq(slots_line + slot_lines)]
                    m.next = "MLP_HDR"
                with m.Else():
                    with m.If(ok[1] & (~ok[0] | (ep[1] > ep[0]))):
                        m.d.sync += [ch_slot.eq(2), ch_epoch.eq(ep[1])]
                    with m.Elif(ok[0]):
                        m.d.sync += [ch_slot.eq(1), ch_epoch.eq(ep[0])]
                    m.next = "MLP_DONE"

            with m.State("MLP_DONE"):
                m.d.sync += ready.eq(1)
                m.d.comb += self.mlp_load.eq(1)
                m.next = "IDLE"

        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        rec = 0
        for st in rec_states:
            rec = rec | fsm.ongoing(st)
        com = 0
        for st in com_states:
            com = com | fsm.ongoing(st)
        m.d.comb += self.recovering.eq(rec)
        with m.If(rec):
            m.d.sync += cyc_recover.eq(cyc_recover + 1)
        with m.If(com):
            m.d.sync += cyc_commit.eq(cyc_commit + 1)
        return m
