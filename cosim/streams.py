"""cocotb drivers for Amaranth ``lib.stream`` ports, with payloads as dicts.

A stream port ``foo`` appears in Verilog as ``foo__payload``, ``foo__valid``, ``foo__ready``.
The channel engine is cocotbext-axi's (``define_stream``), so queues, reset handling and pause
generators behave like the AXI models; payloads are packed and unpacked with the hardware's own
``amaranth.lib.data`` layout, so a field moved in ``hw/`` moves here too::

    src = StreamSource(dut, "stream_in", PAYLOAD, dut.clk, dut.rst)
    snk = StreamSink(dut, "stream_out", PAYLOAD, dut.clk, dut.rst)
    src.stall(0.3, seed=1); snk.stall(0.3, seed=2)   # valid gaps / ready gaps
    await src.send({"tag": 3, "pair": {"lo": 1, "hi": 2}, "value": 7})
    item = await snk.recv()                           # a dict of the same shape

Payload values: plain ints (or bools) for scalar fields (two's complement range for signed
ones), an enum member or its value for enum fields (unpacked as int), nested dicts for struct
fields, a dict with exactly one member for union fields (unpacked with every member), lists for
arrays. Missing or unknown keys and values that do not fit raise ``ValueError``: nothing is
truncated.
"""
from __future__ import annotations

import enum as py_enum
import random

from amaranth.hdl import Shape
from amaranth.lib import data
from cocotbext.axi.stream import define_stream

__all__ = ["PayloadCodec", "StreamSource", "StreamSink", "StreamMonitor"]


class PayloadCodec:
    """Pack dicts to ints and back with an ``amaranth.lib.data`` layout (pure Python)."""

    def __init__(self, layout):
        if not isinstance(layout, data.Layout):
            layout = data.Layout.cast(layout)
        self.layout = layout
        self.width = layout.size
        self._kind = ("union" if isinstance(layout, data.UnionLayout) else
                      "array" if isinstance(layout, data.ArrayLayout) else "struct")
        # (name, offset, width, signed, nested codec or None)
        self._fields = []
        for name, field in layout:
            sub = PayloadCodec(field.shape) if isinstance(field.shape, data.Layout) else None
            signed = False if sub is not None else Shape.cast(field.shape).signed
            self._fields.append((name, field.offset, field.width, signed, sub))
        self._names = [f[0] for f in self._fields]

    def __repr__(self):
        return f"PayloadCodec({self.layout!r})"

    def pack(self, value, _path="payload") -> int:
        if self._kind == "array":
            if not isinstance(value, (list, tuple)) or len(value) != len(self._fields):
                raise ValueError(f"{_path}: expected a list of {len(self._fields)} elements, "
                                 f"got {value!r}")
            items = enumerate(value)
        else:
            if not isinstance(value, dict):
                raise ValueError(f"{_path}: expected a dict with keys {self._names}, got {value!r}")
            unknown = [k for k in value if k not in self._names]
            if unknown:
                raise ValueError(f"{_path}: unknown field(s) {unknown}; layout has {self._names}")
            if self._kind == "union":
                if len(value) != 1:
                    raise ValueError(f"{_path}: a union takes exactly one of {self._names}, "
                                     f"got {sorted(value)}")
            else:
                missing = [k for k in self._names if k not in value]
                if missing:
                    raise ValueError(f"{_path}: missing field(s) {missing}")
            items = value.items()
        fields = {f[0]: f for f in self._fields}
        bits = 0
        for name, v in items:
            _, offset, width, signed, sub = fields[name]
            where = f"{_path}.{name}"
            if sub is not None:
                raw = sub.pack(v, where)
            else:
                if isinstance(v, py_enum.Enum):
                    v = v.value
                if not isinstance(v, int):  # bool is an int: fine for 1-bit flags
                    raise ValueError(f"{where}: expected an int, got {v!r}")
                lo, hi = ((-(1 << (width - 1)), 1 << (width - 1)) if signed else (0, 1 << width))
                if not lo <= v < hi:
                    kind = "signed" if signed else "unsigned"
                    raise ValueError(f"{where}: {v} does not fit {kind}({width}) [{lo}, {hi})")
                raw = v & ((1 << width) - 1)
            bits |= raw << offset
        return bits

    def unpack(self, bits: int):
        bits = int(bits)
        if not 0 <= bits < (1 << self.width):
            raise ValueError(f"payload {bits:#x} wider than the layout's {self.width} bits")
        out = {}
        for name, offset, width, signed, sub in self._fields:
            raw = (bits >> offset) & ((1 << width) - 1)
            if sub is not None:
                out[name] = sub.unpack(raw)
            elif signed and raw >> (width - 1):
                out[name] = raw - (1 << width)
            else:
                out[name] = raw
        if self._kind == "array":
            return [out[i] for i in range(len(self._fields))]
        return out


