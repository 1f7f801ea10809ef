"""ErrorRegisters: the command processor's error registers and error interrupt."""
from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ErrorRegisters", "error_event_layout", "ERROR_SOURCES"]

# one error event: a code (DeviceError) and its value
error_event_layout = data.StructLayout({"valid": 1, "code": 8, "value": 64})

# event sources, highest priority first (docs/training.md section 3)
ERROR_SOURCES = ("csr", "ring", "desc", "snap", "recovery")


class ErrorRegisters(wiring.Component):
    """Last-error registers, error count and error interrupt of the command processor.

    Each cycle up to one event per source; the highest-priority one (``csr`` = a CSR-block error,
    ``ring`` = a bad ring or doorbell write or a RECOVER while busy, ``desc`` = a descriptor
    completed with a non-zero status, ``snap`` = a media error of a background snapshot copy,
    ``recovery`` = the first media error of a recovery)
    sets ``err_code``/``err_value`` and ``error`` (last error wins) and pulses ``irq_err`` in
    the same cycle; ``err_count`` counts every event of every source.

    Members
    -------
    csr, ring, desc, snap, recovery : In(error_event_layout)
        The events of a cycle (``valid``, ``code``, ``value``).
    err_clear : In(1)
        Clears ``error`` (an event in the same cycle wins).
    err_code : Out(8), err_value : Out(64)
        The last error.
    err_count : Out(32)
        Events since reset (wrapping).
    error : Out(1)
        Sticky until ``err_clear``.
    irq_err : Out(1)
        Combinational: an event this cycle.
    """

    def __init__(self):
        super().__init__({
            **{src: In(error_event_layout) for src in ERROR_SOURCES},
            "err_clear": In(1),
            "err_code": Out(8), "err_value": Out(64), "err_count": Out(32),
            "error": Out(1), "irq_err": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        events = [getattr(self, src) for src in ERROR_SOURCES]
        with m.If(self.err_clear):
            m.d.sync += self.error.eq(0)
        for i, ev in enumerate(events):
            with (m.If if i == 0 else m.Elif)(ev.valid):
                m.d.comb += self.irq_err.eq(1)
                m.d.sync += [self.err_code.eq(ev.code), self.err_value.eq(ev.value),
                             self.error.eq(1)]
        # the events settle late (a doorbell's ring checks): their number is registered and
        # added a cycle later; err_count adds the registered number, so it counts every event
        # from the next cycle on, as a plain sum would, with only registers before its adder
        n_events, counted = Signal(range(len(events) + 1)), Signal(32)
        m.d.sync += [n_events.eq(sum(ev.valid for ev in events)),
                     counted.eq(counted + n_events)]
        m.d.comb += self.err_count.eq(counted + n_events)
        return m
