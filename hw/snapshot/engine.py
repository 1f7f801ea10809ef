"""Snapshot engine: the background copy of an MLP snapshot (docs/training.md section 9).

Ports (A = ``cfg.addr_bits``)
-----------------------------
- ``mem`` (device request port, requester side), id :data:`SNAP_ID` (11) for everything:
  source reads (``RD_CUR``, full lines), payload and header writes into the slot, the 8-byte
  superblock ``mlp_slot`` write (byte enables 16..23).
- ``start`` (in stream :func:`start_layout`: ``epoch`` 64, ``src`` A (any byte address),
  ``length`` 32): accepted only while idle (``ready`` = not ``busy``). The sender has made the
  section 9 checks (epoch, range, ``length`` <= :func:`snap_capacity`); none is repeated here.
  On acceptance: ``accepted`` := ``epoch``, ``busy`` := 1, the slot is ``1 - active`` (slot A
  if none is active).
- ``busy`` (out): a copy is in flight (STATUS.SNAP_BUSY). ``accepted`` (out 64): A, the epoch
  of the last accepted snapshot. ``mlp_epoch`` (out 64): P, the epoch of the last completed
  (or recovered) snapshot; ``mlp_slot`` (out 2): 0 none, 1 A, 2 B. On success ``busy`` falls in
  the same cycle as ``mlp_epoch``/``mlp_slot``/``active`` change, so a waiter that sees
  ``busy`` = 0 sees the new values.
- ``load`` (in pulse, only while idle) with ``load_slot`` (2) and ``load_epoch`` (64): state
  chosen by recovery: ``mlp_slot`` := ``load_slot``, ``mlp_epoch`` := ``accepted`` :=
  ``load_epoch``, ``active`` := ``load_slot`` - 1 (none when 0).
- ``err`` (out pulse) with ``err_value`` (out 64, the snapshot's epoch): the first media error
  (``rd_resp.err`` or ``wr_resp.err``) of a copy. The copy then stops: no further request is
  loaded (a write already presented on ``wr_req`` stays valid until taken, as the stream rules
  require), outstanding responses are drained, then ``accepted`` := ``mlp_epoch`` and ``busy``
  falls; ``active``/``mlp_*`` are unchanged.

Copy
----
With ``off = src % 64``, ``n = ceil(length/64)`` payload lines and ``ceil((off+length)/64)``
source lines (0 for ``length`` 0): source lines are read in order with up to ``depth`` reads
issued and not yet consumed (every read has a place in the line FIFO before it is issued, so
``rd_resp`` is always ready). Payload line ``j`` = bytes ``off..off+63`` of ``Cat(L[j],
L[j+1])`` (``L[nsrc]`` taken as 0), with bytes ``>= length`` set to 0; it is written to line
``slot + 1 + j`` with byte enables of payload bytes ``< length`` only; at most ``max_writes``
writes unacknowledged. The CRC (one 64-byte network) runs over each payload line as its write
is taken. When every payload write is acknowledged the header line (``SNAP_MAGIC``, crc, epoch,
length) is written with all byte enables; after its acknowledgement the superblock word; after
that one the state changes as above. About one payload line per cycle when the port allows.
"""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig, LINE_BYTES
from ..counting import step
from ..crc32 import CRC32_INIT, CRC32_XOROUT, crc32_next
from ..encodings import SB_FIELDS, SNAP_HDR_FIELDS, SNAP_MAGIC
from ..reqport import RD_CUR, DeviceRequestSignature

__all__ = ["SNAP_ID", "SnapshotEngine", "start_layout", "snap_slot_bytes", "snap_capacity"]

SNAP_ID = 11
LINE_BITS = 8 * LINE_BYTES


