"""PMEM model: an AXI4 slave with fixed read/write latency, built on cocotbext-axi's channels.

Usage (inside a test running under cocotb)::

    pmem = PmemModel(dut, clock=dut.clk, reset=dut.rst, read_latency=100, write_latency=100,
                     read_bandwidth=None, write_bandwidth=None)

Layering (cocotbext-axi's): channel engines (subclasses of ``AxiARSink``, ``AxiRSource``, ...)
move beats, apply pause generators and follow reset; this module is the protocol model on top;
``mem`` is the functional model (a :class:`sw_model.memory.MemoryImage`, default an empty one:
``read``/``write`` and the per-line poison bit ``is_poisoned``/``set_poison``).

The same model compiled into the simulator (C++ called through DPI-C, Python at transaction
level only): :mod:`cosim.pmem_cpp`, cycle-identical, without stalls and media faults.

For speed there is exactly one coroutine per channel and nothing else: the sinks (AR, AW, W)
call the protocol model directly on the clock edge of each handshake, and the sources (R, B)
drive each queued item once its due time has come, sleeping on a single timer across latency
gaps and writing only the signals whose value changes.

Timing, in cycles of ``clock`` (a handshake "at edge *e*" means valid and ready were both high
when rising edge *e* sampled them):

* Read: with AR handshake at edge *a*, the first R beat of the burst is driven at edge
  ``a + read_latency`` (RVALID high from just after that edge), so with RREADY high it
  handshakes at edge ``a + read_latency + 1``: handshake to handshake is ``read_latency + 1``
  edges, a constant offset of +1 (measured by ``tests.cosim.infra.test_infra.test_latency_exact``). Later
  beats follow one per cycle; bursts return in AR order, one beat per cycle at peak.
  RID = ARID, RRESP = OKAY (unless a fault rule fires, below). A read returns ``mem`` as it was at its AR handshake.
* Write: the burst's data is applied to ``mem`` at the later of its AW handshake and its last W
  handshake (edge *d*); the B response is driven at edge ``d + write_latency`` and, with
  BREADY high, handshakes at ``d + write_latency + 1`` (same +1 offset). B responses go out
  in AW order.
* Bandwidth (``read_bandwidth``/``write_bandwidth``, bytes per cycle, None = unlimited, the
  default): a service-time queue per direction (:mod:`cosim.media`). Each R beat is served
  after the beats before it, ``(1 << ARSIZE) / read_bandwidth`` cycles each, and driven at
  ``ceil(service start) + read_latency`` instead of ``a + read_latency``; the B of a write is
  driven at ``ceil(service start of its last beat) + write_latency`` (its beats, ``1 << AWSIZE``
  bytes each, arrive at edge *d*). Unlimited: the figures above exactly. A write waiting for
  bandwidth is applied and unacknowledged: in flight (below).
* Stalls (``stall={"ar": p, ...}``) pause a channel engine with probability *p* each cycle
  (sinks drop ready, sources hold off valid before a new beat), seeded from ``seed``; they only
  ever add delay to the figures above. Both latencies must be >= 1.
* Outstanding reads and writes are unlimited; AR, AW and W are accepted every cycle unless
  stalled.

Poison (docs/coherence.md, "Poison"), when the port has AWUSER and RUSER (one bit each; without
them the model has no poison): the media keeps one poison bit per 64-byte line, in ``mem``.

* A write burst whose AWUSER is 1 sets the bit of every line its address range covers; one
  with AWUSER 0 clears the bit of every line whose 64 bytes it all writes (WSTRB), and leaves
  the others (a partial write keeps the line poisoned). The bits change when the burst's data
  is applied (the later of its AW and last W handshake, below), together with the data; a
  faulted write that is not applied changes no bit.
* A read drives RUSER on each beat with the bit of the line holding that beat's address, as
  the bits were at the AR handshake (like the data).
* Power failure: :mod:`cosim.powerfail` (in-flight poisoned writes keep their poison, in-flight
  clears are lost). ``PendingWrite.poison``/``poison_old`` and the AWUSER in ``_aw_waiting``
  are what it reads.

Persistence (architecture 5.6): a write is *acknowledged* (persistent) at its B handshake. Every
write from its first AW or W handshake until then is *in flight*: ``writes_in_flight`` counts
them and ``self.unacked`` holds those whose data is already applied, each with the bytes it
overwrote (``PendingWrite.old``), so a power-failure model can roll any 8-byte word back.
Bursts whose AW or last W is still missing sit in ``self._aw_waiting`` / ``self._w_waiting`` /
``self._w_beats`` (not yet applied to ``mem``).

Media faults (:class:`MediaFault`, ``pmem.add_fault(...)``): a rule makes matching bursts
answer SLVERR or DECERR instead of OKAY, decided at the AR handshake (reads) or when the burst's
data is complete (writes), so the timing above is unchanged. A matching read answers the error
on every beat of its burst with garbage data (seeded, ``MediaFault.data``); a matching write
answers the error on B and, by default, is not applied to ``mem`` (nothing reached the media;
``apply_write=True`` applies it anyway). A rule matches a burst whose bytes overlap
``[lo, hi)``, with probability ``probability`` (one seeded draw per matching burst), skipping
the first ``after`` matching bursts, at most ``count`` times (None: permanent); each rule draws
from its own generator, seeded by ``seed`` and the number of rules added before it. Every injected
error is appended to ``pmem.faults`` (:class:`InjectedFault`: cycle, op, address, bytes, kind,
rule) so a test can check that each one was reported.
"""
from __future__ import annotations