_Bus, _, _Source, _Sink, _Monitor = define_stream(
    "AmaranthStream", signals=["payload", "valid", "ready"])


def _pause_generator(p, seed):
    rnd = random.Random(seed).random
    while True:
        yield rnd() < p


class _Endpoint:
    _engine_cls = None

    def __init__(self, dut, name, layout, clock, reset=None, reset_active_level=True):
        self.codec = layout if isinstance(layout, PayloadCodec) else PayloadCodec(layout)
        self.name = name
        bus = _Bus.from_prefix(dut, name + "_")  # name + "_" + "_payload" = name__payload
        if len(bus.payload) != self.codec.width:
            raise ValueError(f"{name}__payload is {len(bus.payload)} bits, layout "
                             f"{self.codec.layout!r} is {self.codec.width}")
        self.engine = self._engine_cls(bus, clock, reset, reset_active_level)

    def count(self):
        return self.engine.count()

    def empty(self):
        return self.engine.empty()

    def clear(self):
        self.engine.clear()

    def set_pause_generator(self, generator=None):
        self.engine.set_pause_generator(generator)

    def clear_pause_generator(self):
        self.engine.clear_pause_generator()

    def stall(self, p: float, seed: int):
        """Seeded random stalls: each cycle paused with probability ``p`` (0 turns them off)."""
        if not 0 <= p < 1:
            raise ValueError(f"stall probability must be in [0, 1), got {p!r}")
        self.set_pause_generator(_pause_generator(p, seed) if p else None)


class StreamSource(_Endpoint):
    """Drives ``<name>__payload``/``__valid`` and honours ``__ready``; pauses are valid gaps."""
    _engine_cls = _Source

    def _txn(self, item):
        return self.engine._transaction_obj(payload=self.codec.pack(item))

    async def send(self, item: dict):
        await self.engine.send(self._txn(item))

    def send_nowait(self, item: dict):
        self.engine.send_nowait(self._txn(item))

    def idle(self) -> bool:
        """Nothing queued and nothing being driven."""
        return self.engine.idle()

    async def wait(self):
        """Until everything queued has been transferred."""
        await self.engine.wait()


class _Receiver(_Endpoint):
    async def recv(self) -> dict:
        return self.codec.unpack(int((await self.engine.recv()).payload))

    def recv_nowait(self) -> dict:
        return self.codec.unpack(int(self.engine.recv_nowait().payload))

    def idle(self) -> bool:
        """Nothing received and waiting to be taken."""
        return self.engine.empty()

    async def wait(self, timeout=0, timeout_unit="ns"):
        """Until an item is available (or ``timeout`` passed)."""
        await self.engine.wait(timeout, timeout_unit)


class StreamSink(_Receiver):
    """Drives ``<name>__ready``; pauses are ready gaps."""
    _engine_cls = _Sink


class StreamMonitor(_Receiver):
    """Passive: records every transfer without driving anything."""
    _engine_cls = _Monitor

    def set_pause_generator(self, generator=None):
        raise TypeError("a monitor drives nothing and cannot stall")

    def stall(self, p, seed):
        raise TypeError("a monitor drives nothing and cannot stall")
