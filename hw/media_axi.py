"""Media port: the device request port (responder side) onto an AXI4 master.

Contract:
- One line = one INCR burst of ``512 / data_width`` beats (ARLEN/AWLEN = beats-1, full-width
  ARSIZE/AWSIZE). All bursts use AXI ID 0, so the slave returns everything in request order; the
  request id travels in an internal FIFO. This keeps the per-id order of the request port
  trivially (and the stronger total order), at the price of not letting the slave reorder.
- At most ``max_reads`` reads and ``max_writes`` writes are outstanding (AR issued, last R not
  yet received; resp. request accepted, B not yet received).
- Throughput: one line per cycle in each direction at 512-bit data width (AR, R, AW, W and B all
  accept back to back); one beat per cycle at narrower widths.
- The AXI side goes through :class:`hw.axi_slice.AXI4RegisterSlice`, so no device logic depends
  combinationally on a signal of the slave (FPGA timing and Verilator's input evaluation).
- Latency added: none on requests (AR/AW/W are driven combinationally from the request stream,
  through the slice's skid buffers); one cycle on responses (the slice's R and B registers).
- ``rd_resp.err`` / ``wr_resp.err`` are set when any beat's RRESP, or BRESP, is not OKAY.
- Poison (docs/coherence.md, "Poison"): ``wr_req.poison`` goes out as AWUSER (one bit, the
  whole line); ``rd_resp.poison`` is set when any beat's RUSER is 1. The media keeps the bit per
  line; this adapter only carries it.
"""
from amaranth.hdl import Cat, Const, Signal, Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from .axi import AXI4Signature, BURST_INCR, RESP_OKAY
from .axi_slice import AXI4RegisterSlice
from .config import DeviceConfig
from .reqport import DeviceRequestSignature, ID_BITS, LINE_BITS

__all__ = ["MediaAXI", "media_axi_signature"]


def media_axi_signature(cfg: DeviceConfig) -> AXI4Signature:
    """The media port's AXI4 master signature: ``cfg``'s widths, one poison bit on AWUSER and
    RUSER."""
    return AXI4Signature(addr_width=cfg.addr_bits, data_width=cfg.media_data_bits,
                         id_width=cfg.axi_id_bits, user_width=1)