import enum
import hashlib
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
import cocotb.simulator
from cocotb.triggers import Event, RisingEdge, Timer
from cocotbext.axi import AxiBus
from cocotbext.axi.axi_channels import AxiARSink, AxiAWSink, AxiBSource, AxiRSource, AxiWSink
from cocotbext.axi.reset import Reset

from cosim.media import BandwidthServer
from cosim.model_top import require_cocotb_clock
from sw_model.memory import LINE, MemoryImage, lines_of

__all__ = ["PmemModel", "PmemProtocolError", "PendingWrite", "WriteRecord", "AxiResp",
           "MediaFault", "InjectedFault", "ClockCount", "burst_lines", "poison_update"]

CHANNELS = ("ar", "r", "aw", "w", "b")
_BURST_INCR = 0b01


def _now() -> int:
    """Simulation time in steps (cheaper than cocotb.simtime.get_sim_time on hot paths)."""
    hi, lo = cocotb.simulator.get_sim_time()
    return hi << 32 | lo


class PmemProtocolError(AssertionError):
    """The master broke an AXI rule the model relies on (burst type, 4 KiB crossing, WLAST,
    X/Z on a field at a handshake)."""


def _binstr_getter(handle):
    """A function returning the signal's value as a string of 0/1/X/Z characters.

    The hot paths read through cocotb's simulator object (``handle._handle``, cocotb 2.1 is
    pinned) because building a ``LogicArray`` for ``int(handle.value)`` costs about 6x more
    (15 us against 2.6 us for the five AR fields); the public API is the fallback."""
    raw = getattr(getattr(handle, "_handle", None), "get_signal_val_binstr", None)
    return raw if raw is not None else (lambda: str(handle.value))


class _HookedSinkMixin:
    """A cocotbext-axi stream sink that hands each transfer to ``on_receive(values, t)`` on the
    clock edge of its handshake instead of queueing it for another coroutine.

    ``values`` are the ints of ``_fields`` in order, ``t`` the simulation time of the edge.
    Ready follows the pause generator (the sink never fills up); it is only written when it
    changes."""

    _fields = ()
    on_receive = None

    async def _run(self):
        edge = RisingEdge(self.clock)
        wake = self.wake_event.wait()
        ready = self.ready
        valid = _binstr_getter(self.valid)
        getters = [_binstr_getter(getattr(self.bus, f)) for f in self._fields]
        hook = self.on_receive
        ready_out = None
        while True:
            pause_sample = bool(self.pause)
            await edge
            valid_sample = valid() == "1"
            if valid_sample and ready_out:
                try:
                    values = [int(g(), 2) for g in getters]
                except ValueError:
                    seen = dict(zip(self._fields, (g() for g in getters)))
                    raise PmemProtocolError(f"{self.bus._name}: X/Z at a handshake: {seen}") \
                        from None
                hook(values, _now())
            if ready_out is not (not pause_sample):
                ready_out = not pause_sample
                ready.value = ready_out
            if (not valid_sample or pause_sample) and pause_sample == bool(self.pause):
                self.wake_event.clear()
                await wake


class _ARSink(_HookedSinkMixin, AxiARSink):
    _fields = ("arid", "araddr", "arlen", "arsize", "arburst")


class _AWSink(_HookedSinkMixin, AxiAWSink):
    _fields = ("awid", "awaddr", "awlen", "awsize", "awburst")


class _AWUserSink(_HookedSinkMixin, AxiAWSink):
    _fields = ("awid", "awaddr", "awlen", "awsize", "awburst", "awuser")


