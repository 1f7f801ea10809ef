"""The PMEM model compiled into the simulator: :class:`CppPmemModel`.

Same timing, ordering and persistence rules as :class:`cosim.pmem.PmemModel` (its docstring),
but the per-cycle work is C++ (``pmem_dpi.cpp``) called from the Verilog the build adds around
the device (:mod:`cosim.pmem_cpp.wrapper`; every ``cosim.build.device_build(cfg)`` has it, and
the Python model can drive the same build instead).
Python only talks to it at transaction level, through ``ctypes`` on the simulator process:
backdoor reads and writes of the media (``mem``, a :class:`CppMemory`), counters
(``stats()``), and the in-flight write state a power failure needs (``unacked``,
``_aw_waiting``, ``_w_waiting``, ``_w_beats``, fetched when read), so
:func:`cosim.powerfail.power_fail` and :func:`cosim.powerfail.load_image` work unchanged.

Media faults (``add_fault``, :class:`cosim.pmem.MediaFault`): the rules and their seeded
draws stay in Python (the Python model's own methods); while a rule is set the C++ model asks
Python at each AR handshake and each write's data completion (a ctypes callback), so a run
without rules never calls Python. Not implemented: channel stalls (``stall=``, raises
:class:`NotImplementedError`; the Python model stays the one for them).

Bandwidth (``read_bandwidth``/``write_bandwidth``): the same service-time queues
(:class:`cosim.media.BandwidthServer`, ``struct Server`` in C++), cycle-identical.

Cycle numbers are the Python model's: rising edges since the model's first edge (the C++ side
counts edges from time 0; the offset is taken on that first edge).
"""
from __future__ import annotations

import ctypes
import functools
import struct
from collections import deque

import numpy as np

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge, Timer

from cosim.media import BandwidthServer
from cosim.model_top import simulator_functions
from cosim.pmem import ClockCount, PendingWrite, PmemModel, WriteRecord, _now
from cosim.pmem_cpp.wrapper import SELECT_PORT
from cosim.tb.config import PMEM_MODELS
from sw_model.memory import LINE, MemoryImage, line_dict

__all__ = ["CppPmemModel", "CppMemory", "protocol_error", "cpp_available", "pmem_model",
           "PMEM_MODELS"]

_GARBAGE_FN = ctypes.CFUNCTYPE(None, ctypes.c_ulonglong, ctypes.POINTER(ctypes.c_ubyte))
_FAULT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong,
                             ctypes.c_uint, ctypes.POINTER(ctypes.c_ubyte), ctypes.c_ulonglong)


@functools.cache
def _lib():
    """The simulator process's C++ PMEM functions."""
    u64, p = ctypes.c_ulonglong, ctypes.c_void_p
    return simulator_functions({
        "tcxl_pmem_attach": (None, [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                    ctypes.c_int]),
        "tcxl_pmem_edges": (u64, []),
        "tcxl_pmem_set_bandwidth": (None, [u64, u64, u64, u64]),
        "tcxl_pmem_error": (ctypes.c_char_p, []),
        "tcxl_pmem_mem_read": (None, [u64, p, u64]),
        "tcxl_pmem_mem_write": (None, [u64, ctypes.c_char_p, u64]),
        "tcxl_pmem_mem_write_lines": (None, [p, ctypes.c_char_p, u64]),
        "tcxl_pmem_mem_clear": (None, []),
        "tcxl_pmem_mem_version": (u64, []),
        "tcxl_pmem_poison_get": (ctypes.c_int, [u64]),
        "tcxl_pmem_poison_set": (None, [u64, ctypes.c_int]),
        "tcxl_pmem_poison_count": (u64, []),
        "tcxl_pmem_poison_dump": (None, [p]),
        "tcxl_pmem_mem_nlines": (u64, []),
        "tcxl_pmem_mem_dump": (None, [p, p]),
        "tcxl_pmem_stats": (None, [p]),
        "tcxl_pmem_drop_in_flight": (None, []),
        "tcxl_pmem_clear_log": (None, []),
        "tcxl_pmem_state": (u64, [ctypes.POINTER(ctypes.c_void_p)]),
        "tcxl_pmem_set_garbage": (None, [_GARBAGE_FN, p, ctypes.c_uint]),
        "tcxl_pmem_set_fault_hook": (None, [_FAULT_FN]),
    }, "this simulator has no C++ PMEM model: build the device with "
       "cosim.build.device_build(cfg)")


