"""cocotb channel layer of the CXL.mem host: :class:`ChannelSet` drives and samples stream
channels of a DUT on one per-cycle loop (so every agent counts the same cycles), with bursty
pause patterns (:func:`bursty_pauses`)."""
from __future__ import annotations

import random

from cosim.host_cpp.wrapper import host_input
from cosim.model_top import require_cocotb_clock

__all__ = ["ChannelSet", "bursty_pauses", "fast_getter"]


def fast_getter(handle):
    """A zero-argument function returning ``handle``'s value as a binary string (the simulator
    call without cocotb's value object: a hot path of every per-cycle monitor)."""
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    return raw if raw is not None else (lambda: str(handle.value))


def bursty_pauses(rng: random.Random, p: float, mean_len: float = 3.0):
    """Pause pattern: each cycle a pause starts with probability ``p``; a pause lasts a
    geometric number of cycles with mean ``mean_len`` (so gaps come in bursts and channels drift
    apart in time)."""
    stay = 1.0 - 1.0 / max(mean_len, 1.0)
    paused = False
    while True:
        if paused:
            paused = rng.random() < stay
        else:
            paused = rng.random() < p
        yield paused


class ChannelSet:
    """All valid/ready streams of one agent, driven by one coroutine (one wake-up per cycle).

    Outbound channels take items from a ``pop(cycle) -> (payload, token) | None`` callable and
    report transfers to ``on_sent(token, cycle)``; inbound channels call ``on_recv(payload,
    cycle)`` on the edge of each transfer. Payloads are dicts packed with the hardware layout
    (``cosim.streams.PayloadCodec``). Each channel has its own seeded pause pattern (valid gaps
    out, ready gaps in). :attr:`cycle` counts rising edges of ``clock`` since :meth:`start`
    (the first edge is cycle 1); :meth:`cycle_of` converts a simulation time (steps) to that
    count, for agents that see edges in their own coroutines (the PMEM model's hooks).

    One coroutine instead of one per channel (``cosim.streams`` engines) because the host's
    checks need the exact cycle of every transfer on every channel, and because waking once per
    cycle for all channels is several times cheaper in Python.
    """

    def __init__(self, dut, clock, reset=None):
        require_cocotb_clock(dut, "the Python CXL.mem host (cosim.cxl_host)")
        self.dut = dut
        self.clock = clock
        self.reset = reset
        self.outs = []
        self.ins = []
        self.cycle = 0
        self.every_cycle = []       # callables(cycle) run once per cycle before driving
        self.hold_until = {}        # channel name -> cycle until which it is forced paused
        self._task = None
        self._t0 = None
        self._period = None

    def cycle_of(self, t: int) -> int:
        """Cycle number of the rising edge at simulation time ``t`` (steps)."""
        return 1 + (t - self._t0) // self._period

    def _channel(self, name, layout):
        """(codec, payload, valid, ready) of channel ``name``; its payload width must be the
        layout's."""
        from cosim.streams import PayloadCodec
        codec = layout if isinstance(layout, PayloadCodec) else PayloadCodec(layout)
        payload = getattr(self.dut, f"{name}__payload")
        if len(payload) != codec.width:
            raise ValueError(f"{name}__payload is {len(payload)} bits, layout is {codec.width}")
        # on a top that can carry the compiled host, the signals this agent drives are the
        # top's ext_ inputs (cosim.model_top.outside_input); the design's outputs are read
        # where they are
        return tuple([codec] + [host_input(self.dut, getattr(self.dut, f"{name}__{part}"))
                                for part in ("payload", "valid", "ready")])

    def add_out(self, name, layout, pop, on_sent, pauses=None, idle_payload=None):
        """``idle_payload``: payload driven while valid is low (default: the last one stays;
        a stream's payload is meaningless without valid, and a DUT must not look at it)."""
        codec, payload, valid, ready = self._channel(name, layout)
        valid.value = 0
        self.outs.append({"name": name, "codec": codec, "payload": payload, "valid": valid,
                          "ready": fast_getter(ready), "pop": pop, "on_sent": on_sent,
                          "pauses": pauses, "cur": None, "driven": None, "count": 0,
                          "idle": None if idle_payload is None else codec.pack(idle_payload)})

    def add_in(self, name, layout, on_recv, pauses=None):
        codec, payload, valid, ready = self._channel(name, layout)
        ready.value = 0
        self.ins.append({"name": name, "codec": codec, "payload": fast_getter(payload),
                         "valid": fast_getter(valid), "ready": ready, "on_recv": on_recv,
                         "pauses": pauses, "ready_out": False, "count": 0})

    def hold(self, name: str, cycles: int):
        """Force channel ``name`` paused (no valid / no ready) for the next ``cycles`` cycles."""
        self.hold_until[name] = self.cycle + cycles

    def start(self):
        import cocotb
        if self._task is None:
            self._task = cocotb.start_soon(self._run())

    def stop(self):
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self):
        from cocotb.triggers import RisingEdge
        edge = RisingEdge(self.clock)
        rst = fast_getter(self.reset) if self.reset is not None else (lambda: "0")
        outs, ins, every, hold = self.outs, self.ins, self.every_cycle, self.hold_until
        from cocotb import simulator

        def now():
            hi, lo = simulator.get_sim_time()
            return hi << 32 | lo
        while True:
            await edge
            self.cycle += 1
            cyc = self.cycle
            if cyc <= 2:
                if cyc == 1:
                    self._t0 = now()
                else:
                    self._period = now() - self._t0
            if rst() == "1":
                for o in outs:
                    if o["cur"] is not None:
                        o["valid"].value = 0
                        o["cur"] = None
                continue
            # sample handshakes of the edge that just happened
            for o in outs:
                if o["cur"] is not None and o["ready"]() == "1":
                    o["count"] += 1
                    o["on_sent"](o["cur"], cyc)
                    o["cur"] = None
            for i in ins:
                if i["ready_out"] and i["valid"]() == "1":
                    i["count"] += 1
                    i["on_recv"](i["codec"].unpack(int(i["payload"](), 2)), cyc)
            for fn in every:
                fn(cyc)
            # drive for the next edge
            for o in outs:
                if o["cur"] is not None:
                    continue            # held until taken (stream rule: stable while valid)
                paused = o["pauses"] is not None and next(o["pauses"])
                if hold and hold.get(o["name"], 0) >= cyc:
                    paused = True
                item = None if paused else o["pop"](cyc)
                if item is None:
                    if o["driven"]:
                        o["valid"].value = 0
                        o["driven"] = False
                        if o["idle"] is not None:
                            o["payload"].value = o["idle"]
                    continue
                payload, token = item
                o["payload"].value = o["codec"].pack(payload)
                o["cur"] = token
                if not o["driven"]:
                    o["valid"].value = 1
                    o["driven"] = True
            for i in ins:
                want = not (i["pauses"] is not None and next(i["pauses"]))
                if hold and hold.get(i["name"], 0) >= cyc:
                    want = False
                if want != i["ready_out"]:
                    i["ready"].value = int(want)
                    i["ready_out"] = want
