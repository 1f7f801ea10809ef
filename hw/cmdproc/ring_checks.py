"""RingConfigChecks: the ring configuration checks and the ring mask, registered."""
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import DeviceError
from .errors import error_event_layout

__all__ = ["RingConfigChecks", "MAX_RING"]

MAX_RING = 65536


class RingConfigChecks(wiring.Component):
    """The doorbell's configuration checks, computed a cycle ahead from the ring configuration
    registers' next values (docs/training.md section 3).

    The owner drives ``size`` and the bases with the values its registers take at the next edge
    whenever ``load`` is high, and holds ``load`` low in a cycle where those could differ (a
    refused write). The outputs are registered, so they describe the registers as they are,
    and the doorbell check reads them without an adder or comparator of the configuration on
    its path.

    Parameters
    ----------
    cfg : DeviceConfig
        The staging region (``staging_base``, ``staging_size``) the rings must lie in.

    Members
    -------
    size : In(32)
        The ring size (entries) at the next edge.
    cmd_base, cpl_base : In(64)
        The command and completion ring bases at the next edge.
    load : In(1)
        Take this cycle's inputs (else the outputs hold).
    mask : Out(32)
        ``size - 1``, registered (reset: ``0xFFFFFFFF``, the mask of size 0).
    error : Out(error_event_layout)
        Registered: ``valid`` when the configuration is bad, with ``code`` RING_CONFIG and
        ``value`` the first bad field, in order: the size (not a power of two in
        2..``MAX_RING``), the command ring base, the completion ring base (not 64 B aligned,
        or the ring not inside the staging region). After reset: size 0, so ``valid``.
        Latency: one cycle from the inputs.
    """

    def __init__(self, cfg: DeviceConfig):
        self._cfg = cfg
        super().__init__({
            "size": In(32), "cmd_base": In(64), "cpl_base": In(64),
            "load": In(1),
            "mask": Out(32, init=0xFFFFFFFF),
            "error": Out(error_event_layout,
                         init={"valid": 1, "code": DeviceError.RING_CONFIG, "value": 0}),
        })

    def elaborate(self, platform):
        m = Module()
        s_base = self._cfg.staging_base
        s_end = self._cfg.staging_base + self._cfg.staging_size
        size = self.size
        mask = Signal(32)
        m.d.comb += mask.eq(size - 1)
        with m.If(self.load):
            m.d.sync += self.mask.eq(mask)
        size_ok = Signal()
        m.d.comb += size_ok.eq((size >= 2) & (size <= MAX_RING) & ((size & mask) == 0))
        ring_bytes = size * 64

        def ring_ok(base):
            return (base[:6] == 0) & (base >= s_base) & (base + ring_bytes <= s_end)
        err = self.error
        with m.If(self.load):
            m.d.sync += [err.valid.eq(1), err.code.eq(DeviceError.RING_CONFIG)]
            with m.If(~size_ok):
                m.d.sync += err.value.eq(size)
            with m.Elif(~ring_ok(self.cmd_base)):
                m.d.sync += err.value.eq(self.cmd_base)
            with m.Elif(~ring_ok(self.cpl_base)):
                m.d.sync += err.value.eq(self.cpl_base)
            with m.Else():
                m.d.sync += [err.valid.eq(0), err.value.eq(0)]
        return m
