"""Media timing of the PMEM model: latency and bandwidth per direction, and named presets.

The PMEM models (:class:`cosim.pmem.PmemModel`, :class:`cosim.pmem_cpp.CppPmemModel`) take
``read_latency``/``write_latency`` (cycles) and ``read_bandwidth``/``write_bandwidth`` (bytes per
cycle, an exact rational; ``None`` = unlimited, the default and the behaviour before bandwidth
existed). Both models apply the same rule (:class:`BandwidthServer`), in integers, so they stay
cycle-identical.

**The bandwidth rule** (a service-time queue per direction, one server each, independent of
each other): the media serves one direction's *units* one after another, each for
``bytes / bandwidth`` cycles, in the order they arrive; a unit is served as soon as it has
arrived and the unit before it has been served. A read unit is one R beat of ``1 << ARSIZE``
bytes, arriving at its burst's AR handshake; a write unit is one W beat of ``1 << AWSIZE`` bytes,
all the beats of a burst arriving when its data is complete (the later of its AW and last W
handshake). The response leaves ``latency`` cycles after its service *starts*, rounded up to an
edge: an R beat is driven at edge ``ceil(start) + read_latency``, the B of a burst at edge
``ceil(start of its last beat) + write_latency``. So an access to an idle media sees exactly the
configured latency (the papers' idle latencies include the media transfer of one line), and under
load responses leave at the configured bandwidth, with the queueing delay on top of the latency.
Unlimited bandwidth serves every unit in zero time: the timing is the one documented in
:mod:`cosim.pmem`, unchanged. The R channel still carries at most one beat per cycle, so a read
bandwidth above the bus width changes nothing.

In integers: with ``bandwidth = num/den`` bytes per cycle, time is kept in *ticks* of
``1/num`` cycle; a unit of ``b`` bytes takes ``b * den`` ticks; a handshake at edge ``e`` is tick
``e * num``. The server keeps the tick at which it becomes free (``free``), cleared on reset and
on a power failure's restart.

**Power failure:** a write waiting for bandwidth has its data applied to the media image already
(at data completion, as without a limit) and no B: it is *in flight*, in the row "applied,
not acknowledged" of docs/crash.md's table (each 8-byte word survives with probability 1/2).
A bandwidth limit only makes such writes more numerous and longer lived.

**Presets** (:data:`PRESETS`, docs/benchmarks.md "Media timing"): latencies in ns and
bandwidths in GB/s with their sources, converted to cycles and bytes per cycle at a device clock
(``clock_mhz``, default 1000 MHz: docs/system.md's ``asic`` clock, where a 64-byte-per-cycle
datapath matches a CXL 2.0 x16 link).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["BandwidthServer", "MediaTiming", "MediaPreset", "PRESETS", "media_timing",
           "bandwidth", "DEFAULT_CLOCK_MHZ", "MAX_BANDWIDTH_DEN"]

DEFAULT_CLOCK_MHZ = 1000
MAX_BANDWIDTH_DEN = 1000     # bandwidths are rationals with a denominator up to this


def bandwidth(value) -> Fraction | None:
    """A bandwidth in bytes per cycle as an exact :class:`Fraction` (``None``: unlimited).

    Takes an int, a Fraction, a string (``"39.4"``, ``"197/5"``) or a float (read by its
    decimal representation, so ``13.9`` is 139/10). Must be > 0; the denominator is limited to
    :data:`MAX_BANDWIDTH_DEN` (closest fraction) so the models' tick arithmetic stays small."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"bandwidth must be a number of bytes per cycle, got {value!r}")
    try:
        f = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"bandwidth must be a positive number of bytes per cycle, got "
                         f"{value!r}") from None
    if f <= 0:
        raise ValueError(f"bandwidth must be > 0 bytes per cycle (None: unlimited), got {value!r}")
    if f.denominator > MAX_BANDWIDTH_DEN:
        f = f.limit_denominator(MAX_BANDWIDTH_DEN)
    if f.numerator >= 1 << 24:
        raise ValueError(f"bandwidth {value!r} bytes per cycle too large: use None (unlimited)")
    return f