def cpp_available() -> bool:
    """True inside a simulator built with the C++ PMEM model."""
    try:
        _lib()
    except RuntimeError:
        return False
    return True


def protocol_error() -> str:
    """The AXI rule the master broke (the simulation stopped on it), or ''."""
    return _lib().tcxl_pmem_error().decode()


class CppMemory(MemoryImage):
    """The C++ model's media as a :class:`MemoryImage`: ``read``/``write`` go to the C++ line
    store; ``_lines`` (and so ``lines``, ``copy``, ``diff``) is a snapshot of it, taken again
    only after the store changed. The poison bits live in C++ too: ``is_poisoned`` /
    ``set_poison`` call it, ``poisoned`` is a fresh copy (a frozenset) on each access."""

    def __init__(self, size: int):
        # (not MemoryImage.__init__: its line dict is the property below)
        self.size, self.fill, self._fill_line = size, 0, bytes(LINE)
        self._lib = _lib()
        self._snap = None
        self._snap_version = None

    def _dump(self):
        """(line addresses, their contents concatenated) of the C++ store, in creation order."""
        lib = self._lib
        n = lib.tcxl_pmem_mem_nlines()
        addrs = (ctypes.c_ulonglong * n)()
        data = ctypes.create_string_buffer(LINE * n)
        lib.tcxl_pmem_mem_dump(addrs, data)
        return addrs, data

    def _fresh_lines(self) -> dict:
        addrs, data = self._dump()
        return line_dict(addrs, data.raw)

    @property
    def _lines(self) -> dict:
        v = self._lib.tcxl_pmem_mem_version()
        if self._snap is None or v != self._snap_version:
            self._snap = self._fresh_lines()
            self._snap_version = v
        return self._snap

    def line_arrays(self):
        """(ascending int64 addresses, uint8 ``(n, 64)`` contents) of every line in the C++
        store, straight from its dump (no per-line Python objects)."""
        addrs, data = self._dump()
        n = len(addrs)
        a = np.frombuffer(addrs, dtype=np.uint64).astype(np.int64)
        d = np.frombuffer(data, dtype=np.uint8, count=LINE * n).reshape(n, LINE)
        order = np.argsort(a, kind="stable")
        return a[order], d[order]

    @_lines.setter
    def _lines(self, value):
        raise AttributeError("CppMemory: assign a whole image through CppPmemModel.mem")

    @property
    def poisoned(self) -> frozenset:
        lib = self._lib
        n = lib.tcxl_pmem_poison_count()
        out = (ctypes.c_ulonglong * n)()
        lib.tcxl_pmem_poison_dump(out)
        return frozenset(out)

    @poisoned.setter
    def poisoned(self, value):
        raise AttributeError("CppMemory: set poison bits with set_poison or a whole image "
                             "through CppPmemModel.mem")

    def is_poisoned(self, address: int) -> bool:
        return bool(self._lib.tcxl_pmem_poison_get(int(address)))

    def set_poison(self, address: int, poisoned: bool = True):
        address = int(address)
        self._check(address, 1)
        self._lib.tcxl_pmem_poison_set(address, int(bool(poisoned)))

    def read(self, address: int, length: int, **kwargs) -> bytes:
        address, length = int(address), int(length)
        self._check(address, length)
        buf = ctypes.create_string_buffer(length)
        self._lib.tcxl_pmem_mem_read(address, buf, length)
        return buf.raw

    def write(self, address: int, data, **kwargs):
        address = int(address)
        if not isinstance(data, (bytes, bytearray)):
            data = bytes(data)
        self._check(address, len(data))
        self._lib.tcxl_pmem_mem_write(address, bytes(data), len(data))

    def gather_lines(self, line_addrs) -> bytes:
        return b"".join(self.read(int(a), LINE) for a in line_addrs)

    def load(self, image: MemoryImage):
        """Replace the whole contents by ``image``'s. A ``GarbageMemory``'s regions stay
        garbage: the C++ store asks ``image.garbage_line`` for a line of them on its first
        read (a ctypes callback), as ``GarbageMemory.read`` does."""
        lib = self._lib
        lib.tcxl_pmem_mem_clear()
        lines = image._lines                      # in its order (see pmem_dpi.cpp), one call
        addrs = np.fromiter(lines.keys(), dtype=np.uint64, count=len(lines))
        lib.tcxl_pmem_mem_write_lines(addrs.ctypes.data, b"".join(lines.values()), len(lines))
        for a in image.poisoned:
            lib.tcxl_pmem_poison_set(a, 1)
        regions = tuple(getattr(image, "regions", ()))
        if regions:
            make = image.garbage_line

            def fill(addr, out):
                ctypes.memmove(out, make(int(addr)), LINE)

            self._garbage_cb = _GARBAGE_FN(fill)     # kept alive as long as C++ may call it
            flat = (ctypes.c_ulonglong * (2 * len(regions)))(*(x for r in regions for x in r))
            lib.tcxl_pmem_set_garbage(self._garbage_cb, flat, len(regions))

    def copy(self) -> MemoryImage:
        m = MemoryImage(self.size, self.fill)
        m._lines = self._fresh_lines()            # a new dict of new lines (not the snapshot)
        m.poisoned = set(self.poisoned)
        return m

    def __repr__(self):
        return f"CppMemory(size={self.size:#x}, lines={self._lib.tcxl_pmem_mem_nlines()})"


