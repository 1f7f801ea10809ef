"""BagFront: offsets reader -> offsets walker -> bag FIFO -> bag sequencer (with the index
reader): the checked row items of a LOOKUP or UPDATE command."""
from amaranth.hdl import Module, ResetInserter
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..reqport import DeviceRequestSignature
from ..word_reader import WordReader
from .layouts import bag_layout, item_layout
from .sequencer import BagSequencer
from .walker import OffsetsWalker

__all__ = ["BagFront"]


class BagFront(wiring.Component):
    """Reads a command's offsets and indices and emits its row items, checked (docs/lookup.md
    checks 4-7): one item per index in bag order, or one ``empty`` item per empty bag, at one
    item per cycle while the inputs keep up. The first failure stops it and is held on
    ``err``/``err_code``/``err_value`` with its bag on ``bag``.

    Parameters
    ----------
    addr_bits : int
        Byte address width.
    staging_end : int
        End of the staging region (exclusive): index ranges past it are ADDR_RANGE errors.
    max_bag : int
        Longest bag.
    max_reads : int
        Read requests in flight (sizes the bag FIFO, ``2 * max_reads``, and the readers'
        prefetch, ``max(4, max_reads // 8)`` lines).
    offsets_id, indices_id : int
        Request ids of the two readers.

    Members
    -------
    off_mem, idx_mem : Out(DeviceRequestSignature(addr_bits))
        The offsets and indices readers' request ports (reads only).
    start : In(1)
        Begin the command (offsets from ``offsets_addr``, up to ``offsets_limit``).
    flush : In(1)
        Stop both readers (the command ended or failed); ``idle`` once nothing is in flight.
    clear : In(1)
        Command start: reset the walker, the bag FIFO and the sequencer.
    n_bags, table_rows : In(32); offsets_addr, indices_addr : In(addr_bits);
    offsets_limit : In(addr_bits + 2)
        The command's, stable while running.
    items : Out(stream.Signature(item_layout))
        Row items.
    bag : Out(32)
        Bag of the current item (and of an error).
    rows : Out(32)
        Rows of bags whose last item was emitted.
    done, err : Out(1); err_code : Out(4); err_value : Out(64)
        All bags emitted; the first failure.
    idle : Out(1)
        Both readers idle.
    idx_start : Out(1)
        The index reader starts (the first offset was read).
    off_media_err, idx_media_err : Out(1)
        A reader's read answered ``err`` (since its start).
    """

    def __init__(self, addr_bits, *, staging_end, max_bag, max_reads, offsets_id, indices_id):
        self._ab, self._s_end, self._max_bag, self._max_reads = (addr_bits, staging_end,
                                                                 max_bag, max_reads)
        self._ids = (offsets_id, indices_id)
        super().__init__({
            "off_mem": Out(DeviceRequestSignature(addr_bits)),
            "idx_mem": Out(DeviceRequestSignature(addr_bits)),
            "start": In(1), "flush": In(1), "clear": In(1),
            "n_bags": In(32), "table_rows": In(32), "offsets_addr": In(addr_bits),
            "indices_addr": In(addr_bits), "offsets_limit": In(addr_bits + 2),
            "items": Out(stream.Signature(item_layout)),
            "bag": Out(32), "rows": Out(32), "done": Out(1), "err": Out(1),
            "err_code": Out(4), "err_value": Out(64),
            "idle": Out(1), "idx_start": Out(1), "off_media_err": Out(1),
            "idx_media_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ab, clear = self._ab, self.clear
        depth = max(4, self._max_reads // 8)
        m.submodules.off_rd = off_rd = WordReader(ab, rd_id=self._ids[0], depth=depth)
        m.submodules.idx_rd = idx_rd = WordReader(ab, rd_id=self._ids[1], depth=depth)
        m.submodules.walker = walker = ResetInserter(clear)(
            OffsetsWalker(ab, staging_end=self._s_end, max_bag=self._max_bag))
        m.submodules.bag_q = bag_q = ResetInserter(clear)(
            fifo.SyncFIFOBuffered(width=bag_layout.size, depth=2 * self._max_reads))
        m.submodules.seq = seq = ResetInserter(clear)(BagSequencer())
        wiring.connect(m, wiring.flipped(self.off_mem), off_rd.mem)
        wiring.connect(m, wiring.flipped(self.idx_mem), idx_rd.mem)
        wiring.connect(m, off_rd.words, walker.offsets)
        wiring.connect(m, walker.bags, bag_q.w_stream)
        wiring.connect(m, bag_q.r_stream, seq.bags)
        wiring.connect(m, idx_rd.words, seq.indices)
        wiring.connect(m, seq.items, wiring.flipped(self.items))
        m.d.comb += [
            off_rd.start.eq(self.start), walker.start.eq(self.start),
            off_rd.start_addr.eq(self.offsets_addr), off_rd.limit.eq(self.offsets_limit),
            off_rd.flush.eq(self.flush), idx_rd.flush.eq(self.flush),
            walker.n_bags.eq(self.n_bags), walker.indices_addr.eq(self.indices_addr),
            idx_rd.start.eq(walker.idx_start), idx_rd.start_addr.eq(walker.idx_start_addr),
            idx_rd.limit.eq(walker.idx_limit),
            seq.table_rows.eq(self.table_rows), seq.n_bags.eq(self.n_bags),
            seq.marker_value.eq(walker.err_value),
            self.bag.eq(seq.bag), self.rows.eq(seq.rows), self.done.eq(seq.done),
            self.err.eq(seq.err), self.err_code.eq(seq.err_code),
            self.err_value.eq(seq.err_value),
            self.idle.eq(off_rd.idle & idx_rd.idle), self.idx_start.eq(walker.idx_start),
            self.off_media_err.eq(off_rd.media_err), self.idx_media_err.eq(idx_rd.media_err),
        ]
        return m