class BandwidthServer:
    """One direction's bandwidth rule (module docstring), in integer ticks.

    ``serve(edge, nbytes)`` serves one unit arriving at ``edge`` and returns the edge its
    service starts on, rounded up (``>= edge``); with ``bw`` None it returns ``edge``.
    ``clear()`` empties the server (reset, restart after a power failure). The C++ model
    (``pmem_dpi.cpp``, ``struct Server``) is this class line for line."""

    __slots__ = ("num", "den", "free")

    def __init__(self, bw: Fraction | None):
        bw = bandwidth(bw)
        self.num, self.den = (0, 0) if bw is None else (bw.numerator, bw.denominator)
        self.free = 0

    @property
    def bandwidth(self) -> Fraction | None:
        """Bytes per cycle (the value given, normalized by :func:`bandwidth`); None:
        unlimited."""
        return Fraction(self.num, self.den) if self.num else None

    def clear(self):
        self.free = 0

    def serve(self, edge: int, nbytes: int) -> int:
        if not self.num:
            return edge
        start = max(self.free, edge * self.num)
        self.free = start + nbytes * self.den
        return -(-start // self.num)


@dataclass(frozen=True)
class MediaTiming:
    """What a PMEM model is constructed with: latencies in cycles, bandwidths in bytes per
    cycle as exact fraction strings (``"197/5"``; ``None``: unlimited), so the object travels in
    run parameters (:mod:`cosim.params`) as JSON. ``preset``/``clock_mhz``: where it came from
    (reports only)."""
    read_latency: int
    write_latency: int
    read_bandwidth: str | None = None
    write_bandwidth: str | None = None
    preset: str = ""
    clock_mhz: float = 0.0

    def __post_init__(self):
        for name in ("read_latency", "write_latency"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an int >= 1 cycle, got {v!r}")
        for name in ("read_bandwidth", "write_bandwidth"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, str(bandwidth(v)))

    def pmem_kwargs(self) -> dict:
        """The PMEM model's constructor arguments."""
        return dict(read_latency=self.read_latency, write_latency=self.write_latency,
                    read_bandwidth=bandwidth(self.read_bandwidth),
                    write_bandwidth=bandwidth(self.write_bandwidth))

    def describe(self) -> str:
        def bw(v):
            if v is None:
                return "unlimited"
            f = Fraction(v)
            return f"{float(f):.4g} B/cycle" + ("" if f.denominator == 1 else f" ({f})")
        src = f"{self.preset} @ {self.clock_mhz:g} MHz: " if self.preset else ""
        return (f"{src}read {self.read_latency} cycles, {bw(self.read_bandwidth)}; "
                f"write {self.write_latency} cycles, {bw(self.write_bandwidth)}")


IZR = ("Izraelevitz et al., Basic Performance Measurements of the Intel Optane DC Persistent "
       "Memory Module, arXiv:1903.05714 (2019)")
YANG = ("Yang et al., An Empirical Guide to the Behavior and Use of Scalable Persistent Memory, "
        "FAST '20")


@dataclass(frozen=True)
class MediaPreset:
    """A named media: latencies in ns, bandwidths in GB/s (10^9 B/s; None: unlimited, and
    latency None: the caller's latency in cycles), each with its source."""
    name: str
    read_latency_ns: float | None
    write_latency_ns: float | None
    read_gbps: float | None
    write_gbps: float | None
    sources: tuple[str, ...]


PRESETS = {p.name: p for p in (
    MediaPreset("ideal", None, None, None, None, (
        "the model before media timing existed: the latency given in cycles (trainingcxl "
        "train --latency, 40 by default), unlimited bandwidth (one beat per cycle on R, no "
        "limit on writes)",)),
    MediaPreset("dram", 81, 81, 140.8, 140.8, (
        f"read latency: {IZR}, local DRAM random load latency 81 ns",
        "write latency: assumption, the read latency (the papers measure no DRAM persist "
        "latency; DRAM is not persistent)",
        "bandwidth: JEDEC DDR4-2933, 23.47 GB/s per channel x 6 channels = 140.8 GB/s per "
        "direction (the Optane platform's DRAM; trainingcxl/system/params.py dram_bw)",)),
    MediaPreset("optane", 305, 90, 39.4, 13.9, (
        f"read latency: {IZR}, random 64-B load latency of Optane DC PMM, 305 ns (about 3x "
        "DRAM's 81 ns)",
        f"write latency: {IZR}, store + flush + fence latency about 90 ns (the write is "
        "persistent once in the ADR domain: the model's B)",
        f"bandwidth: {IZR}, six interleaved DIMMs: 39.4 GB/s read, 13.9 GB/s write (per DIMM "
        f"6.6 / 2.3 GB/s, also {YANG})",)),
)}


def _cycles(ns: float, clock_mhz: float) -> int:
    return max(1, math.ceil(round(ns * clock_mhz / 1000, 9)))


def media_timing(preset: str = "ideal", *, clock_mhz: float = DEFAULT_CLOCK_MHZ,
                 latency: int = 40, read_latency: int | None = None,
                 write_latency: int | None = None, read_bandwidth=None,
                 write_bandwidth=None) -> MediaTiming:
    """The :class:`MediaTiming` of ``preset`` at ``clock_mhz``: ns rounded up to whole cycles,
    GB/s divided by the clock (bytes per cycle, exact decimal). ``latency`` (cycles) fills a
    preset latency of None (``ideal``). Explicit ``read_latency`` .. ``write_bandwidth``
    override the preset's value (bandwidth ``"none"``: unlimited)."""
    if preset not in PRESETS:
        raise ValueError(f"media preset must be one of {tuple(PRESETS)}, got {preset!r}")
    if not clock_mhz > 0:
        raise ValueError(f"clock_mhz must be > 0, got {clock_mhz!r}")
    p = PRESETS[preset]

    def lat(ns, given):
        if given is not None:
            return given
        return latency if ns is None else _cycles(ns, clock_mhz)

    def bw(gbps, given):
        if given is not None:
            return None if str(given).lower() in ("none", "unlimited") else bandwidth(given)
        if gbps is None:
            return None
        return bandwidth(Fraction(repr(float(gbps))) * 1000 / Fraction(repr(float(clock_mhz))))

    rb, wb = bw(p.read_gbps, read_bandwidth), bw(p.write_gbps, write_bandwidth)
    return MediaTiming(lat(p.read_latency_ns, read_latency), lat(p.write_latency_ns, write_latency),
                       None if rb is None else str(rb), None if wb is None else str(wb),
                       preset=preset, clock_mhz=float(clock_mhz))
