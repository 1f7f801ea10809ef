"""LogScanner: recovery pass 1, the run of current undo-record headers from slot 0."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig, LINE_BYTES
from .fields import slot_line

__all__ = ["LogScanner"]


class LogScanner(wiring.Component):
    """Pass 1 of recovery (docs/training.md section 6 step 2): header reads of slots 0, 1, ...
    (as fast as the read register takes them); q = the first slot whose header is not current
    (else ``log_slots``). A header read that answers ``err`` does not end the scan (the slot is
    skipped), so a transient error inside the valid run cannot shorten the window.

    Parameters
    ----------
    cfg : DeviceConfig
        ``log_base``, ``log_slots``, ``log_window``, ``addr_bits``.

    Members
    -------
    start : In(1)
        Restart (before the scan: the superblock was read).
    active : In(1)
        Scan now (issue reads, watch responses).
    rd_load : Out(1), rd_addr : Out(addr_bits - 6)
        Header read of the next slot (kind 0); ``rd_free``: In(1) the read register takes it.
    rsp_valid, rsp_err, hdr_live : In(1)
        A header response, its error flag, and whether it is current.
    reads_idle : In(1)
        No read requested or in flight.
    done : Out(1)
        Combinational: the scan ended and its reads are all answered.
    top : Out(range(log_slots + 1))
        ``min(q + log_window, log_slots)``: pass 2 reads slots ``top - 1`` down to 0.
    """

    def __init__(self, cfg: DeviceConfig):
        self._cfg = cfg
        n = cfg.log_slots
        super().__init__({
            "start": In(1), "active": In(1),
            "rd_load": Out(1), "rd_addr": Out(cfg.addr_bits - 6), "rd_free": In(1),
            "rsp_valid": In(1), "rsp_err": In(1), "hdr_live": In(1), "reads_idle": In(1),
            "done": Out(1), "top": Out(range(n + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        n_slots, window = cfg.log_slots, cfg.log_window
        log_line = cfg.log_base // LINE_BYTES
        s_issue = Signal(range(n_slots + 1))
        s_rsp = Signal(range(n_slots + 1))
        stop = Signal()
        q = Signal(range(n_slots + 1))
        with m.If(self.active):
            with m.If(~stop & (s_issue != n_slots) & self.rd_free):
                m.d.comb += [self.rd_load.eq(1),
                             self.rd_addr.eq(slot_line(log_line, s_issue, cfg.addr_bits - 6))]
                m.d.sync += s_issue.eq(s_issue + 1)
            with m.If(self.rsp_valid):
                m.d.sync += s_rsp.eq(s_rsp + 1)
                with m.If(~stop & ~self.rsp_err & ~self.hdr_live):
                    m.d.sync += [stop.eq(1), q.eq(s_rsp)]
            m.d.comb += self.done.eq((stop | (s_issue == n_slots)) & self.reads_idle)
        m.d.comb += self.top.eq(Mux(q + window > n_slots, n_slots, q + window))
        with m.If(self.start):
            m.d.sync += [s_issue.eq(0), s_rsp.eq(0), stop.eq(0), q.eq(n_slots)]
        return m