class _WSink(_HookedSinkMixin, AxiWSink):
    _fields = ("wdata", "wstrb", "wlast")


class _TimedSourceMixin:
    """A cocotbext-axi stream source whose items carry a due time.

    ``push(t, delay, values, tag)``: drive ``values`` (ints for ``_fields``) at the first edge
    at or after ``t + delay`` clock periods, after every earlier item; ``on_handshake(tag)``
    runs on the edge where the item was taken. ``period`` must be set before the first due time
    is evaluated (the model measures it on the first two edges, before any handshake can occur).
    """

    _fields = ()
    on_handshake = None
    period = None

    def _init_timed(self):
        self.items = deque()
        self.busy_cycles = 0   # edges with valid high (taken or stalled)
        self._sleeping = False
        self._item_event = Event()

    def push(self, t, delay, values, tag):
        self.items.append((t, delay, values, tag))
        if self._sleeping:
            self._item_event.set()

    def count(self):
        return len(self.items)

    def empty(self):
        return not self.items

    def clear(self):
        self.items.clear()

    def idle(self):
        return not self.items and not self.active

    async def _run(self):
        edge = RisingEdge(self.clock)
        valid, ready, items = self.valid, _binstr_getter(self.ready), self.items
        handles = [getattr(self.bus, f) for f in self._fields]
        driven = [None] * len(handles)
        hook = self.on_handshake
        valid_out = False
        current = None
        while True:
            await edge
            if valid_out:
                self.busy_cycles += 1
                if ready() != "1":
                    continue
                hook(current)
            if items and not self.pause:
                t, delay, values, tag = items[0]
                period = self.period
                wait = t + delay * period - period // 2 - _now()
                if wait <= 0:  # due: drive it, writing only what changed
                    items.popleft()
                    current = tag
                    for i, v in enumerate(values):
                        if driven[i] != v:
                            handles[i].value = v
                            driven[i] = v
                    if not valid_out:
                        valid.value = valid_out = True
                    self.active = True
                    continue
            else:
                wait = 0
            if valid_out:
                valid.value = valid_out = False
            self.active = bool(items)
            if wait > 0:      # next item not due: one timer to half a cycle before its edge
                await Timer(wait, "step")
            elif not items:   # nothing queued: sleep until push()
                self._item_event.clear()
                self._sleeping = True
                await self._item_event.wait()
                self._sleeping = False


class _RSource(_TimedSourceMixin, AxiRSource):
    _fields = ("rid", "rdata", "rlast", "rresp")


class _RUserSource(_TimedSourceMixin, AxiRSource):
    _fields = ("rid", "rdata", "rlast", "rresp", "ruser")


class _BSource(_TimedSourceMixin, AxiBSource):
    _fields = ("bid", "bresp")


class AxiResp(enum.IntEnum):
    """AXI4 RRESP/BRESP values."""
    OKAY = 0
    EXOKAY = 1
    SLVERR = 2
    DECERR = 3


@dataclass(frozen=True)
class MediaFault:
    """One media-fault rule of the PMEM model (see the module docstring).

    ``op``: ``"read"``, ``"write"`` or ``"rw"``. ``resp``: the error answered
    (``AxiResp.SLVERR`` or ``AxiResp.DECERR``). ``lo``/``hi``: byte address range ``[lo, hi)``
    a burst must overlap (default: everything). ``probability``: chance that a matching burst
    faults (seeded draw; 1.0 = always). ``after``: matching bursts to let through first.
    ``count``: at most this many faults (1 = one shot, k = the first k; None = permanent).
    ``data``: RDATA of a faulted read, ``"garbage"`` (seeded bytes that differ from ``mem``),
    ``"zeros"`` or ``"mem"`` (the real contents). ``apply_write``: a faulted write still
    updates ``mem``. ``name``: reported with each fault."""
    op: str = "read"
    resp: AxiResp = AxiResp.SLVERR
    lo: int = 0
    hi: int = 1 << 64
    probability: float = 1.0
    after: int = 0
    count: int | None = None
    data: str = "garbage"
    apply_write: bool = False
    name: str = ""

    def __post_init__(self):
        if self.op not in ("read", "write", "rw"):
            raise ValueError(f"MediaFault.op must be 'read', 'write' or 'rw', got {self.op!r}")
        if AxiResp(self.resp) not in (AxiResp.SLVERR, AxiResp.DECERR):
            raise ValueError(f"MediaFault.resp must be SLVERR or DECERR, got {self.resp!r}")
        if not (isinstance(self.lo, int) and isinstance(self.hi, int) and 0 <= self.lo < self.hi):
            raise ValueError(f"MediaFault range must satisfy 0 <= lo < hi, got "
                             f"[{self.lo!r}, {self.hi!r})")
        if not 0 < self.probability <= 1:
            raise ValueError(f"MediaFault.probability must be in (0, 1], got "
                             f"{self.probability!r}")
        if not isinstance(self.after, int) or self.after < 0:
            raise ValueError(f"MediaFault.after must be an int >= 0, got {self.after!r}")
        if self.count is not None and (not isinstance(self.count, int) or self.count < 1):
            raise ValueError(f"MediaFault.count must be None or an int >= 1, got {self.count!r}")
        if self.data not in ("garbage", "zeros", "mem"):
            raise ValueError(f"MediaFault.data must be 'garbage', 'zeros' or 'mem', got "
                             f"{self.data!r}")

    def matches(self, op: str, addr: int, nbytes: int) -> bool:
        return self.op in (op, "rw") and addr < self.hi and addr + nbytes > self.lo