def snap_slot_bytes(cfg):
    """Bytes of one slot: ``(slots_size // 2) // 64 * 64`` (section 9)."""
    return (cfg.slots_size // 2) // LINE_BYTES * LINE_BYTES


def snap_capacity(cfg):
    """Largest payload of a slot: slot bytes minus the header line."""
    return snap_slot_bytes(cfg) - LINE_BYTES


def start_layout(addr_bits):
    return data.StructLayout({"epoch": 64, "src": addr_bits, "length": 32})


def _field_off(fields, name):
    for n, off, w in fields:
        if n == name:
            return off, w
    raise KeyError(name)


def _pow2(v):
    return v >= 2 and v & (v - 1) == 0


def byte_mask_bits(be):
    """512-bit mask with byte ``i`` all ones where ``be[i]``."""
    return Cat(*[be[i].replicate(8) for i in range(LINE_BYTES)])


def byte_shift(m, v, off):
    """``v`` (two lines) shifted right by ``off`` bytes, one line wide: six stages of 2:1 muxes
    (32, 16, ..., 1 bytes), each only as wide as the later stages need."""
    for b in reversed(range(len(off))):
        step = 8 << b
        width = LINE_BITS + 8 * ((1 << b) - 1)
        stage = Signal(width, name=f"shift{1 << b}")
        m.d.comb += stage.eq(Mux(off[b], v[step:step + width], v[:width]))
        v = stage
    return v


class SnapshotEngine(wiring.Component):
    """The background copy of an MLP snapshot (docs/training.md section 9; copy, ordering and errors
    in the module docstring).

    Parameters
    ----------
    cfg : DeviceConfig
        ``addr_bits``, slots region, ``max_reads``, ``max_writes``.
    depth : int, optional
        Source reads issued and not yet consumed (the line FIFO's depth; a power of two, default
        ``min(cfg.max_reads, 32)``).

    Members
    -------
    mem : Out(DeviceRequestSignature(A))
        Id :data:`SNAP_ID` (11) for everything.
    start : In(stream.Signature(start_layout(A)))
        ``epoch``, ``src``, ``length``; accepted only while idle.
    busy : Out(1)
        A copy is in flight (STATUS.SNAP_BUSY).
    accepted : Out(64)
        A, the epoch of the last accepted snapshot.
    mlp_epoch : Out(64), mlp_slot : Out(2)
        P, the epoch of the last completed (or recovered) snapshot, and its slot (0 none, 1 A,
        2 B); they change in the cycle ``busy`` falls.
    load : In(1), load_slot : In(2), load_epoch : In(64)
        Pulse, only while idle: the state chosen by recovery.
    err : Out(1), err_value : Out(64)
        Pulse: the first media error of a copy (the snapshot's epoch); the copy then stops.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    ValueError
        If ``depth`` is not a power of two >= 2 or the slots region holds no slot header.
    """

    def __init__(self, cfg: DeviceConfig, *, depth=None):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        self.depth = depth if depth is not None else min(cfg.max_reads, 32)
        if not _pow2(self.depth):
            raise ValueError(f"SnapshotEngine: depth must be a power of two >= 2, "
                             f"got {self.depth!r}")
        if snap_capacity(cfg) < 0:
            raise ValueError("SnapshotEngine: the slots region holds no slot header")
        ab = cfg.addr_bits
        super().__init__({
            "mem": Out(DeviceRequestSignature(ab)),
            "start": In(stream.Signature(start_layout(ab))),
            "busy": Out(1),
            "accepted": Out(64),
            "mlp_epoch": Out(64),
            "mlp_slot": Out(2),
            "load": In(1),
            "load_slot": In(2),
            "load_epoch": In(64),
            "err": Out(1),
            "err_value": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        mem = self.mem
        la = cfg.addr_bits - 6
        depth = self.depth
        slot_lines = snap_slot_bytes(cfg) // LINE_BYTES
        slots_line = cfg.slots_base // LINE_BYTES
        sb_line = cfg.superblock_base // LINE_BYTES
        flip_off, flip_w = _field_off(SB_FIELDS, "mlp_slot")
        max_wr = cfg.max_writes

        # ---- state ---------------------------------------------------------------------------
        epoch = Signal(64)
        length = Signal(32)
        off = Signal(6)
        src_line = Signal(la)
        slot = Signal()
        n_src = Signal(32)
        n_pay = Signal(32)
        last_be = Signal(LINE_BYTES)
        base_line = Signal(la)                   # the slot's header line
        active_valid = Signal()
        active = Signal()
        acc = Signal(64)                         # A
        done_epoch = Signal(64)                  # P
        mslot = Signal(2)
        failed = Signal()
        m.d.comb += [self.accepted.eq(acc), self.mlp_epoch.eq(done_epoch),
                     self.mlp_slot.eq(mslot), self.err_value.eq(epoch)]

        # ---- read side: one registered request; ``held`` = reads loaded, not yet popped -------
        lines = m.submodules.lines = fifo.SyncFIFOBuffered(width=LINE_BITS, depth=depth)
        rq_valid = Signal()
        rq_addr = Signal(la)
        rd_issued = Signal(32)
        held = Signal(range(depth + 1))
        rd_load = Signal()
        pop = Signal()
        # (the line FIFO is pushed by every response, always ready, and popped by the copy's own
        # schedule (``pop``): not a stream connection)
        m.d.comb += [mem.rd_req.valid.eq(rq_valid), mem.rd_req.payload.id.eq(SNAP_ID),
                     mem.rd_req.payload.op.eq(RD_CUR), mem.rd_req.payload.addr.eq(rq_addr),
                     mem.rd_resp.ready.eq(1),
                     lines.w_en.eq(mem.rd_resp.valid), lines.w_data.eq(mem.rd_resp.payload.data),
                     lines.r_en.eq(pop)]
        with m.If(rd_load):
            m.d.sync += [rq_valid.eq(1), rq_addr.eq(src_line + rd_issued),
                         rd_issued.eq(rd_issued + 1)]
        with m.Elif(mem.rd_req.ready):
            m.d.sync += rq_valid.eq(0)
        step(m, held, up=rd_load, down=pop)
        rq_free = (~rq_valid | mem.rd_req.ready) & (held != depth)

        # ---- write side: one registered request; ``wr_out`` = loaded, not acknowledged -------
        wv = Signal()
        w_addr = Signal(la)
        w_be = Signal(LINE_BYTES)
        w_data = Signal(LINE_BITS)
        w_pay = Signal()                         # the registered write is a payload line
        wr_out = Signal(range(max_wr + 1))
        wl = Signal()
        wl_addr = Signal(la)
        wl_be = Signal(LINE_BYTES)
        wl_data = Signal(LINE_BITS)
        wl_pay = Signal()
        w_free = (~wv | mem.wr_req.ready) & (wr_out != max_wr)
        m.d.comb += [mem.wr_req.valid.eq(wv), mem.wr_req.payload.id.eq(SNAP_ID),
                     mem.wr_req.payload.addr.eq(w_addr), mem.wr_req.payload.be.eq(w_be),
                     mem.wr_req.payload.data.eq(w_data), mem.wr_resp.ready.eq(1)]
        with m.If(wl):
            m.d.sync += [wv.eq(1), w_addr.eq(wl_addr), w_be.eq(wl_be), w_data.eq(wl_data),
                         w_pay.eq(wl_pay)]
        with m.Elif(mem.wr_req.ready):
            m.d.sync += wv.eq(0)
        step(m, wr_out, up=wl, down=mem.wr_resp.valid)
        wack = mem.wr_resp.valid

        # ---- media errors ----------------------------------------------------------------------
        detect = ((mem.rd_resp.valid & mem.rd_resp.payload.err) |
                  (mem.wr_resp.valid & mem.wr_resp.payload.err))
        stop = failed | detect
        with m.If(detect):
            m.d.sync += failed.eq(1)
        m.d.comb += self.err.eq(detect & ~failed)

        # ---- CRC: one network, payload lines as their writes are taken, then the header --------
        crc = Signal(32)
        in_hdr = Signal()
        hdr_zero = Signal(LINE_BITS)             # header line with its crc bytes zero
        for name, o, w in SNAP_HDR_FIELDS:
            val = {"magic": SNAP_MAGIC, "crc": 0, "epoch": epoch, "length": length}[name]
            m.d.comb += hdr_zero[8 * o:8 * (o + w)].eq(val)
        # the network's input goes through a mux (no constant bits reach the XOR reductions;
        # see the Verilator note in hw/undolog/logger.py)
        crc_in = Signal(LINE_BITS)
        m.d.comb += crc_in.eq(Mux(in_hdr, hdr_zero, w_data))
        crc_nx = Signal(32)
        m.d.comb += crc_nx.eq(crc32_next(m, crc, crc_in, LINE_BYTES))
        with m.If(wv & mem.wr_req.ready & w_pay):
            m.d.sync += crc.eq(crc_nx)
        crc_o, crc_w = _field_off(SNAP_HDR_FIELDS, "crc")
        hdr_line = Signal(LINE_BITS)
        m.d.comb += hdr_line.eq(hdr_zero | ((crc_nx ^ CRC32_XOROUT) << (8 * crc_o)))

        # ---- realigner: pops source lines in order, emits payload lines ------------------------
        k = Signal(32)                           # source lines popped
        j = Signal(32)                           # payload lines emitted
        prev = Signal(LINE_BITS)
        in_copy = Signal()
        emit = Signal()
        hi = Signal(LINE_BITS)
        aligned = Signal(LINE_BITS)
        m.d.comb += aligned.eq(byte_shift(m, Cat(prev, hi), off))
        is_last = j == n_pay - 1
        be = Signal(LINE_BYTES)
        m.d.comb += be.eq(Mux(is_last, last_be, Const(-1, LINE_BYTES)))
        with m.If(in_copy & ~stop):
            with m.If(lines.r_rdy & ((k == 0) | w_free)):
                m.d.comb += [pop.eq(1), hi.eq(lines.r_data), emit.eq(k != 0)]
                m.d.sync += [k.eq(k + 1), prev.eq(lines.r_data)]
            with m.Elif((k == n_src) & (j != n_pay) & w_free):
                m.d.comb += [emit.eq(1), hi.eq(0)]
        with m.If(emit):
            m.d.comb += [wl.eq(1), wl_addr.eq(base_line + 1 + j), wl_be.eq(be),
                         wl_data.eq(aligned & byte_mask_bits(be)), wl_pay.eq(1)]
            m.d.sync += j.eq(j + 1)
        with m.If(in_copy & ~stop & (rd_issued != n_src) & rq_free):
            m.d.comb += rd_load.eq(1)

        # ---- control ---------------------------------------------------------------------------
        st = self.start.payload
        s_off = st.src[:6]
        s_len = st.length
        with m.FSM(name="snap") as fsm:
            with m.State("IDLE"):
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    new_slot = Mux(active_valid, ~active, 0)
                    rem = s_len[:6]
                    m.d.sync += [
                        epoch.eq(st.epoch), length.eq(s_len), off.eq(s_off),
                        src_line.eq(st.src[6:]), slot.eq(new_slot),
                        base_line.eq(Mux(new_slot, slots_line + slot_lines, slots_line)),
                        n_src.eq(Mux(s_len == 0, 0, (s_off + s_len + 63) >> 6)),
                        n_pay.eq((s_len + 63) >> 6),
                        last_be.eq(Mux(rem == 0, Const(-1, LINE_BYTES),
                                       (Const(1, LINE_BYTES + 1) << rem) - 1)),
                        acc.eq(st.epoch), failed.eq(0), k.eq(0), j.eq(0), rd_issued.eq(0),
                        crc.eq(CRC32_INIT)]
                    m.next = "COPY"
                with m.Elif(self.load):
                    m.d.sync += [mslot.eq(self.load_slot), done_epoch.eq(self.load_epoch),
                                 acc.eq(self.load_epoch), active_valid.eq(self.load_slot != 0),
                                 active.eq(self.load_slot == 2)]
            with m.State("COPY"):
                m.d.comb += in_copy.eq(1)
                with m.If(stop):
                    m.next = "DRAIN"
                with m.Elif((j == n_pay) & ~wv & (wr_out == 0)):
                    m.next = "HDR"
            with m.State("HDR"):
                m.d.comb += in_hdr.eq(1)
                with m.If(failed):
                    m.next = "DRAIN"
                with m.Elif(w_free):
                    m.d.comb += [wl.eq(1), wl_addr.eq(base_line), wl_be.eq(Const(-1, LINE_BYTES)),
                                 wl_data.eq(hdr_line)]
                    m.next = "HDR_WAIT"
            with m.State("HDR_WAIT"):
                with m.If(wack):
                    with m.If(mem.wr_resp.payload.err):
                        m.next = "DRAIN"
                    with m.Else():
                        m.next = "FLIP"
            with m.State("FLIP"):
                with m.If(w_free):
                    m.d.comb += [wl.eq(1), wl_addr.eq(sb_line),
                                 wl_be.eq(((1 << flip_w) - 1) << flip_off),
                                 wl_data.eq((slot + 1) << (8 * flip_off))]
                    m.next = "FLIP_WAIT"
            with m.State("FLIP_WAIT"):
                with m.If(wack):
                    with m.If(mem.wr_resp.payload.err):
                        m.next = "DRAIN"
                    with m.Else():
                        m.d.sync += [done_epoch.eq(epoch), mslot.eq(slot + 1), active.eq(slot),
                                     active_valid.eq(1)]
                        m.next = "IDLE"
            with m.State("DRAIN"):
                m.d.comb += pop.eq(lines.r_rdy)
                with m.If((held == 0) & ~rq_valid & ~wv & (wr_out == 0)):
                    m.d.sync += acc.eq(done_epoch)
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