class _Reader:
    def __init__(self, raw: bytes):
        self.raw, self.i = raw, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.raw, self.i)
        self.i += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def bytes(self):
        n = self.take("I")
        b = self.raw[self.i:self.i + n]
        self.i += n
        return b


class _WriteLog(list):
    """``write_log`` of the C++ model: a list fetched on access; ``clear()`` clears the C++ log."""

    def clear(self):
        super().clear()
        _lib().tcxl_pmem_clear_log()


class _Channel:
    """``pmem.r`` / ``pmem.b`` as far as callers use them (``clear``, ``busy_cycles``)."""

    def __init__(self, model, stat):
        self._model, self._stat = model, stat

    def clear(self):
        _lib().tcxl_pmem_drop_in_flight()

    @property
    def busy_cycles(self):
        return self._model._stats()[self._stat]


class CppPmemModel(ClockCount):
    """The C++ PMEM model of the running simulator, with :class:`cosim.pmem.PmemModel`'s
    constructor and attributes (module docstring for what is left out)."""

    _segments = PmemModel._segments
    loads_copy = True       # assigning ``mem`` copies the image into the C++ store

    def __init__(self, dut, *, prefix="m_axi_", clock, reset=None, read_latency=100,
                 write_latency=100, seed=0, stall=None, mem=None, log_writes=True,
                 read_bandwidth=None, write_bandwidth=None):
        for name, lat in (("read_latency", read_latency), ("write_latency", write_latency)):
            if not isinstance(lat, int) or lat < 1:
                raise ValueError(f"{name} must be an int >= 1 cycle, got {lat!r}")
        if stall and any(stall.values()):
            raise NotImplementedError("the C++ PMEM model has no channel stalls; use the Python "
                                      "model (BenchConfig(pmem='python'))")
        lib = _lib()
        self.clock = clock
        self.read_latency = read_latency
        self.write_latency = write_latency
        self.seed = seed
        self.log_writes = log_writes
        self.fault_rules = []
        self._rules_added = 0
        self.faults = []
        self._fault_error = None
        self._fault_cb = _FAULT_FN(self._fault_hook)
        lib.tcxl_pmem_set_fault_hook(_FAULT_FN())      # no rules yet: no calls into Python
        self.width = len(getattr(dut, f"{prefix}_rdata"))
        self.byte_lanes = self.width // 8
        self.poison_port = True           # the wrapper carries AWUSER/RUSER (poison)
        self.strb_mask = (1 << self.byte_lanes) - 1
        self.addr_width = len(getattr(dut, f"{prefix}_araddr"))
        self._period = None
        self._t0 = None
        self._e0 = None
        self._mem = CppMemory(1 << self.addr_width)
        lib.tcxl_pmem_mem_clear()
        if mem is not None:
            self._mem.load(mem)
        rs, ws = BandwidthServer(read_bandwidth), BandwidthServer(write_bandwidth)
        lib.tcxl_pmem_set_bandwidth(rs.num, rs.den, ws.num, ws.den)
        self.read_bandwidth, self.write_bandwidth = rs.bandwidth, ws.bandwidth
        lib.tcxl_pmem_attach(self.byte_lanes, read_latency, write_latency, int(log_writes))
        getattr(dut, SELECT_PORT).value = 1   # the model drives the port, not the ext_ inputs
        self.r = _Channel(self, "busy_r")
        self.b = _Channel(self, "busy_b")
        cocotb.start_soon(self._measure_clock())

    # ------------------------------------------------------------------ memory
    @property
    def mem(self) -> CppMemory:
        return self._mem

    @mem.setter
    def mem(self, image: MemoryImage):
        self._mem.load(image)

    # ------------------------------------------------------------------ time
    async def _measure_clock(self):
        edge = RisingEdge(self.clock)
        await edge
        t0 = _now()
        await ReadOnly()                  # the simulator has evaluated this edge
        e0 = _lib().tcxl_pmem_edges()
        await edge
        self._t0, self._e0, self._period = t0, e0, _now() - t0

    def _cycle_of_edge(self, e: int) -> int:
        return e - self._e0

    def _time_of_edge(self, e: int) -> int:
        return self._t0 + (e - self._e0) * self._period

    async def settle(self):
        """Let the simulator evaluate the current clock edge; call it after a ``RisingEdge``
        before reading the model's state (``stats()``, ``power_fail``), as with
        :meth:`cosim.pmem.PmemModel.settle`.

        cocotb wakes coroutines on a rising edge before the simulator evaluates it, so code
        woken there sees the C++ model as it was after the previous edge. This returns one
        time step later, still before the next edge, with the edge done."""
        await Timer(1, "step")

    # ------------------------------------------------------------------ counters
    _STATS = ("ar_count", "aw_count", "r_beats", "w_beats", "b_count", "acked_writes",
              "w_bursts", "w_beats_open", "first_r", "last_r", "busy_r", "busy_b",
              "r_queue_cycles", "w_queue_cycles")

    def _stats(self) -> dict:
        out = (ctypes.c_longlong * len(self._STATS))()
        _lib().tcxl_pmem_stats(out)
        return dict(zip(self._STATS, out))

    def __getattr__(self, name):
        if name in ("ar_count", "aw_count", "r_beats", "w_beats", "b_count", "acked_writes",
                    "r_queue_cycles", "w_queue_cycles"):
            return self._stats()[name]
        raise AttributeError(name)

    @property
    def writes_in_flight(self) -> int:
        s = self._stats()
        return (max(s["aw_count"], s["w_bursts"] + (1 if s["w_beats_open"] else 0))
                - s["acked_writes"])

    @property
    def first_r_cycle(self):
        e = self._stats()["first_r"]
        return None if e < 0 else self._cycle_of_edge(e)

    @property
    def last_r_cycle(self):
        e = self._stats()["last_r"]
        return None if e < 0 else self._cycle_of_edge(e)

    @property
    def busy_r_cycles(self) -> int:
        return self._stats()["busy_r"]

    @property
    def r_utilization(self) -> float:
        n = self.r_beats
        if not n:
            return 0.0
        return n / (self.last_r_cycle - self.first_r_cycle + 1)

    def stats(self) -> dict:
        return {k: getattr(self, k) for k in (
            "ar_count", "aw_count", "r_beats", "w_beats", "b_count", "acked_writes",
            "writes_in_flight", "first_r_cycle", "last_r_cycle", "busy_r_cycles",
            "r_queue_cycles", "w_queue_cycles")}

    # ------------------------------------------------------------------ write state
    def _state(self):
        p = ctypes.c_void_p()
        n = _lib().tcxl_pmem_state(ctypes.byref(p))
        rd = _Reader(ctypes.string_at(p, n))
        unacked = []
        for _ in range(rd.take("I")):
            awid, addr, nbytes, aw_e, data_e = rd.take("IQQQQ")
            segs, old = [], []
            for _ in range(rd.take("I")):
                a = rd.take("Q")
                segs.append((a, rd.bytes()))
                old.append((a, rd.bytes()))
            poison = bool(rd.take("B"))
            poison_old = [rd.take("QB") for _ in range(rd.take("I"))]
            rec = WriteRecord(awid, addr, nbytes, self._cycle_of_edge(aw_e),
                              self._cycle_of_edge(data_e))
            unacked.append(PendingWrite(rec, segs, old, poison,
                                        [(la, bool(b)) for la, b in poison_old]))
        aw = deque()
        for _ in range(rd.take("I")):
            awid, addr, length, size, e, poison = rd.take("IQIIQB")
            aw.append((awid, addr, length, size, self._time_of_edge(e), poison))

        def beats():
            out = []
            for _ in range(rd.take("I")):
                data = rd.bytes()
                out.append((int.from_bytes(data, "little"), rd.take("Q")))
            return out

        w = deque()
        for _ in range(rd.take("I")):
            bs = beats()
            w.append((bs, self._time_of_edge(rd.take("Q"))))
        cur = beats()
        log = []
        for _ in range(rd.take("I")):
            awid, addr, nbytes, aw_e, data_e, b_e = rd.take("IQQQQq")
            log.append(WriteRecord(awid, addr, nbytes, self._cycle_of_edge(aw_e),
                                   self._cycle_of_edge(data_e),
                                   None if b_e < 0 else self._cycle_of_edge(b_e)))
        return unacked, aw, w, cur, log

    @property
    def unacked(self) -> deque:
        return deque(self._state()[0])

    @property
    def _aw_waiting(self) -> deque:
        return self._state()[1]

    @property
    def _w_waiting(self) -> deque:
        return self._state()[2]

    @property
    def _w_beats(self) -> list:
        return self._state()[3]

    @property
    def write_log(self) -> _WriteLog:
        return _WriteLog(self._state()[4])

    def clear_write_log(self):
        """Forget the write log without fetching it first (``write_log.clear()`` fetches)."""
        _lib().tcxl_pmem_clear_log()

    def drop_in_flight(self):
        """Forget every queued response and in-flight burst, zero the counters
        (:func:`cosim.powerfail.load_image`)."""
        _lib().tcxl_pmem_drop_in_flight()

    _reset_state_vars = drop_in_flight

    # ------------------------------------------------------------------ media faults
    # The rules and their seeded draws are the Python model's own code; the C++ model calls
    # _fault_hook at each AR handshake and write data completion while a rule is set.
    _fault = PmemModel._fault
    _fault_data = PmemModel._fault_data

    def add_fault(self, spec=None, **kw) -> int:
        """As :meth:`cosim.pmem.PmemModel.add_fault` (same rules, same seeded draws)."""
        i = PmemModel.add_fault(self, spec, **kw)
        _lib().tcxl_pmem_set_fault_hook(self._fault_cb)
        return i

    def clear_faults(self):
        self.fault_rules.clear()
        _lib().tcxl_pmem_set_fault_hook(_FAULT_FN())

    def _fault_hook(self, op, addr, nbytes, axid, out, n):
        try:
            spec = self._fault("read" if op == 0 else "write", addr, nbytes, axid, _now())
            if spec is None:
                return 0
            if op == 0:
                data = self._fault_data(spec, addr - addr % self.byte_lanes, n)
                ctypes.memmove(out, data, n)
                return int(spec.resp)
            return int(spec.resp) | (0x100 if spec.apply_write else 0)
        except BaseException as e:        # an exception cannot cross the C++ frames
            self._fault_error = e
            raise


def pmem_model(kind: str, dut, **kw):
    """The PMEM model ``kind`` (``"python"``: :class:`cosim.pmem.PmemModel`, ``"cpp"``:
    :class:`CppPmemModel`) on ``dut``'s media port, constructed with ``kw``. The device build
    carries both (:mod:`cosim.pmem_cpp.wrapper`); ``"cpp"`` is refused on a simulator built
    without the C++ model."""
    if kind not in PMEM_MODELS:
        raise ValueError(f"pmem model must be one of {PMEM_MODELS}, got {kind!r}")
    if kind == "cpp":
        if not cpp_available():
            raise RuntimeError("PMEM model 'cpp' asked for, but this simulator was built "
                               "without the C++ PMEM model (cosim.build.device_build(cfg) has "
                               "it)")
        return CppPmemModel(dut, **kw)
    return PmemModel(dut, **kw)