@dataclass(frozen=True, slots=True)
class InjectedFault:
    """One error the PMEM model answered: ``cycle`` of the AR handshake (read) or of the data
    completion (write), ``op`` ``"read"``/``"write"``, burst ``addr`` and ``nbytes``, AXI
    ``axid``, ``resp``, the rule's index in ``pmem.fault_rules`` and its name."""
    cycle: int
    op: str
    addr: int
    nbytes: int
    axid: int
    resp: AxiResp
    rule: int
    name: str


class _FaultState:
    """A rule with its counters and its own seeded generator."""
    __slots__ = ("spec", "seen", "fired", "rng")

    def __init__(self, spec, seed):
        self.spec, self.seen, self.fired, self.rng = spec, 0, 0, random.Random(seed)

    def decide(self, op, addr, nbytes) -> bool:
        s = self.spec
        if not s.matches(op, addr, nbytes):
            return False
        self.seen += 1
        if self.seen <= s.after or (s.count is not None and self.fired >= s.count):
            return False
        if s.probability < 1 and self.rng.random() >= s.probability:
            return False
        self.fired += 1
        return True


@dataclass(slots=True)
class WriteRecord:
    """One write burst as logged: cycles of its AW handshake, its data completion (later of AW
    and last W) and its B handshake (None until acknowledged)."""
    awid: int
    addr: int
    nbytes: int
    aw_cycle: int
    data_cycle: int
    b_cycle: int | None = None


@dataclass(slots=True)
class PendingWrite:
    """A write applied to ``mem`` but not yet acknowledged: ``segments`` are the
    ``(addr, bytes)`` written, ``old`` the bytes they replaced (same addresses); ``poison`` its
    AWUSER, ``poison_old`` the ``(line address, bit before)`` of every line whose poison bit it
    wrote (set, or cleared)."""
    record: WriteRecord
    segments: list
    old: list = field(default_factory=list)
    poison: bool = False
    poison_old: list = field(default_factory=list)


def burst_lines(addr: int, length: int, size: int) -> range:
    """Addresses of the 64-byte lines an INCR burst's address range covers."""
    num_bytes = 1 << size
    return lines_of(addr, addr - addr % num_bytes + num_bytes * length - addr)


def poison_update(mem, addr, length, size, poison, segments) -> list:
    """Apply a write burst's poison rule (module docstring) to ``mem``'s poison bits; returns
    ``(line address, bit before)`` of every line whose bit it wrote: all lines of the burst if
    ``poison``, else the poisoned lines that ``segments`` write completely."""
    if poison:
        changed = [(la, mem.is_poisoned(la)) for la in burst_lines(addr, length, size)]
        for la, _ in changed:
            mem.set_poison(la, True)
        return changed
    if not mem.poisoned:
        return []
    written: dict[int, int] = {}
    for a, d in segments:            # runs of one burst never overlap
        i, n = 0, len(d)
        while i < n:
            la = (a + i) - (a + i) % LINE
            k = min(la + LINE - (a + i), n - i)
            written[la] = written.get(la, 0) + k
            i += k
    changed = [(la, True) for la, k in written.items() if k == LINE and mem.is_poisoned(la)]
    for la, _ in changed:
        mem.set_poison(la, False)
    return changed


class ClockCount:
    """Cycle numbers of a model that measured its clock: ``_t0`` (the first rising edge's
    simulation time) and ``_period`` (simulator steps per cycle), set by the model."""

    @property
    def period(self) -> int:
        """Clock period in simulator steps (measured on the first two rising edges)."""
        return self._period

    def cycle_at(self, t: int) -> int:
        """Cycle number of simulation time ``t``: rising edges since the model's first edge."""
        return (t - self._t0) // self._period

    @property
    def cycle(self) -> int:
        return self.cycle_at(_now())