class MediaAXI(wiring.Component):
    """The media side of the device request port (responder side) onto an AXI4 master
    (contract in the module docstring: one INCR burst per line, AXI ID 0, in-order responses,
    the poison bit on AWUSER/RUSER).

    Parameters
    ----------
    cfg : DeviceConfig
        ``addr_bits``, ``media_data_bits``, ``axi_id_bits``, ``max_reads``, ``max_writes``.

    Members
    -------
    port : In(DeviceRequestSignature(cfg.addr_bits, poison=True))
        Line requests; ``rd_resp.err``/``wr_resp.err`` when any RRESP, or BRESP, is not OKAY;
        ``wr_req.poison`` → AWUSER, ``rd_resp.poison`` when any beat's RUSER is 1.
    axi : Out(media_axi_signature(cfg))
        The AXI4 master.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self._cfg = cfg
        super().__init__({
            "port": In(DeviceRequestSignature(cfg.addr_bits, poison=True)),
            "axi": Out(media_axi_signature(cfg)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        dw = cfg.media_data_bits
        beats = LINE_BITS // dw
        size = exact_log2(dw // 8)
        port = self.port
        m.submodules.slice = slice_ = AXI4RegisterSlice(media_axi_signature(cfg))
        wiring.connect(m, slice_.m, wiring.flipped(self.axi))
        axi = slice_.s

        # ---- reads -------------------------------------------------------------------------
        m.submodules.rd_ids = rd_ids = fifo.SyncFIFOBuffered(width=ID_BITS, depth=cfg.max_reads)
        m.d.comb += [
            axi.arid.eq(0),
            axi.araddr.eq(Cat(Const(0, 6), port.rd_req.payload.addr)),
            axi.arlen.eq(beats - 1),
            axi.arsize.eq(size),
            axi.arburst.eq(BURST_INCR),
            axi.arvalid.eq(port.rd_req.valid & rd_ids.w_rdy),
            port.rd_req.ready.eq(axi.arready & rd_ids.w_rdy),
            # (the id FIFOs ride along the AXI handshakes: pushed on AR / request, popped on the last R / B)
            rd_ids.w_data.eq(port.rd_req.payload.id),
            rd_ids.w_en.eq(axi.arvalid & axi.arready),
        ]
        rbeat = Signal(range(beats)) if beats > 1 else Const(0, 1)
        rlast_beat = (rbeat == beats - 1)
        r_err = Signal()             # error seen on an earlier beat of this burst
        r_poison = Signal()          # RUSER (poison) seen on an earlier beat of this burst
        rbuf = [Signal(dw, name=f"rbuf{i}") for i in range(beats - 1)]
        m.d.comb += [
            port.rd_resp.valid.eq(axi.rvalid & rlast_beat & rd_ids.r_rdy),
            port.rd_resp.payload.id.eq(rd_ids.r_data),
            port.rd_resp.payload.data.eq(Cat(*rbuf, axi.rdata)),
            port.rd_resp.payload.err.eq(r_err | (axi.rresp != RESP_OKAY)),
            port.rd_resp.payload.poison.eq(r_poison | axi.ruser),
            axi.rready.eq(~rlast_beat | (port.rd_resp.ready & rd_ids.r_rdy)),
            rd_ids.r_en.eq(port.rd_resp.valid & port.rd_resp.ready),
        ]
        with m.If(axi.rvalid & axi.rready):
            if beats > 1:
                with m.If(rlast_beat):
                    m.d.sync += [rbeat.eq(0), r_err.eq(0), r_poison.eq(0)]
                with m.Else():
                    m.d.sync += [rbeat.eq(rbeat + 1), r_err.eq(r_err | (axi.rresp != RESP_OKAY)),
                                 r_poison.eq(r_poison | axi.ruser)]
                    with m.Switch(rbeat):
                        for i in range(beats - 1):
                            with m.Case(i):
                                m.d.sync += rbuf[i].eq(axi.rdata)

        # ---- writes ------------------------------------------------------------------------
        m.submodules.wr_ids = wr_ids = fifo.SyncFIFOBuffered(width=ID_BITS, depth=cfg.max_writes)
        aw_done = Signal()   # AW of the current request already accepted
        w_done = Signal()    # all W beats of the current request already accepted
        wbeat = Signal(range(beats)) if beats > 1 else Const(0, 1)
        req = port.wr_req
        m.d.comb += [
            axi.awid.eq(0),
            axi.awaddr.eq(Cat(Const(0, 6), req.payload.addr)),
            axi.awlen.eq(beats - 1),
            axi.awsize.eq(size),
            axi.awburst.eq(BURST_INCR),
            axi.awuser.eq(req.payload.poison),
            axi.awvalid.eq(req.valid & wr_ids.w_rdy & ~aw_done),
            axi.wvalid.eq(req.valid & wr_ids.w_rdy & ~w_done),
            axi.wlast.eq(wbeat == beats - 1),
        ]
        if beats > 1:
            with m.Switch(wbeat):
                for i in range(beats):
                    with m.Case(i):
                        m.d.comb += [axi.wdata.eq(req.payload.data[i * dw:(i + 1) * dw]),
                                     axi.wstrb.eq(req.payload.be[i * dw // 8:(i + 1) * dw // 8])]
        else:
            m.d.comb += [axi.wdata.eq(req.payload.data), axi.wstrb.eq(req.payload.be)]
        aw_fin = aw_done | (axi.awvalid & axi.awready)
        w_fin = w_done | (axi.wvalid & axi.wready & axi.wlast)
        m.d.comb += [
            req.ready.eq(wr_ids.w_rdy & aw_fin & w_fin),
            wr_ids.w_data.eq(req.payload.id),
            wr_ids.w_en.eq(req.valid & req.ready),
        ]
        with m.If(req.valid & req.ready):
            m.d.sync += [aw_done.eq(0), w_done.eq(0)]
            if beats > 1:
                m.d.sync += wbeat.eq(0)
        with m.Else():
            with m.If(axi.awvalid & axi.awready):
                m.d.sync += aw_done.eq(1)
            with m.If(axi.wvalid & axi.wready):
                with m.If(axi.wlast):
                    m.d.sync += w_done.eq(1)
                    if beats > 1:
                        m.d.sync += wbeat.eq(0)
                with m.Else():
                    if beats > 1:
                        m.d.sync += wbeat.eq(wbeat + 1)
        m.d.comb += [
            port.wr_resp.valid.eq(axi.bvalid & wr_ids.r_rdy),
            port.wr_resp.payload.id.eq(wr_ids.r_data),
            port.wr_resp.payload.err.eq(axi.bresp != RESP_OKAY),
            axi.bready.eq(port.wr_resp.ready & wr_ids.r_rdy),
            wr_ids.r_en.eq(port.wr_resp.valid & port.wr_resp.ready),
        ]
        return m
