"""GatherReduce: the LOOKUP engine (gather rows, sum-pool each bag, write pooled rows).

Ports: ``cmd`` (in, one LOOKUP command, layout ``cmd_layout``), ``cpl`` (out, one completion per
command, layout ``cpl_layout``), ``mem`` (device request port; ids 0 rows and output writes,
1 offsets, 2 indices). Semantics, checks and error reporting: docs/lookup.md. One command at a
time; ``cmd`` is accepted only when the previous completion has been taken.

Pipeline: offsets reader -> walker (checks offsets, opens the index range) -> sequencer (checks
indices, row items) -> row issuer (line reads, tags into the in-flight FIFO of ``max_reads``
entries) -> pool (exact sums, saturate, out FIFO) -> line writes. The engine completes only when
every read it issued has returned and every write it issued is acknowledged (persistent), so
nothing of a command is in flight after its completion, even after an error.

Undo-log tee (docs/training.md section 5): ``log`` In(1) and ``table_id`` In(16) are sampled
with ``cmd``. With ``log`` set, every row item the issuer reads gives one ``log_rows`` entry
(``log_row_layout``: table, row, byte address, dim_log), in issue order, and every row-read
response line is forked to both the pool and ``log_lines`` (``log_line_layout``; both must take
it, through a small FIFO on the ``log_lines`` side), with the line's media error (``err``) so
the logger never logs a failed read as valid. The command completes only once every
``log_rows`` entry and every ``log_lines`` line has been taken (so the logger has seen the whole
LOOKUP); the logger's own writes are not waited for. With ``log`` low both streams stay idle.

A media error on any read or write of the command completes it with ``MEDIA`` (``err_value``
and ``err_bag`` 0), also when a check failed as well: the check may have seen untrusted data.
"""
from amaranth.hdl import Cat, Module, ResetInserter, Shape, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..counting import step
from ..encodings import LookupErrorCode
from ..port_mux import RequestPortMux
from ..cmd_checks import command_checks
from ..reqport import DeviceRequestSignature
from ..undolog.layouts import log_line_layout, log_row_layout
from ..word_reader import WordReader
from .issuer import RowIssuer
from .layouts import bag_layout, cmd_layout, cpl_layout, tag_layout
from .pool import PoolAccumulator, out_layout
from .sequencer import BagSequencer
from .walker import OffsetsWalker

__all__ = ["GatherReduce"]

ID_ROWS, ID_OFFSETS, ID_INDICES = 0, 1, 2
# A buffered FIFO registers r_rdy, r_data and w_rdy, so it cuts valid and ready paths; depth 4
# (not 2) so it still passes one entry per cycle.
SLICE_DEPTH = 4


def register_slice(m, name, src, dst, *, reset=None):
    """Join stream ``src`` to stream ``dst`` (same payload shape) through a depth-SLICE_DEPTH
    buffered FIFO, optionally reset by ``reset``; returns the FIFO (for its ``level``)."""
    q = fifo.SyncFIFOBuffered(width=Shape.cast(src.payload.shape()).width, depth=SLICE_DEPTH)
    if reset is not None:
        q = ResetInserter(reset)(q)
    m.submodules[name] = q
    wiring.connect(m, src, q.w_stream)
    out = q.r_stream          # (dst may be a sub-component's port or our own: no connect())
    m.d.comb += [dst.valid.eq(out.valid), dst.payload.eq(out.payload), out.ready.eq(dst.ready)]
    return q