class PmemModel(ClockCount, Reset):
    """AXI4 slave PMEM model on the AXI master port ``<prefix>_<signal>`` of ``dut``.

    ``prefix`` is the cocotbext-axi bus name: ``"m_axi_"`` finds ``m_axi__awaddr`` (Amaranth's
    ``m_axi`` port, ``__`` separator). ``reset`` is active high. ``poison_port`` is True when
    the port has AWUSER and RUSER (the per-line poison bit). See the module docstring for the
    exact timing, poison and persistence rules.

    On a top that can also carry the C++ model (:mod:`cosim.pmem_cpp.wrapper`: a ``pmem_cpp``
    input) the model drives that top's ``ext_<prefix>_<signal>`` inputs, with ``pmem_cpp``
    low, and reads the master's signals under their own names.
    """

    def __init__(self, dut, *, prefix="m_axi_", clock, reset, read_latency=100,
                 write_latency=100, seed=0, stall=None, mem=None, log_writes=True,
                 read_bandwidth=None, write_bandwidth=None):
        require_cocotb_clock(dut, "the Python PMEM model (cosim.pmem)")
        for name, lat in (("read_latency", read_latency), ("write_latency", write_latency)):
            if not isinstance(lat, int) or lat < 1:
                raise ValueError(f"{name} must be an int >= 1 cycle, got {lat!r}")
        self._r_server = BandwidthServer(read_bandwidth)
        self._w_server = BandwidthServer(write_bandwidth)
        stall = dict(stall or {})
        for ch, p in stall.items():
            if ch not in CHANNELS:
                raise ValueError(f"stall channel must be one of {CHANNELS}, got {ch!r}")
            if not 0 <= p < 1:
                raise ValueError(f"stall probability for {ch!r} must be in [0, 1), got {p!r}")

        super().__init__()
        self.clock = clock
        self.read_latency = read_latency
        self.write_latency = write_latency
        self.seed = seed
        self.log_writes = log_writes
        self.write_log: list[WriteRecord] = []
        self.fault_rules: list[_FaultState] = []
        self._rules_added = 0
        self.faults: list[InjectedFault] = []
        self._period = None
        self._t0 = None
        self._t_first = None      # time of the first rising edge (bandwidth edge numbers)

        bus = AxiBus.from_prefix(dut, prefix)
        from cosim.model_top import redirect_bus
        from cosim.pmem_cpp.wrapper import SELECT_PORT
        redirect_bus(dut, SELECT_PORT, (bus.write.aw, bus.write.w, bus.write.b, bus.read.ar,
                                        bus.read.r))
        self.width = len(bus.read.r.rdata)
        self.byte_lanes = self.width // 8
        self.strb_mask = (1 << self.byte_lanes) - 1
        self.max_size = (self.byte_lanes - 1).bit_length()
        self.addr_width = len(bus.read.ar.araddr)
        if len(bus.write.w.wdata) != self.width or len(bus.write.w.wstrb) != self.byte_lanes:
            raise ValueError("W channel width differs from R channel width")
        self.mem = mem if mem is not None else MemoryImage(1 << self.addr_width)
        self._reset_state_vars()
        self.poison_port = hasattr(bus.write.aw, "awuser") and hasattr(bus.read.r, "ruser")

        self.ar = _ARSink(bus.read.ar, clock, reset)
        self.r = (_RUserSource if self.poison_port else _RSource)(bus.read.r, clock, reset)
        self.aw = (_AWUserSink if self.poison_port else _AWSink)(bus.write.aw, clock, reset)
        self.w = _WSink(bus.write.w, clock, reset)
        self.b = _BSource(bus.write.b, clock, reset)
        for src in (self.r, self.b):
            src._init_timed()
        self.ar.on_receive = self._on_ar
        self.aw.on_receive = self._on_aw
        self.w.on_receive = self._on_w
        self.r.on_handshake = self._on_r
        self.b.on_handshake = self._on_b
        for i, ch in enumerate(CHANNELS):
            p = stall.get(ch, 0)
            if p:
                getattr(self, ch).set_pause_generator(self._pauses(random.Random(seed * 8 + i), p))

        cocotb.start_soon(self._measure_clock())
        self._init_reset(reset, True)

    # ------------------------------------------------------------------ bookkeeping

    def _reset_state_vars(self):
        self.ar_count = self.aw_count = self.r_beats = self.w_beats = self.b_count = 0
        self.acked_writes = 0
        # cycles responses waited for bandwidth: R beats, write bursts (service start - arrival)
        self.r_queue_cycles = self.w_queue_cycles = 0
        self._first_r_t = self._last_r_t = None
        # AW handshaken, data not complete: (awid, addr, len, size, t, awuser)
        self._aw_waiting = deque()
        self._w_waiting = deque()   # complete W bursts whose AW has not arrived: (beats, t_last)
        self._w_beats = []          # beats of the W burst in progress: (wdata, wstrb)
        self._w_bursts = 0          # complete W bursts seen
        self.unacked: deque[PendingWrite] = deque()  # applied to mem, B not yet handshaken
        self._r_server.clear()      # (constructed before the first call)
        self._w_server.clear()

    def _handle_reset(self, state):
        # The channel engines stop and restart themselves; the protocol state goes with them.
        if state:
            self.r.clear()
            self.b.clear()
            self._reset_state_vars()

    @property
    def read_bandwidth(self):
        """Bytes per cycle of the read media (a Fraction), None when unlimited."""
        return self._r_server.bandwidth

    @property
    def write_bandwidth(self):
        return self._w_server.bandwidth

    def _edge_of(self, t: int) -> int:
        """Rising edges since the first one at a handshake time ``t``. The earliest handshake
        is on the second edge, which may run before ``_measure_clock`` has set the period:
        then ``t`` is that second edge and the period is ``t - _t_first``."""
        period = self._period or (t - self._t_first)
        return (t - self._t_first) // period

    @property
    def writes_in_flight(self) -> int:
        """Write bursts with an AW or W handshake and no B handshake yet."""
        return max(self.aw_count, self._w_bursts + (1 if self._w_beats else 0)) - self.acked_writes

    @property
    def first_r_cycle(self):
        return None if self._first_r_t is None else self.cycle_at(self._first_r_t)

    @property
    def last_r_cycle(self):
        return None if self._last_r_t is None else self.cycle_at(self._last_r_t)

    @property
    def busy_r_cycles(self) -> int:
        """Cycles with RVALID high (beats plus cycles stalled by the master's RREADY)."""
        return self.r.busy_cycles

    @property
    def r_utilization(self) -> float:
        """R beats per cycle between the first and the last R handshake."""
        if not self.r_beats:
            return 0.0
        return self.r_beats / (self.last_r_cycle - self.first_r_cycle + 1)

    def stats(self) -> dict:
        return {k: getattr(self, k) for k in (
            "ar_count", "aw_count", "r_beats", "w_beats", "b_count", "acked_writes",
            "writes_in_flight", "first_r_cycle", "last_r_cycle", "busy_r_cycles",
            "r_queue_cycles", "w_queue_cycles")}

    # ------------------------------------------------------------------ media faults

    def add_fault(self, spec: MediaFault | None = None, **kw) -> int:
        """Add a fault rule (a :class:`MediaFault`, or its fields as keywords); returns its
        index in ``fault_rules``. Rules are tried in order; the first that fires answers."""
        if spec is None:
            spec = MediaFault(**kw)
        elif kw:
            raise TypeError("add_fault: give a MediaFault or keywords, not both")
        if not isinstance(spec, MediaFault):
            raise TypeError(f"add_fault: expected a MediaFault, got {spec!r}")
        i = len(self.fault_rules)
        # (seeded by the count of rules ever added, so a rule re-added after clear_faults()
        # draws a fresh sequence)
        self._rules_added += 1
        self.fault_rules.append(_FaultState(spec, (self.seed << 20) ^ (self._rules_added
                                                                       * 0x9E3779B1)))
        return i

    def clear_faults(self):
        """Remove every rule (``faults`` keeps what was injected)."""
        self.fault_rules.clear()

    def _fault(self, op, addr, nbytes, axid, t):
        """The rule that faults this burst, logged, or None."""
        for i, st in enumerate(self.fault_rules):
            if st.decide(op, addr, nbytes):
                spec = st.spec
                self.faults.append(InjectedFault(self.cycle_at(t) if self._t0 is not None
                                                 else 0, op, addr, nbytes, axid,
                                                 AxiResp(spec.resp), i, spec.name))
                return spec
        return None

    def _fault_data(self, spec, addr, nbytes) -> bytes:
        if spec.data == "mem":
            return self.mem.read(addr, nbytes)
        if spec.data == "zeros":
            return bytes(nbytes)
        real = self.mem.read(addr, nbytes)
        out = bytearray()
        k = len(self.faults)
        while len(out) < nbytes:
            out += hashlib.blake2b(f"{self.seed}:{addr}:{k}:{len(out)}".encode(),
                                   digest_size=64).digest()
        out = bytearray(out[:nbytes])
        for i in range(0, nbytes, 64):       # every line differs from the real contents
            if out[i:i + 64] == real[i:i + 64]:
                out[i] ^= 0xFF
        return bytes(out)

    async def settle(self):
        """Return when every channel engine has taken the current clock edge's handshakes:
        one time step later, before the next edge. Call it after a ``RisingEdge`` before
        reading the state a power failure keeps (``power_fail``): code woken on the edge may
        run before or after the engines (cocotb's scheduling order), so without it the state
        read can hold some of the edge's handshakes and not others. The C++ model
        (:meth:`cosim.pmem_cpp.CppPmemModel.settle`) has the same method, so both give the
        same image for the same cut."""
        await Timer(1, "step")

    def clear_write_log(self):
        """Forget the write log (``log_writes``)."""
        self.write_log.clear()

    def drop_in_flight(self):
        """Forget every queued response and in-flight burst, zero the counters
        (:func:`cosim.powerfail.load_image`)."""
        self.r.clear()
        self.b.clear()
        self._reset_state_vars()

    @staticmethod
    def _pauses(rng, p):
        rnd = rng.random
        while True:
            yield rnd() < p

    async def _measure_clock(self):
        edge = RisingEdge(self.clock)
        await edge
        t0 = self._t_first = _now()
        await edge
        self._t0, self._period = t0, _now() - t0
        self.r.period = self.b.period = self._period

    # ------------------------------------------------------------------ reads

    def _check_burst(self, kind, addr, length, size, burst):
        if burst != _BURST_INCR:
            raise PmemProtocolError(f"{kind}: only INCR bursts are supported, got burst={burst}")
        if size > self.max_size:
            raise PmemProtocolError(f"{kind}: size {size} wider than the {self.width}-bit bus")
        num_bytes = 1 << size
        aligned = addr - addr % num_bytes
        if (aligned & 0xfff) + num_bytes * length > 0x1000:
            raise PmemProtocolError(f"{kind}: burst at {addr:#x} of {length}x{num_bytes} bytes "
                                    f"crosses a 4 KiB boundary")
        return num_bytes, aligned

    def _on_ar(self, values, t):
        arid, addr, arlen, size, burst = values
        length = arlen + 1
        self.ar_count += 1
        lanes, push, lat = self.byte_lanes, self.r.push, self.read_latency
        num_bytes, aligned = self._check_burst("AR", addr, length, size, burst)
        # the bus word address of each beat
        if num_bytes == lanes:
            base = addr - addr % lanes
            beat_addrs = range(base, base + lanes * length, lanes)
        else:
            beat_addrs = [(a - a % lanes) for a in
                          (addr if n == 0 else aligned + n * num_bytes for n in range(length))]
        if not self.poison_port:
            user = ()
        elif self.mem.poisoned:
            user = [(int(self.mem.is_poisoned(a)),) for a in beat_addrs]
        else:
            user = ((0,),) * length
        last = length - 1
        if self._r_server.num:      # bandwidth limit: each beat's delay from its service start
            e, serve = self._edge_of(t), self._r_server.serve
            delays = [serve(e, num_bytes) - e + lat for _ in range(length)]
            self.r_queue_cycles += sum(delays) - lat * length
        else:
            delays = None
        if self.fault_rules:
            lo = addr - addr % lanes
            hi = (aligned + num_bytes * length + lanes - 1) // lanes * lanes
            spec = self._fault("read", addr, aligned + num_bytes * length - addr, arid, t)
            if spec is not None:
                data = self._fault_data(spec, lo, hi - lo)
                resp = int(spec.resp)
                words = [int.from_bytes(data[a - lo:a - lo + lanes], "little")
                         for a in beat_addrs]
                for n, word in enumerate(words):
                    push(t, delays[n] if delays else lat,
                         (arid, word, int(n == last), resp, *(user[n] if user else ())), None)
                return
        if num_bytes == lanes:
            data = self.mem.read(base, lanes * length)
            if length == 1:
                push(t, delays[0] if delays else lat, (arid, int.from_bytes(data, "little"), 1, 0,
                              *(user[0] if user else ())), None)
                return
            words = [int.from_bytes(data[i:i + lanes], "little")
                     for i in range(0, lanes * length, lanes)]
        else:  # narrow: the whole bus word around each beat's address
            words = [int.from_bytes(self.mem.read(a, lanes), "little") for a in beat_addrs]
        for n, word in enumerate(words):
            push(t, delays[n] if delays else lat,
                 (arid, word, int(n == last), 0, *(user[n] if user else ())), None)

    def _on_r(self, _):
        t = _now()
        if self._first_r_t is None:
            self._first_r_t = t
        self._last_r_t = t
        self.r_beats += 1

    # ------------------------------------------------------------------ writes

    def _on_aw(self, values, t):
        awid, addr, awlen, size, burst = values[:5]
        poison = values[5] if len(values) > 5 else 0
        self.aw_count += 1
        self._check_burst("AW", addr, awlen + 1, size, burst)
        self._aw_waiting.append((awid, addr, awlen + 1, size, t, poison))
        if self._w_waiting:
            self._match_writes()

    def _on_w(self, values, t):
        wdata, wstrb, wlast = values
        self.w_beats += 1
        self._w_beats.append((wdata, wstrb))
        if wlast:
            self._w_waiting.append((self._w_beats, t))
            self._w_beats = []
            self._w_bursts += 1
            if self._aw_waiting:
                self._match_writes()
        elif len(self._w_beats) > 256:
            raise PmemProtocolError("W: more than 256 beats without WLAST")

    def _match_writes(self):
        while self._aw_waiting and self._w_waiting:
            awid, addr, length, size, t_aw, poison = self._aw_waiting.popleft()
            beats, t_w = self._w_waiting.popleft()
            if len(beats) != length:
                raise PmemProtocolError(f"W: burst for AW at {addr:#x} (awid {awid}) has "
                                        f"{len(beats)} beats, AWLEN says {length}")
            segments = self._segments(addr, size, beats)
            t_done = max(t_aw, t_w)
            rec = WriteRecord(awid, addr, sum(len(d) for _, d in segments),
                              self.cycle_at(t_aw), self.cycle_at(t_done))
            resp = 0
            applied = True
            if self.fault_rules:
                nbytes = (1 << size) * length - addr % (1 << size)
                spec = self._fault("write", addr, nbytes, awid, t_done)
                if spec is not None:
                    resp = int(spec.resp)
                    if not spec.apply_write:    # nothing reached the media
                        segments = []
                        applied = False
            pw = PendingWrite(rec, segments, [(a, self.mem.read(a, len(d))) for a, d in segments],
                              bool(poison))
            for a, d in segments:
                self.mem.write(a, d)
            if applied and self.poison_port:
                pw.poison_old = poison_update(self.mem, addr, length, size, poison, segments)
            if self.log_writes:
                self.write_log.append(rec)
            self.unacked.append(pw)
            delay = self.write_latency
            if self._w_server.num:   # bandwidth limit: from the service start of its last beat
                e, serve = self._edge_of(t_done), self._w_server.serve
                for _ in range(length):
                    start = serve(e, 1 << size)
                delay += start - e
                self.w_queue_cycles += start - e
            self.b.push(t_done, delay, (awid, resp), pw)

    def _segments(self, addr, size, beats):
        """Contiguous ``(addr, bytes)`` runs written by a burst (byte lanes per AXI A3.4)."""
        lanes, full = self.byte_lanes, self.strb_mask
        num_bytes = 1 << size
        aligned = addr - addr % num_bytes
        out = []
        run_addr, run = None, bytearray()
        for n, (wdata, wstrb) in enumerate(beats):
            a = addr if n == 0 else aligned + n * num_bytes
            word = a - a % lanes
            lo = a - word
            hi = (aligned if n == 0 else a) - word + num_bytes  # exclusive upper lane
            strb = wstrb & ((1 << hi) - 1) & ~((1 << lo) - 1)
            data = wdata.to_bytes(lanes, "little")
            if strb == full:
                if run_addr is not None and run_addr + len(run) == word:
                    run += data
                else:
                    if run:
                        out.append((run_addr, bytes(run)))
                    run_addr, run = word, bytearray(data)
                continue
            i = 0
            while i < lanes:
                if not (strb >> i) & 1:
                    i += 1
                    continue
                j = i
                while j < lanes and (strb >> j) & 1:
                    j += 1
                if run_addr is not None and run_addr + len(run) == word + i:
                    run += data[i:j]
                else:
                    if run:
                        out.append((run_addr, bytes(run)))
                    run_addr, run = word + i, bytearray(data[i:j])
                i = j
        if run:
            out.append((run_addr, bytes(run)))
        return out

    def _on_b(self, pw):
        done = self.unacked.popleft()
        assert done is pw, "B responses out of order"
        pw.record.b_cycle = self.cycle
        self.b_count += 1
        self.acked_writes += 1
