"""Build parameters of the device, validated once and shared by RTL, golden model and benches.

Pure Python (no Amaranth import): the golden model reads the memory map and limits from here.
"""
from dataclasses import dataclass, asdict, replace
import json

LINE_BYTES = 64
ELEM_BYTES = 4
ELEMS_PER_LINE = LINE_BYTES // ELEM_BYTES
SUPPORTED_DIMS = (16, 32, 64, 128)
# Regions of the memory map (architecture 4); host access per region in docs/coherence.md
REGIONS = ("table", "staging", "log", "superblock", "slots")
HOST_RW_REGIONS = ("table", "staging")        # coherent, host may cache
HOST_RO_REGIONS = ("superblock", "slots")     # host may read the current value, never cache


@dataclass(frozen=True)
class DeviceConfig:
    """One hardware configuration.

    Regions are half-open byte ranges ``[base, base + size)`` of device physical address space.
    ``max_reads``/``max_writes`` are the outstanding-request limits of the media (AXI4) port; the
    gather engine keeps up to ``max_reads`` row reads in flight (Little's law: size it at least
    at the PMEM read latency in cycles for one line per cycle).
    """
    addr_bits: int = 40
    media_data_bits: int = 512
    max_reads: int = 256
    max_writes: int = 256
    axi_id_bits: int = 4
    frac_bits: int = 24
    acc_bits: int = 48
    table_base: int = 0x00_0000_0000
    table_size: int = 1 << 34
    staging_base: int = 0x10_0000_0000
    staging_size: int = 1 << 30
    # device-only persistent regions (docs/coherence.md: host access is refused / read-only)
    log_base: int = 0x04_0000_0000
    log_size: int = 1 << 30
    superblock_base: int = 0x04_4000_0000
    superblock_size: int = 4096
    slots_base: int = 0x04_8000_0000
    slots_size: int = 1 << 29
    # DCOH (docs/coherence.md)
    sf_sets: int = 64          # snoop-filter sets (power of two)
    sf_ways: int = 4           # snoop-filter ways
    bi_tags: int = 8           # BISnp tracker entries (BITags)
    park_slots: int = 4        # host Reqs waiting for a BIRsp without blocking the Req channel
    host_reads: int = 256      # host media reads in flight (DRS context FIFO depth)
    host_writes: int = 256     # host media writes in flight (Cmp context FIFO depth)
    wr_buckets: int = 256      # hashed in-flight-write counters that order host reads after writes
    # training state (docs/training.md)
    log_set_sets: int = 1024   # logged-set sets (power of two); exact per-batch set of rows
    log_set_ways: int = 8      # logged-set ways (8192 rows per batch): enough that a batch of
                               # ~1000 random rows overflows no set; a row that finds its set
                               # full is re-logged synchronously at UPDATE (docs/benchmarks.md)
    log_window: int = 2048     # undo records in flight at most, counted from slot allocation
                               # (recovery scans this far past the first invalid slot: one
                               # pipelined header read per slot). Above log_buffer_lines +
                               # max_writes so that the buffer, not the window, is the limit.
    log_buffer_lines: int = 1024  # undo logger write buffer (power of two): data lines queued
                               # for the write port (block RAM, log_buffer_lines x 513 bit)
                               # plus as many record headers (log_buffer_lines x 122 bit).
                               # The LOOKUP tee stalls only when it is full; the backlog of a
                               # LOOKUP of N new rows read at one line per cycle and written
                               # at one line per cycle is N lines (the headers), so 1024
                               # covers 1024 new rows of any dim. Default: 513 Kibit + 122
                               # Kibit (16 + 4 Xilinx RAMB36 / 26 + 7 Intel M20K).
    upd_rows: int = 1024       # update engine: row tracker table entries (power of two;
                               # 8 ways of upd_rows / 8 sets in block RAM, plus upd_victims
                               # in a CAM); with distinct random rows at dim 16 it covers the
                               # row read + write round trip up to PMEM latency 300, so the
                               # write port stays busy there (docs/benchmarks.md)

    def __post_init__(self):
        def need(cond, msg):
            if not cond:
                raise ValueError(f"DeviceConfig: {msg}")
        need(isinstance(self.addr_bits, int) and 16 <= self.addr_bits <= 52,
             f"addr_bits must be 16..52, got {self.addr_bits!r}")
        need(self.media_data_bits in (64, 128, 256, 512),
             f"media_data_bits must be 64, 128, 256 or 512, got {self.media_data_bits!r}")
        for name in ("max_reads", "max_writes"):
            v = getattr(self, name)
            need(isinstance(v, int) and v >= 2 and (v & (v - 1)) == 0 and v <= 4096,
                 f"{name} must be a power of two in 2..4096, got {v!r}")
        need(1 <= self.axi_id_bits <= 16, f"axi_id_bits must be 1..16, got {self.axi_id_bits!r}")
        need(0 <= self.frac_bits <= 30, f"frac_bits must be 0..30, got {self.frac_bits!r}")
        need(33 <= self.acc_bits <= 64, f"acc_bits must be 33..64, got {self.acc_bits!r}")
        spans = [(r, getattr(self, r + "_base"),
                  getattr(self, r + "_base") + getattr(self, r + "_size")) for r in REGIONS]
        for r, base, end in spans:
            need(base % LINE_BYTES == 0 and end > base and (end - base) % LINE_BYTES == 0,
                 f"{r} region must be line aligned and non-empty, got base={base:#x} "
                 f"size={end - base:#x}")
            need(end <= (1 << self.addr_bits),
                 f"{r} region [{base:#x}, {end:#x}) exceeds addr_bits={self.addr_bits}")
        for i, (r, b0, e0) in enumerate(spans):
            for q, b1, e1 in spans[i + 1:]:
                need(e0 <= b1 or e1 <= b0, f"{r} and {q} regions overlap")
        for name, lo, hi in (("sf_sets", 1, 4096), ("sf_ways", 1, 16), ("bi_tags", 1, 64),
                             ("park_slots", 1, 16), ("host_reads", 2, 4096),
                             ("host_writes", 2, 4096), ("wr_buckets", 1, 4096),
                             ("log_set_sets", 1, 4096),
                             ("log_set_ways", 1, 8), ("log_window", 1, 8192),
                             ("log_buffer_lines", 2, 16384),
                             ("upd_rows", 16, 4096)):
            v = getattr(self, name)
            need(isinstance(v, int) and lo <= v <= hi, f"{name} must be {lo}..{hi}, got {v!r}")
        for name in ("sf_sets", "host_reads", "host_writes", "wr_buckets", "log_set_sets",
                     "log_buffer_lines", "upd_rows"):
            v = getattr(self, name)
            need(v & (v - 1) == 0, f"{name} must be a power of two, got {v}")

    @property
    def max_bag(self) -> int:
        """Longest bag the pooling accumulator sums exactly (longer bags are an error)."""
        return 1 << (self.acc_bits - 32)

    @property
    def upd_ways(self) -> int:
        """Ways of the update engine's row tracker table (``upd_rows / upd_ways`` sets)."""
        return 8

    @property
    def upd_victims(self) -> int:
        """Victim CAM entries of the update engine's row tracker (rows whose set is full)."""
        return min(16, self.upd_rows // 4)

    @property
    def log_slots(self) -> int:
        """Undo-log slots in the log region (docs/training.md)."""
        return self.log_size // (9 * LINE_BYTES)

    @property
    def beats_per_line(self) -> int:
        return 512 // self.media_data_bits

    def region_of(self, addr: int):
        """Name of the region holding byte address ``addr``, or None (outside HDM)."""
        for r in REGIONS:
            base = getattr(self, r + "_base")
            if base <= addr < base + getattr(self, r + "_size"):
                return r
        return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DeviceConfig":
        return cls(**json.loads(text))

    def with_(self, **kw) -> "DeviceConfig":
        return replace(self, **kw)


DEFAULT = DeviceConfig()


# Named configurations used by generation, tests, benches and the FPGA flow (docs/fpga.md).
CONFIGS = {
    "default": DEFAULT,
    # Simulation and benches: the default (512-bit media port, 256 reads/writes outstanding,
    # which covers a PMEM read latency of 256 cycles at one line per cycle).
    "sim": DEFAULT,
    # FPGA prototype on a Lattice LFE5UM5G-85F (trainingcxl synth). Only the media port
    # and the outstanding limits change; LOOKUP semantics (acc_bits, so max_bag, and the memory
    # map) stay those of the default, so the same golden model and tests apply.
    # - media_data_bits=128: the native port width of a DDR3 x16 controller at 4:1 on ECP5
    #   (800 MT/s x 16 bit = 1.6 GB/s = 128 bit at 100 MHz); a line is a 4-beat burst.
    # - max_reads=64: Little's law at one line per cycle covers a 64-cycle read latency (at
    #   128-bit beats, one line per 4 cycles, it covers 256 cycles); the word readers then get
    #   8 lines each (max_reads/8) and all engine FIFOs fit distributed RAM or a few DP16KD.
    # - max_writes=64: pooled output lines are written at most at the row read rate.
    # - DCOH: 16 x 4 snoop filter, 4 BITags, 64 host reads/writes in flight, 64 write buckets.
    # - UPDATE: 64 rows in flight (upd_rows; 8 x 8 in block RAM + 16 victims): at one line per
    #   4 cycles (128-bit beats) that covers a 256-cycle round trip (row read to write ack) at
    #   dim 16.
    # - undo logger: 64 buffered lines (log_buffer_lines: 64 x 513 bit of data lines and
    #   64 x 122 bit of headers; as block RAM 15 + 4 DP16KD, width-bound at 36 bit each, of
    #   208), window 128 (a 128 x 2-bit FIFO).
    "fpga-ecp5": DEFAULT.with_(media_data_bits=128, max_reads=64, max_writes=64, sf_sets=16,
                               bi_tags=4, host_reads=64, host_writes=64, wr_buckets=64,
                               log_set_sets=64, log_set_ways=4, log_window=128,
                               log_buffer_lines=64, upd_rows=64),
}


def named(name: str) -> DeviceConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown configuration {name!r}; known: {', '.join(sorted(CONFIGS))}") \
            from None