class GatherReduce(wiring.Component):
    """The LOOKUP engine: gather rows, sum-pool each bag, write pooled rows (see the module
    docstring for the pipeline, semantics and the undo-log tee).

    One command at a time; the engine completes only when every read it issued has returned and
    every write it issued is acknowledged (persistent), so nothing of a command is in flight after
    its completion, even after an error.

    Parameters
    ----------
    cfg : DeviceConfig
        Address width, staging region, ``max_reads``, ``max_writes``, ``max_bag``, ``acc_bits``.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout(A)))
        One LOOKUP; accepted only when the previous completion has been taken.
    cpl : Out(stream.Signature(cpl_layout(A)))
        One completion per command (docs/lookup.md).
    mem : Out(DeviceRequestSignature(A))
        Ids 0 rows and output writes, 1 offsets, 2 indices.
    busy : Out(1)
        A command is being executed.
    log : In(1), table_id : In(16)
        Undo-log tee: sampled with ``cmd``.
    log_rows : Out(stream.Signature(log_row_layout(A)))
        With ``log``: one entry per row item read, in issue order.
    log_lines : Out(stream.Signature(log_line_layout))
        With ``log``: every row-read response line (a fork with the pool). The command completes
        only once every entry and line has been taken.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self._cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(ab))),
            "cpl": Out(stream.Signature(cpl_layout(ab))),
            "mem": Out(DeviceRequestSignature(ab)),
            "busy": Out(1),
            "log": In(1),
            "table_id": In(16),
            "log_rows": Out(stream.Signature(log_row_layout(ab))),
            "log_lines": Out(stream.Signature(log_line_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ab = cfg.addr_bits
        s_end = cfg.staging_base + cfg.staging_size
        reader_depth = max(4, cfg.max_reads // 8)
        clear = Signal()    # resets the per-command control blocks when a command is accepted

        # ---- blocks ------------------------------------------------------------------------
        m.submodules.mux = mux = RequestPortMux(ab, [(ID_OFFSETS,), (ID_INDICES,), (ID_ROWS,)])
        m.submodules.off_rd = off_rd = WordReader(ab, rd_id=ID_OFFSETS, depth=reader_depth)
        m.submodules.idx_rd = idx_rd = WordReader(ab, rd_id=ID_INDICES, depth=reader_depth)
        m.submodules.walker = walker = ResetInserter(clear)(
            OffsetsWalker(ab, staging_end=s_end, max_bag=cfg.max_bag))
        m.submodules.bag_q = bag_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=bag_layout.size, depth=2 * cfg.max_reads))
        m.submodules.seq = seq = ResetInserter(clear)(BagSequencer())
        m.submodules.issuer = issuer = ResetInserter(clear)(RowIssuer(ab, rd_id=ID_ROWS))
        m.submodules.tag_q = tag_q = fifo.SyncFIFOBuffered(width=tag_layout.size,
                                                            depth=cfg.max_reads)
        m.submodules.pool = pool = PoolAccumulator(ab, acc_bits=cfg.acc_bits)
        m.submodules.out_q = out_q = fifo.SyncFIFOBuffered(width=out_layout(ab).size, depth=4)
        # undo-log tee: row indices in issue order; at most max_reads rows have a line in
        # flight, and an entry leaves before its row's lines, so this depth never throttles
        m.submodules.log_row_q = log_row_q = fifo.SyncFIFOBuffered(width=32,
                                                                    depth=cfg.max_reads)

        # ---- memory port: readers and the row/write path share it through the mux ----------
        wiring.connect(m, wiring.flipped(self.mem), mux.mem)
        wiring.connect(m, off_rd.mem, mux.req_0)
        wiring.connect(m, idx_rd.mem, mux.req_1)
        rows_port = mux.req_2
        # register slice: cuts the row-read request path (and its ready path) between the
        # issuer and the arbiter/AXI adapter (the FPGA critical path ran through here)
        rd_slice = register_slice(m, "rd_slice", issuer.rd_req, rows_port.rd_req)
        # row responses: to the pool and, when logging, also to the undo-log tee (a fork: a
        # line moves only when both sides take it; the tee side is a FIFO, so its ready is a
        # registered level and neither side's valid depends on the other's ready)
        c_log = Signal()
        c_table = Signal(16)
        m.submodules.log_line_q = log_line_q = fifo.SyncFIFOBuffered(
            width=log_line_layout.size, depth=SLICE_DEPTH)
        resp = rows_port.rd_resp
        fork_ok = ~c_log | log_line_q.w_rdy
        m.d.comb += [
            pool.resp.payload.eq(resp.payload),
            pool.resp.valid.eq(resp.valid & fork_ok),
            resp.ready.eq(pool.resp.ready & fork_ok),
            # (the tee side of the fork: written by hand, the write is the fork's transfer)
            # (the line's media error goes with it: the logger must not log it as valid)
            # (log_line_layout: data in bits 0..511, err in bit 512)
            log_line_q.w_data.eq(Cat(resp.payload.data, resp.payload.err)),
            log_line_q.w_en.eq(c_log & resp.valid & resp.ready),
        ]
        wiring.connect(m, log_line_q.r_stream, wiring.flipped(self.log_lines))
        # (out_q's read side becomes a write request: its payload is reshaped, so fields by hand)
        out_payload = out_layout(ab)(out_q.r_data)
        m.d.comb += [
            rows_port.wr_req.valid.eq(out_q.r_rdy),
            rows_port.wr_req.payload.id.eq(ID_ROWS),
            rows_port.wr_req.payload.addr.eq(out_payload.addr),
            rows_port.wr_req.payload.data.eq(out_payload.data),
            rows_port.wr_req.payload.be.eq(-1),
            out_q.r_en.eq(rows_port.wr_req.ready),
            rows_port.wr_resp.ready.eq(1),
        ]

        # ---- data path: offsets -> walker -> bags -> sequencer -> issuer -> tags -> pool ----
        wiring.connect(m, off_rd.words, walker.offsets)
        wiring.connect(m, walker.bags, bag_q.w_stream)
        wiring.connect(m, bag_q.r_stream, seq.bags)
        wiring.connect(m, idx_rd.words, seq.indices)
        # register slice between the index checks and the row issuer (same reason)
        item_slice = register_slice(m, "item_slice", seq.items, issuer.items, reset=clear)
        wiring.connect(m, issuer.tags, tag_q.w_stream)
        wiring.connect(m, issuer.rows, log_row_q.w_stream)
        wiring.connect(m, tag_q.r_stream, pool.tags)
        wiring.connect(m, pool.out, out_q.w_stream)
        m.d.comb += [
            idx_rd.start.eq(walker.idx_start),
            idx_rd.start_addr.eq(walker.idx_start_addr),
            idx_rd.limit.eq(walker.idx_limit),
        ]

        # ---- command registers -------------------------------------------------------------
        c = Signal(cmd_layout(ab))
        dim_log = Signal(2)
        m.d.comb += [
            walker.n_bags.eq(c.n_bags), walker.indices_addr.eq(c.indices_addr),
            seq.table_rows.eq(c.table_rows), seq.n_bags.eq(c.n_bags),
            seq.marker_value.eq(walker.err_value),
            issuer.dim_log.eq(dim_log), issuer.table_line.eq(c.table_base >> 6),
            issuer.log.eq(c_log),
            pool.out_line.eq(c.out_addr >> 6),
            off_rd.start_addr.eq(c.offsets_addr),
        ]

        # (log_row_q holds row indices; the log_rows payload is built from them, so fields by hand)
        lr = self.log_rows.payload
        m.d.comb += [
            self.log_rows.valid.eq(log_row_q.r_rdy), log_row_q.r_en.eq(self.log_rows.ready),
            lr.table.eq(c_table), lr.row.eq(log_row_q.r_data), lr.dim_log.eq(dim_log),
            lr.addr.eq(c.table_base + (log_row_q.r_data << (dim_log + 6))),
        ]

        # ---- command-level checks (docs/lookup.md 1-3), evaluated in CHECK -----------------
        chk_err, chk_val, dl, off_end, chk_ready = command_checks(m, cfg, c, c.out_addr, clear,
                                                                  err_width=4)
        m.d.comb += off_rd.limit.eq(off_end)    # the offsets reader's limit

        # ---- control -----------------------------------------------------------------------
        err_code = Signal(4)
        err_value = Signal(64)
        err_bag = Signal(32)
        cycles = Signal(32)
        wr_pending = Signal(range(cfg.max_writes + 8))
        wr_err = Signal()
        wr_issued = rows_port.wr_req.valid & rows_port.wr_req.ready
        wr_done = rows_port.wr_resp.valid
        step(m, wr_pending, up=wr_issued, down=wr_done)
        with m.If(wr_done & rows_port.wr_resp.payload.err):
            m.d.sync += wr_err.eq(1)

        # (a slice's level counts its output register, so level 0 also means the issuer holds
        # no item; in DRAIN the sequencer offers no item: its ``err`` or ``done`` stays high
        # until the next command and closes its output)
        drained = (off_rd.idle & idx_rd.idle & (item_slice.level == 0) & pool.idle &
                   (rd_slice.level == 0) & (tag_q.level == 0) &
                   (out_q.level == 0) & (wr_pending == 0) &
                   (log_row_q.level == 0) & (log_line_q.level == 0))
        media_err = pool.media_err | off_rd.media_err | idx_rd.media_err | wr_err
        cpl = self.cpl.payload
        m.d.comb += [
            cpl.tag.eq(c.tag), cpl.err_code.eq(err_code), cpl.err_bag.eq(err_bag),
            cpl.err_value.eq(err_value), cpl.rows.eq(seq.rows), cpl.sat.eq(pool.sat),
            cpl.out_lines.eq(pool.lines), cpl.cycles.eq(cycles),
        ]

        with m.FSM(name="ctrl"):
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                with m.If(self.cmd.valid):
                    m.d.comb += clear.eq(1)
                    m.d.sync += [c.eq(self.cmd.payload), c_log.eq(self.log),
                                 c_table.eq(self.table_id), cycles.eq(1), err_code.eq(0),
                                 err_value.eq(0), err_bag.eq(0), wr_err.eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += [self.busy.eq(1), pool.start.eq(1)]
                m.d.sync += [dim_log.eq(dl), cycles.eq(cycles + 1)]
                with m.If(chk_ready):       # the checks are this command's
                    with m.If(chk_err != 0):
                        m.d.sync += [err_code.eq(chk_err), err_value.eq(chk_val)]
                        m.next = "CPL"
                    with m.Else():
                        m.d.comb += [off_rd.start.eq(1), walker.start.eq(1)]
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(seq.err | seq.done):
                    m.d.comb += [off_rd.flush.eq(1), idx_rd.flush.eq(1)]
                    with m.If(seq.err):
                        m.d.sync += [err_code.eq(seq.err_code), err_value.eq(seq.err_value),
                                     err_bag.eq(seq.bag)]
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += cycles.eq(cycles + 1)
                with m.If(drained):
                    # MEDIA wins over a check error: that check may have seen untrusted data
                    # (offsets or indices read with an error)
                    with m.If(media_err):
                        m.d.sync += [err_code.eq(LookupErrorCode.MEDIA), err_value.eq(0),
                                     err_bag.eq(0)]
                    m.next = "CPL"
            with m.State("CPL"):
                m.d.comb += [self.busy.eq(1), self.cpl.valid.eq(1)]
                with m.If(self.cpl.ready):
                    m.next = "IDLE"
        return m
