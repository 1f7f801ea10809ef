"""Golden model of the failure-tolerant training state, implementing docs/training.md exactly.

The model executes descriptors one at a time against a ``MemoryImage`` and writes the same bytes
as the RTL: table rows, undo-log slots, superblock, outputs and completion records (``cycles`` is
0). Every memory write of the device but the LOOKUP outputs (see below) goes through
``TrainingDevice._write`` and is reported to
the optional hook ``on_write(addr, data, what)`` after it lands, so a test can rebuild the image
at any persistence point (a crash) by replaying a prefix of the writes.

Write order (the model's; the contract allows more freedom, the final image is the same):
LOOKUP: outputs (``DeviceModel.lookup``), then for each record its data lines then its header;
UPDATE: per row, if it must be logged, the record (data lines, header), then the row (one write);
COMMIT: the 8-byte ``committed`` word; recovery: rows from the highest slot down, then the 8-byte
``recovery_epoch`` word; formatting: zeros to bytes 8..63, then the magic/version word (no epoch write);
each completion record after its descriptor's writes. ``what`` is one of ``"log_data"``,
``"log_header"``, ``"row"``, ``"commit"``, ``"recover_row"``, ``"sb_epoch"``, ``"sb_format"``,
``"sb_magic"``, ``"cpl"``. Exception: LOOKUP outputs are written by ``DeviceModel.lookup``
directly and are not reported (staging only; no persistence state depends on them).

Recovery epoch (docs/training.md sections 5-6): the device keeps ``recovery_epoch``, a copy of the
superblock word, and writes it into every undo record header (``epoch``, bytes 32..39). Recovery
only scans and applies *current* records (magic, ``batch == C+1``, ``epoch == E``) and ends with
``recovery_epoch = E+1`` (copy too); formatting leaves word and copy 0.

Choices where docs/training.md leaves room (the RTL must match these):

1. LOOKUP + LOG, rows logged: the rows of bags ``0 .. w-1`` (the bags that pass) in issue order,
   plus, when the LOOKUP fails with ``INDEX_RANGE`` in bag ``w``, the rows of bag ``w`` before
   the failing index (they were read). A bag-level failure (``OFFSETS_ORDER``, ``BAG_TOO_LONG``,
   ``ADDR_RANGE`` of the indices end) of bag ``w`` logs no row of bag ``w``; command-level
   failures log nothing.
2. LOOKUP + LOG with a full log: a row that finds the log full is not logged and not inserted in
   the logged set; later rows that are already in the set need no record, the others also find
   the log full. Status (as the doc now says): the lookup's own error, if any, wins (all its
   fields are the lookup's); otherwise ``LOG_FULL`` with ``err_value = log_slots`` and
   ``err_bag`` 0 (the status is the command's, decided after its last row: the RTL's gather
   does not carry bag numbers to the logger). ``rows``/``sat``/``lines`` are always the
   lookup's (its outputs are written). ``log_records`` = records written.
3. UPDATE ``LOG_FULL``: ``err_bag`` = the bag of the row that could not be logged; ``rows``,
   ``sat``, ``lines``, ``log_records`` count what was done before it.
4. Completion ``batch`` is the descriptor's batch in every case (for a successful COMMIT that is
   the batch now committed); ``kind`` is the descriptor's raw kind byte (also for
   ``UNKNOWN_KIND``); ``err_bag`` is 0 for every error that is not bag-level or row-level.
5. ``RING_CONFIG`` check order at the doorbell: ``CMD_SIZE`` (power of two in 2..65536, value =
   size), then ``CMD_BASE`` (64 B aligned and ``[base, base + 64*size)`` inside staging, value =
   base), then ``CPL_BASE`` (same, value = base). Doorbell check order as section 3 lists them.
6. Width checks (section 2), for LOOKUP/UPDATE after kind, table id and batch, before any
   engine check: directory ``DIM`` >= 2^16 is ``BAD_DIM`` (value = dim); then table base,
   ``offsets_addr``, ``indices_addr``, ``data_addr`` (in that order) >= 2^``addr_bits`` is
   ``ADDR_RANGE`` (value = that address). After them the engine's checks compare addresses and
   sizes as unbounded integers (nothing is truncated; an address outside every region fails
   the region check).
7. ``BAD_TABLE`` is only table id >= ``N_TABLES``; an invalid directory entry of a valid id fails
   the width checks or the engine's own checks (``BAD_DIM``/``ALIGN``/``ADDR_RANGE``), as
   section 2 says.
8. Recovery formatting writes bytes 8..63 of the superblock line as zeros first (the
   magic/version word untouched), then the 8-byte magic/version word; it does not write
   ``recovery_epoch`` (stays 0 from the zero bytes).
   Recovery while descriptors are pending is refused with ``CSR_BUSY``. The epoch write happens
   on every non-formatting recovery, also when no record was applied; ``E+1`` wraps modulo 2^64.
9. ``seq`` counts every descriptor completed (via ``execute`` or the ring) since the last ring
   configuration or reset, modulo 2^32.
10. ``configure_ring`` models the host's five 32-bit register writes in the order CMD_BASE_LO,
   CMD_BASE_HI, CMD_SIZE, CPL_BASE_LO, CPL_BASE_HI; refused while pending, each one reports its
   own ``CSR_BUSY`` (value = that register's byte address from hw/csr/regmap.json).
11. Device reset sets the epoch copy to 0; it is meaningless until recovery loads it (no
   descriptor runs before recovery).

MLP snapshots (docs/training.md section 9). The model executes a SNAPSHOT atomically inside
``execute``: after its checks it writes the payload lines (``"snap_data"``, one write per line
holding only the payload bytes ``< length`` of that line, so nothing past the payload is
touched), then the header line (``"snap_header"``, 64 bytes), then the superblock's 8-byte
``mlp_slot`` word (``"snap_flip"``, value slot + 1), each through ``_write``/``on_write`` like
every other device write, so a crash campaign can cut between any two of them; then
``active``/``mlp_slot``/``mlp_epoch`` are updated. Its completion (status OK, ``batch`` = the
epoch, ``lines`` = ceil(length/64), other counters 0) is returned after those writes. A snapshot
is therefore never *in flight* in the model: ``snap_busy`` is always False, the last accepted
epoch ``A`` (``mlp_accepted``) always equals the last completed one ``P`` (``mlp_epoch``), and a
COMMIT never waits: its lag check is ``b - P <= k`` or ``MLP_LAG`` (value ``b - A`` = ``b - P``), made
after the batch check, before anything is written. The RTL may finish the copy after the
completion; once it is done (``STATUS.SNAP_BUSY`` = 0) the memory image equals the model's.

12. SNAPSHOT checks after the kind check (no table or batch check), in the contract's order:
   ``BAD_EPOCH``, ``ADDR_RANGE`` (>= 2^addr_bits), ``SNAP_LENGTH``, ``ADDR_RANGE`` (staging:
   ``staging_base <= data_addr`` and ``data_addr + length <= staging end``; for length 0
   ``data_addr < staging end``). ``err_bag`` 0, ``batch`` = the epoch.
13. Recovery chooses the MLP slot after the epoch write (reads only); formatting a fresh
   superblock reports none (``mlp_slot`` = ``mlp_epoch`` = 0). Device reset clears
   ``mlp_slot``/``mlp_epoch``/``A``/``active`` (meaningless until recovery) and sets
   ``mlp_lag`` to its reset value 0xFFFFFFFF.
14. The lag check compares literally, ``b - P <= k`` with 64-bit ``b - P`` and 32-bit ``k``:
   the reset value 0xFFFFFFFF is "no bound" only while ``b - P < 2^32`` (a COMMIT 2^32 batches
   past the last snapshot is refused even then). A SNAPSHOT of the open batch that fails its
   checks leaves ``A``; a refused COMMIT changes nothing but the error registers.
"""
import json
import zlib
from pathlib import Path

import numpy as np

from hw.config import DeviceConfig, ELEMS_PER_LINE, LINE_BYTES, SUPPORTED_DIMS
from hw.csr.regmap import regmap_document
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, DESC_FIELDS, FLAG_DESC_LR, FLAG_LOG,
                          FLAG_NOLOG, LOG_HDR_FIELDS, LOG_MAGIC, LOG_SLOT_BYTES, N_TABLES,
                          SB_FIELDS, SB_MAGIC, SB_VERSION, SNAP_HDR_FIELDS, SNAP_MAGIC,
                          DescKind, DeviceError, pack_fields, unpack_fields)
from .device import DeviceModel, LookupCmd
from .fixedpoint import I32_MAX, I32_MIN, mul_round
from .memory import MemoryImage

_LOG_MAGIC_BYTES = LOG_MAGIC.to_bytes(4, "little")

E = DeviceError

# CSR byte addresses used as ``err_value`` of CSR_BUSY, read from the generated register map
# (hw.csr.regmap: a shared encoding like hw/encodings.py, read as data; it imports no Amaranth).
CSR_NAMES = ("CONTROL", "CMD_BASE_LO", "CMD_BASE_HI", "CMD_SIZE", "CPL_BASE_LO", "CPL_BASE_HI",
             "MLP_EPOCH_LO", "MLP_EPOCH_HI", "MLP_SLOT", "MLP_LAG")
RING_CSRS = CSR_NAMES[1:6]            # the order configure_ring writes them
MLP_LAG_RESET = 0xFFFFFFFF            # MLP_LAG CSR reset value: no bound


def _load_csr_addr(path=None) -> dict:
    doc = regmap_document() if path is None else json.loads(Path(path).read_text())
    regs = {r["name"]: int(r["offset"]) for r in doc["registers"]}
    missing = [n for n in CSR_NAMES if n not in regs]
    if missing:
        raise KeyError(f"{path or 'hw.csr regmap.json'}: registers {missing} missing")
    return {n: regs[n] for n in CSR_NAMES}


CSR_ADDR = _load_csr_addr()


# ---- undo log: logged set, record layout, CRC ----------------------------------------------------

def log_set_index(sets: int, table: int, row: int) -> int:
    """Set of ``(table, row)``: ``(row ^ (row >> S) ^ table) & (sets - 1)``, ``S = log2(sets)``."""
    s = sets.bit_length() - 1
    return (row ^ (row >> s) ^ table) & (sets - 1)


class LoggedSet:
    """Exact per-batch set of logged ``(table, row)``: ``sets`` x ``ways``, lowest invalid way
    first, no replacement (a full set refuses the insert and counts an overflow)."""

    def __init__(self, sets: int, ways: int):
        self.sets, self.ways = sets, ways
        self.overflows = 0
        self.clear()

    def clear(self):
        """Retire: every way invalid (``overflows`` is a lifetime counter and is kept)."""
        self.ways_of = [[None] * self.ways for _ in range(self.sets)]

    def contains(self, table: int, row: int) -> bool:
        return (table, row) in self.ways_of[log_set_index(self.sets, table, row)]

    def insert(self, table: int, row: int) -> bool:
        """Insert into the lowest invalid way; False (one overflow counted) if the set is full."""
        ways = self.ways_of[log_set_index(self.sets, table, row)]
        for i, w in enumerate(ways):
            if w is None:
                ways[i] = (table, row)
                return True
        self.overflows += 1
        return False


def record_crc(row_bytes: bytes, header_line: bytes) -> int:
    """CRC-32 (zlib) over the old row contents then the 64-byte header line with ``crc`` zeroed."""
    hdr = bytearray(header_line[:LINE_BYTES])
    _, off, w = next(f for f in LOG_HDR_FIELDS if f[0] == "crc")
    hdr[off:off + w] = bytes(w)
    return zlib.crc32(bytes(row_bytes) + bytes(hdr)) & 0xFFFFFFFF


def make_record(table: int, dim: int, batch: int, row: int, addr: int, row_bytes: bytes,
                epoch: int) -> bytes:
    """Header line (64 B) of an undo record for the given old row contents (CRC filled in);
    ``epoch`` = the device's copy of the superblock's ``recovery_epoch``."""
    vals = dict(magic=LOG_MAGIC, table=table, dim=dim, batch=batch, row=row, addr=addr, crc=0,
                epoch=epoch)
    hdr = pack_fields(LOG_HDR_FIELDS, vals, LINE_BYTES)
    vals["crc"] = record_crc(row_bytes, hdr)
    return pack_fields(LOG_HDR_FIELDS, vals, LINE_BYTES)


def slot_addr(cfg: DeviceConfig, s: int) -> int:
    return cfg.log_base + LOG_SLOT_BYTES * s


def read_records(cfg: DeviceConfig, mem: MemoryImage, n: int) -> list[dict]:
    """Headers of slots 0..n-1 as dicts (plus ``data``, the dim*4 bytes after, if dim is valid)."""
    out = []
    for s in range(n):
        a = slot_addr(cfg, s)
        h = unpack_fields(LOG_HDR_FIELDS, mem.read(a, LINE_BYTES))
        if h["dim"] in SUPPORTED_DIMS:
            h["data"] = mem.read(a + LINE_BYTES, h["dim"] * 4)
        out.append(h)
    return out


# ---- MLP snapshot slots (section 9) --------------------------------------------------------------

def snap_slot_bytes(cfg: DeviceConfig) -> int:
    """Bytes of one slot: ``(slots_size // 2) // 64 * 64``."""
    return (cfg.slots_size // 2) // LINE_BYTES * LINE_BYTES


def snap_capacity(cfg: DeviceConfig) -> int:
    """Largest payload of a slot (slot bytes minus the header line)."""
    return snap_slot_bytes(cfg) - LINE_BYTES


def snap_slot_addr(cfg: DeviceConfig, i: int) -> int:
    """Base of slot ``i`` (0 = A, 1 = B); its payload starts one line later."""
    if i not in (0, 1):
        raise ValueError(f"snapshot slot {i} is not 0 or 1")
    return cfg.slots_base + i * snap_slot_bytes(cfg)


def snap_crc(payload: bytes, header_line: bytes) -> int:
    """CRC-32 (zlib) over the payload zero-padded to whole lines, then the 64-byte header line
    with its ``crc`` bytes zero."""
    payload = bytes(payload)
    pad = -len(payload) % LINE_BYTES
    hdr = bytearray(header_line[:LINE_BYTES])
    _, off, w = next(f for f in SNAP_HDR_FIELDS if f[0] == "crc")
    hdr[off:off + w] = bytes(w)
    return zlib.crc32(payload + bytes(pad) + bytes(hdr)) & 0xFFFFFFFF


def make_snap_header(epoch: int, payload: bytes) -> bytes:
    """Slot header line (magic, crc, epoch, length; other bytes 0) for ``payload``."""
    vals = dict(magic=SNAP_MAGIC, crc=0, epoch=epoch, length=len(payload))
    vals["crc"] = snap_crc(payload, pack_fields(SNAP_HDR_FIELDS, vals, LINE_BYTES))
    return pack_fields(SNAP_HDR_FIELDS, vals, LINE_BYTES)


def read_snap_slot(cfg: DeviceConfig, mem: MemoryImage, i: int) -> tuple:
    """``(header dict, payload bytes or None)`` of slot ``i`` as stored (no validity check;
    payload None when ``length`` exceeds the capacity)."""
    a = snap_slot_addr(cfg, i)
    h = unpack_fields(SNAP_HDR_FIELDS, mem.read(a, LINE_BYTES))
    data = mem.read(a + LINE_BYTES, h["length"]) if h["length"] <= snap_capacity(cfg) else None
    return h, data


def snap_slot_valid(cfg: DeviceConfig, mem: MemoryImage, i: int, committed: int) -> bool:
    """Recovery's validity test of slot ``i``: magic, ``length`` <= capacity, ``epoch`` <=
    ``committed`` and the CRC over the payload lines (bytes past ``length`` taken as 0) and the
    header."""
    a = snap_slot_addr(cfg, i)
    line = mem.read(a, LINE_BYTES)
    h, data = read_snap_slot(cfg, mem, i)
    return (h["magic"] == SNAP_MAGIC and data is not None and h["epoch"] <= committed
            and snap_crc(data, line) == h["crc"])


def choose_mlp_slot(cfg: DeviceConfig, mem: MemoryImage, committed: int):
    """Recovery's slot choice: ``(slot index, epoch)`` of the valid slot with the larger epoch
    (slot A on a tie), or None if neither is valid. Reads only."""
    best = None
    for i in (0, 1):
        if snap_slot_valid(cfg, mem, i, committed):
            e = read_snap_slot(cfg, mem, i)[0]["epoch"]
            if best is None or e > best[1]:
                best = (i, e)
    return best


def read_mlp_slot(cfg: DeviceConfig, mem: MemoryImage, committed: int):
    """What a host reloads after recovery: ``(epoch, payload bytes)`` of the slot recovery
    chooses for committed batch ``committed`` (``choose_mlp_slot``), or None. Pure function of
    its arguments (reads only)."""
    ch = choose_mlp_slot(cfg, mem, committed)
    if ch is None:
        return None
    i, e = ch
    return e, read_snap_slot(cfg, mem, i)[1]


class _Stop(Exception):
    """Internal: ends a descriptor with an error status (counters so far are kept)."""

    def __init__(self, code, value, bag=0):
        self.code, self.value, self.bag = E(code), int(value), int(bag)


class _Done(Exception):
    """Internal: a descriptor finished early without error."""


# ---- the device ----------------------------------------------------------------------------------

class TrainingDevice:
    """Training state machine of docs/training.md over ``mem``.

    Registers (model attributes): ``committed`` (C), ``recovery_epoch`` (the device's copy of
    the superblock word, written into record headers), ``ready``, ``lr`` (LR CSR, u32),
    ``tables[t] = (base, rows, dim)``, ``err_code``, ``err_value``, ``err_count``,
    ``status_error`` (sticky), ``irq_status`` (set of "CPL", "ERR", "RECOVERED"),
    ``recovered_records``, ``next_slot`` (LOG_SLOT), ring ``cmd_base``/``cmd_size``/
    ``cpl_base``/``head``/``tail``, ``seq``. ``logged`` is the logged set.
    MLP snapshots (section 9): ``mlp_lag`` (the MLP_LAG CSR, k, settable, reset 0xFFFFFFFF),
    ``mlp_slot`` (MLP_SLOT: 0 none, 1 A, 2 B), ``mlp_epoch`` (MLP_EPOCH: epoch of the last
    completed or recovered snapshot, ``P``), ``mlp_accepted`` (``A``; equals ``mlp_epoch`` in
    the model), ``snap_busy`` (STATUS.SNAP_BUSY, always False: SNAPSHOT runs atomically).
    ``csr_read``/``csr_write`` give these by register name.
    """

    def __init__(self, cfg: DeviceConfig, mem: MemoryImage):
        self.cfg = cfg
        self.mem = mem
        self.on_write = None            # hook(addr, data: bytes, what: str) after every write
        self.reset()

    # -- reset and registers -----------------------------------------------------------------------
    def reset(self):
        """Device reset: not ready, log retired, ring unconfigured and empty, errors cleared,
        the table directory and LR at their reset values (0, as every register of the map,
        docs/registers.md: the host programs them again)."""
        self.tables = [(0, 0, 0)] * N_TABLES
        self.lr = 0
        self.ready = False
        self.committed = 0
        self.recovery_epoch = 0
        self.logged = LoggedSet(self.cfg.log_set_sets, self.cfg.log_set_ways)
        self.next_slot = 0
        self.recovered_records = 0
        self.err_code, self.err_value, self.err_count = E.OK, 0, 0
        self.status_error = False
        self.irq_status = set()
        self.cmd_base = self.cmd_size = self.cpl_base = 0
        self.head = self.tail = 0
        self.seq = 0
        self.mlp_lag = MLP_LAG_RESET
        self.mlp_slot = 0
        self.mlp_epoch = 0
        self.mlp_accepted = 0

    # MLP snapshot registers (section 9) -------------------------------------------------------
    snap_busy = False               # STATUS.SNAP_BUSY: a snapshot is never in flight in the model

    def csr_read(self, name: str) -> int:
        """Model value of the section-9 CSRs: ``MLP_EPOCH_LO/HI``, ``MLP_SLOT``, ``MLP_LAG``,
        ``SNAP_BUSY`` (the STATUS bit)."""
        vals = {"MLP_EPOCH_LO": self.mlp_epoch & 0xFFFFFFFF, "MLP_EPOCH_HI": self.mlp_epoch >> 32,
                "MLP_SLOT": self.mlp_slot, "MLP_LAG": self.mlp_lag,
                "SNAP_BUSY": int(self.snap_busy)}
        return vals[name]

    def csr_write(self, name: str, value: int):
        """Write a read/write section-9 CSR (only ``MLP_LAG``, 32 bit); a write to the
        read-only ones is ``CSR_RO`` (value = its byte address), as the RTL reports it."""
        value = int(value)
        if name == "MLP_LAG":
            if not 0 <= value < 1 << 32:
                raise ValueError(f"MLP_LAG={value} does not fit 32 bits")
            self.mlp_lag = value
        elif name in ("MLP_EPOCH_LO", "MLP_EPOCH_HI", "MLP_SLOT"):
            self._error(E.CSR_RO, CSR_ADDR[name])
        else:
            raise KeyError(f"csr_write: {name} is not modelled here")

    def read_mlp_slot(self, mem: MemoryImage = None):
        """``(epoch, payload)`` of the slot recovery would choose from ``mem`` (default the
        device's memory) for the device's committed batch, or None (``read_mlp_slot``)."""
        return read_mlp_slot(self.cfg, self.mem if mem is None else mem, self.committed)

    def set_table(self, t: int, base: int, rows: int, dim: int):
        """Program directory entry ``t`` (TABLE<t>_BASE/ROWS/DIM)."""
        if not 0 <= t < N_TABLES:
            raise ValueError(f"table id {t} outside 0..{N_TABLES - 1}")
        for name, v, bits in (("base", base, 64), ("rows", rows, 32), ("dim", dim, 32)):
            if not 0 <= int(v) < (1 << bits):
                raise ValueError(f"TABLE{t}_{name.upper()}={v} does not fit {bits} bits")
        self.tables[t] = (int(base), int(rows), int(dim))

    def err_clear(self):
        self.status_error = False

    def _error(self, code, value):
        self.err_code, self.err_value = E(code), int(value)
        self.err_count += 1
        self.status_error = True
        self.irq_status.add("ERR")

    def _write(self, addr: int, data: bytes, what: str):
        data = bytes(data)
        self.mem.write(addr, data)
        if self.on_write is not None:
            self.on_write(addr, data, what)

    @property
    def log_slots(self) -> int:
        return self.cfg.log_slots

    @property
    def pending(self) -> int:
        return (self.tail - self.head) % self.cmd_size if self.cmd_size else 0

    # -- tables ----------------------------------------------------------------------------------
    def table_array(self, t: int) -> np.ndarray:
        """Current contents of table ``t`` as int32 (rows, dim)."""
        base, rows, dim = self.tables[t]
        return self.mem.read_i32(base, rows * dim).reshape(rows, dim)

    def snapshot_tables(self, table_ids=None) -> dict:
        """``{t: bytes}`` of the configured tables (all with dim > 0 and rows > 0 by default)."""
        if table_ids is None:
            table_ids = [t for t, (_, r, d) in enumerate(self.tables) if r and d]
        return {t: self.mem.read(self.tables[t][0], self.tables[t][1] * self.tables[t][2] * 4)
                for t in table_ids}

    # -- recovery (section 6) --------------------------------------------------------------------
    def recover(self) -> int:
        """CONTROL.RECOVER: format a fresh superblock or roll the open batch back from the undo
        log (current records only), then ``recovery_epoch = E+1``, then choose the MLP slot
        (section 9; none when formatting). Sets ``mlp_slot``/``mlp_epoch``, ``ready``,
        ``committed``, ``recovery_epoch``, ``recovered_records``; returns records applied.
        With descriptors pending it is refused (``CSR_BUSY``) and returns -1."""
        cfg, mem = self.cfg, self.mem
        if self.pending:
            self._error(E.CSR_BUSY, CSR_ADDR["CONTROL"])
            return -1
        sb = unpack_fields(SB_FIELDS, mem.read(cfg.superblock_base, LINE_BYTES))
        applied = 0
        formatting = sb["magic"] != SB_MAGIC or sb["version"] != SB_VERSION
        if formatting:
            self._write(cfg.superblock_base + 8, bytes(LINE_BYTES - 8), "sb_format")
            word = SB_MAGIC | (SB_VERSION << 32)
            self._write(cfg.superblock_base, word.to_bytes(8, "little"), "sb_magic")
            c = epoch = 0
            ch = None                    # a fresh superblock reports no MLP slot
        else:
            c, e = sb["committed"], sb["recovery_epoch"]
            open_batch = c + 1

            def current(line):
                if line[:4] != _LOG_MAGIC_BYTES:
                    return None
                h = unpack_fields(LOG_HDR_FIELDS, line)
                return h if h["batch"] == open_batch and h["epoch"] == e else None

            def header(s):
                # one read per header, as the RTL's scan: the reads are media events a trace
                # compares (docs/traces.md)
                return mem.read(slot_addr(cfg, s), LINE_BYTES)

            q = 0
            while q < self.log_slots and current(header(q)) is not None:
                q += 1
            t0, t1 = cfg.table_base, cfg.table_base + cfg.table_size
            for s in range(min(q + cfg.log_window, self.log_slots) - 1, -1, -1):
                a = slot_addr(cfg, s)
                line = header(s)
                h = current(line)
                if h is None:
                    continue
                dim, addr = h["dim"], h["addr"]
                if not (dim in SUPPORTED_DIMS and addr % LINE_BYTES == 0
                        and t0 <= addr and addr + dim * 4 <= t1):
                    continue
                data = mem.read(a + LINE_BYTES, dim * 4)
                if record_crc(data, line) != h["crc"]:
                    continue
                self._write(addr, data, "recover_row")
                applied += 1
            # every rollback write has landed (the model's writes are immediate): new epoch
            epoch = (e + 1) & (2**64 - 1)
            _, off, w = next(f for f in SB_FIELDS if f[0] == "recovery_epoch")
            self._write(cfg.superblock_base + off, epoch.to_bytes(w, "little"), "sb_epoch")
            # section 9: choose the MLP slot (reads only)
            ch = choose_mlp_slot(cfg, mem, c)
        self.committed = c
        self.recovery_epoch = epoch
        self.mlp_slot, self.mlp_epoch = (0, 0) if ch is None else (ch[0] + 1, ch[1])
        self.mlp_accepted = self.mlp_epoch
        self.logged.clear()
        self.next_slot = 0
        self.recovered_records = applied
        self.ready = True
        self.irq_status.add("RECOVERED")
        return applied

    # -- undo log ----------------------------------------------------------------------------------
    def _log_row(self, t: int, row: int, addr: int, dim: int, old: bytes) -> bool:
        """Write the record of ``row`` (old contents ``old``) in the next slot; False if full."""
        if self.next_slot >= self.log_slots:
            return False
        a = slot_addr(self.cfg, self.next_slot)
        self._write(a + LINE_BYTES, old, "log_data")
        self._write(a, make_record(t, dim, self.committed + 1, row, addr, old,
                                   self.recovery_epoch), "log_header")
        self.next_slot += 1
        return True

    # -- checks shared by LOOKUP and UPDATE --------------------------------------------------------
    def _cmd_checks(self, dim, rows, tbase, data_addr, oaddr, iaddr, n):
        """lookup.md command-level checks 1-3 (``data_addr`` = out or grads); raises _Stop."""
        cfg = self.cfg
        if dim not in SUPPORTED_DIMS:
            raise _Stop(E.BAD_DIM, dim)
        for a, al in ((tbase, LINE_BYTES), (data_addr, LINE_BYTES), (oaddr, 4), (iaddr, 4)):
            if a % al:
                raise _Stop(E.ALIGN, a)
        t0, t1 = cfg.table_base, cfg.table_base + cfg.table_size
        s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
        for base, length, r0, r1 in ((tbase, rows * dim * 4, t0, t1), (oaddr, 4 * (n + 1), s0, s1),
                                     (data_addr, n * dim * 4, s0, s1)):
            if not (r0 <= base and base + length <= r1):
                raise _Stop(E.ADDR_RANGE, base)
        if not (s0 <= iaddr <= s1):
            raise _Stop(E.ADDR_RANGE, iaddr)

    def _width_checks(self, d):
        """docs/training.md section 2, the command processor's widths (LOOKUP/UPDATE, after
        kind, table id and batch, before the engine): directory DIM >= 2^16 -> ``BAD_DIM``
        (value = dim); table base, offsets, indices, data address >= 2^addr_bits ->
        ``ADDR_RANGE`` (value = that address), in that order. Raises _Stop."""
        tbase, _, dim = self.tables[d["table"]]
        if dim >= 1 << 16:
            raise _Stop(E.BAD_DIM, dim)
        lim = 1 << self.cfg.addr_bits
        for a in (tbase, d["offsets_addr"], d["indices_addr"], d["data_addr"]):
            if a >= lim:
                raise _Stop(E.ADDR_RANGE, a)

    def _bag(self, oaddr, iaddr, b):
        """Offsets of bag ``b`` after bag-level checks 4-6 (raises _Stop with bag = b)."""
        s, e = (int(v) for v in self.mem.read_u32(oaddr + 4 * b, 2))
        if e < s:
            raise _Stop(E.OFFSETS_ORDER, e, b)
        if e - s > self.cfg.max_bag:
            raise _Stop(E.BAG_TOO_LONG, e - s, b)
        end = iaddr + 4 * e
        if end > self.cfg.staging_base + self.cfg.staging_size:
            raise _Stop(E.ADDR_RANGE, end, b)
        return s, e

    # -- descriptors -------------------------------------------------------------------------------
    def execute(self, desc: bytes) -> bytes:
        """Run one 64-byte descriptor; returns its 64-byte completion record (not written to
        memory; ``process`` does that). Raises RuntimeError before recovery (the doorbell is
        refused then, so a descriptor can never run)."""
        if not self.ready:
            raise RuntimeError("execute before recover()")
        if len(desc) != DESC_BYTES:
            raise ValueError(f"descriptor must be {DESC_BYTES} bytes, got {len(desc)}")
        d = unpack_fields(DESC_FIELDS, desc)
        cpl = dict(tag=d["tag"], kind=d["kind"], status=E.OK, batch=d["batch"])
        ctr = dict(rows=0, sat=0, lines=0, log_records=0)
        try:
            kind = d["kind"]
            if kind not in (DescKind.LOOKUP, DescKind.UPDATE, DescKind.COMMIT, DescKind.SNAPSHOT):
                raise _Stop(E.UNKNOWN_KIND, kind)
            if kind == DescKind.SNAPSHOT:
                self._snapshot(d, ctr)
                raise _Done
            if kind != DescKind.COMMIT and d["table"] >= N_TABLES:
                raise _Stop(E.BAD_TABLE, d["table"])
            logged_kind = kind != DescKind.LOOKUP or (d["flags"] & FLAG_LOG)
            if logged_kind and d["batch"] != self.committed + 1:
                raise _Stop(E.WRONG_BATCH, d["batch"])
            if kind != DescKind.COMMIT:
                self._width_checks(d)
            if kind == DescKind.LOOKUP:
                self._lookup(d, ctr)
            elif kind == DescKind.UPDATE:
                self._update(d, ctr)
            else:
                b = d["batch"]
                if b - self.mlp_epoch > self.mlp_lag:     # nothing in flight: never waits
                    raise _Stop(E.MLP_LAG, b - self.mlp_epoch)
                ctr["log_records"] = self.next_slot
                self._write(self.cfg.superblock_base + 8, d["batch"].to_bytes(8, "little"),
                            "commit")
                self.logged.clear()
                self.next_slot = 0
                self.committed = d["batch"]
        except _Done:
            pass
        except _Stop as stop:
            cpl.update(status=stop.code, err_value=stop.value, err_bag=stop.bag)
            self._error(stop.code, stop.value)
        cpl.update(ctr)
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        cpl["seq"] = self.seq
        return pack_fields(CPL_FIELDS, cpl, CPL_BYTES)

    def _snapshot(self, d, ctr):
        """SNAPSHOT (section 9), atomically: checks, payload lines (payload bytes only), header,
        superblock ``mlp_slot`` word; then ``active``/``MLP_*``. Raises _Stop on a check."""
        cfg, mem = self.cfg, self.mem
        e, src, n = d["batch"], d["data_addr"], d["length"]
        if not self.mlp_accepted < e <= self.committed + 1:
            raise _Stop(E.BAD_EPOCH, e)
        if src >= 1 << cfg.addr_bits:
            raise _Stop(E.ADDR_RANGE, src)
        if n > snap_capacity(cfg):
            raise _Stop(E.SNAP_LENGTH, n)
        s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
        if not (s0 <= src and (src + n <= s1 if n else src < s1)):
            raise _Stop(E.ADDR_RANGE, src)
        slot = 0 if self.mlp_slot == 0 else 2 - self.mlp_slot      # 1 - active
        self.mlp_accepted = e
        a = snap_slot_addr(cfg, slot)
        payload = mem.read(src, n)
        for j in range(0, n, LINE_BYTES):
            self._write(a + LINE_BYTES + j, payload[j:j + LINE_BYTES], "snap_data")
        self._write(a, make_snap_header(e, payload), "snap_header")
        _, off, w = next(f for f in SB_FIELDS if f[0] == "mlp_slot")
        self._write(cfg.superblock_base + off, (slot + 1).to_bytes(w, "little"), "snap_flip")
        self.mlp_slot, self.mlp_epoch = slot + 1, e
        ctr["lines"] = -(-n // LINE_BYTES)

    def _lookup(self, d, ctr):
        t = d["table"]
        tbase, rows, dim = self.tables[t]
        n, oaddr, iaddr, out = d["n_bags"], d["offsets_addr"], d["indices_addr"], d["data_addr"]
        self._cmd_checks(dim, rows, tbase, out, oaddr, iaddr, n)
        lc = DeviceModel(self.cfg, self.mem).lookup(LookupCmd(
            tag=0, dim=dim, table_rows=rows, n_bags=n, table_base=tbase, offsets_addr=oaddr,
            indices_addr=iaddr, out_addr=out))
        ctr.update(rows=lc.rows, sat=lc.sat, lines=lc.out_lines)
        full = False
        if d["flags"] & FLAG_LOG:
            for _b, x in self._lookup_issue_rows(lc, n, rows, oaddr, iaddr):
                if self.logged.contains(t, x):
                    continue
                addr = tbase + x * dim * 4
                if not self._log_row(t, x, addr, dim, self.mem.read(addr, dim * 4)):
                    full = True
                    continue
                self.logged.insert(t, x)
                ctr["log_records"] += 1
        if lc.err_code:
            raise _Stop(int(lc.err_code), lc.err_value, lc.err_bag)
        if full:
            raise _Stop(E.LOG_FULL, self.log_slots)

    def _lookup_issue_rows(self, lc, n, rows, oaddr, iaddr):
        """``(bag, row)`` read by a LOOKUP that passed its command-level checks, in issue order
        (docstring choice 1)."""
        w = lc.err_bag if lc.err_code else n
        for b in range(w + (1 if lc.err_code == E.INDEX_RANGE else 0)):
            s, e = (int(v) for v in self.mem.read_u32(oaddr + 4 * b, 2))
            for x in self.mem.read_u32(iaddr + 4 * s, e - s).tolist():
                if x >= rows:           # only in bag w: the failing index ends the reads
                    return
                yield b, x

    def _update(self, d, ctr):
        cfg, mem = self.cfg, self.mem
        t = d["table"]
        tbase, rows, dim = self.tables[t]
        n, oaddr, iaddr, gaddr = d["n_bags"], d["offsets_addr"], d["indices_addr"], d["data_addr"]
        nolog = bool(d["flags"] & FLAG_NOLOG)
        lr = d["lr"] if d["flags"] & FLAG_DESC_LR else self.lr
        self._cmd_checks(dim, rows, tbase, gaddr, oaddr, iaddr, n)
        rb = dim * 4
        for b in range(n):
            s, e = self._bag(oaddr, iaddr, b)
            delta = None        # the gradient is read at the bag's first item (none: unread)
            for x in mem.read_u32(iaddr + 4 * s, e - s).tolist():
                if x >= rows:
                    raise _Stop(E.INDEX_RANGE, x, b)
                if delta is None:
                    delta = mul_round(lr, mem.read_i32(gaddr + b * rb, dim), cfg.frac_bits)
                addr = tbase + x * rb
                old = mem.read(addr, rb)
                if not nolog and not self.logged.contains(t, x):
                    if not self._log_row(t, x, addr, dim, old):
                        raise _Stop(E.LOG_FULL, self.log_slots, b)
                    ctr["log_records"] += 1
                    self.logged.insert(t, x)
                raw = np.frombuffer(old, dtype="<i4").astype(np.int64) - delta
                new = np.clip(raw, I32_MIN, I32_MAX)
                self._write(addr, new.astype("<i4").tobytes(), "row")
                ctr["sat"] += int(np.count_nonzero(new != raw))
                ctr["rows"] += 1
                ctr["lines"] += dim // ELEMS_PER_LINE

    # -- convenience layer -------------------------------------------------------------------------
    @staticmethod
    def make_desc(**fields) -> bytes:
        """64-byte descriptor from ``DESC_FIELDS`` names (``out_addr``/``grads_addr``/
        ``src_addr`` alias ``data_addr``; ``epoch`` aliases ``batch``)."""
        if "epoch" in fields:
            fields["batch"] = fields.pop("epoch")
        for alias in ("out_addr", "grads_addr", "src_addr"):
            if alias in fields:
                fields["data_addr"] = fields.pop(alias)
        return pack_fields(DESC_FIELDS, fields, DESC_BYTES)

    @staticmethod
    def parse_cpl(rec: bytes) -> dict:
        c = unpack_fields(CPL_FIELDS, rec)
        c["status"] = E(c["status"]) if c["status"] in E._value2member_map_ else c["status"]
        return c

    def lookup(self, table, n_bags, offsets_addr, indices_addr, out_addr, *, log=False,
               batch=None, tag=0) -> dict:
        """LOOKUP (with LOG if ``log``); ``batch`` defaults to the open batch."""
        batch = self.committed + 1 if batch is None else batch
        return self.parse_cpl(self.execute(self.make_desc(
            kind=DescKind.LOOKUP, flags=FLAG_LOG if log else 0, table=table, tag=tag,
            batch=batch, n_bags=n_bags, offsets_addr=offsets_addr, indices_addr=indices_addr,
            data_addr=out_addr)))

    def update(self, table, n_bags, offsets_addr, indices_addr, grads_addr, *, lr=None,
               nolog=False, batch=None, tag=0) -> dict:
        """UPDATE; ``lr`` given = flag DESC_LR with that lr, else the LR CSR."""
        batch = self.committed + 1 if batch is None else batch
        flags = (FLAG_NOLOG if nolog else 0) | (FLAG_DESC_LR if lr is not None else 0)
        return self.parse_cpl(self.execute(self.make_desc(
            kind=DescKind.UPDATE, flags=flags, table=table, tag=tag, batch=batch,
            n_bags=n_bags, lr=lr or 0, offsets_addr=offsets_addr, indices_addr=indices_addr,
            data_addr=grads_addr)))

    def commit(self, batch=None, tag=0) -> dict:
        batch = self.committed + 1 if batch is None else batch
        return self.parse_cpl(self.execute(self.make_desc(kind=DescKind.COMMIT, tag=tag,
                                                          batch=batch)))

    def snapshot(self, epoch, src_addr, length, tag=0) -> dict:
        """SNAPSHOT of ``length`` bytes at ``src_addr`` as epoch ``epoch``."""
        return self.parse_cpl(self.execute(self.make_desc(kind=DescKind.SNAPSHOT, tag=tag,
                                                          batch=epoch, data_addr=src_addr,
                                                          length=length)))

    # -- rings (section 3) -----------------------------------------------------------------------
    def configure_ring(self, cmd_base: int, cmd_size: int, cpl_base: int) -> DeviceError:
        """Write CMD_BASE_LO, CMD_BASE_HI, CMD_SIZE, CPL_BASE_LO, CPL_BASE_HI (in that order).
        While descriptors are pending each of the five writes is refused with ``CSR_BUSY``
        (value = its byte address, ``CSR_ADDR``; five errors counted, the last one's value left
        in ``err_value``; registers unchanged); otherwise head = tail = seq = 0. Validity is
        checked at the doorbell, not here."""
        if self.pending:
            for reg in RING_CSRS:
                self._error(E.CSR_BUSY, CSR_ADDR[reg])
            return E.CSR_BUSY
        self.cmd_base, self.cmd_size, self.cpl_base = int(cmd_base), int(cmd_size), int(cpl_base)
        self.head = self.tail = 0
        self.seq = 0
        return E.OK

    def _ring_config_error(self):
        size = self.cmd_size
        if not (2 <= size <= 65536 and size & (size - 1) == 0):
            return size
        s0, s1 = self.cfg.staging_base, self.cfg.staging_base + self.cfg.staging_size
        for base in (self.cmd_base, self.cpl_base):
            if base % LINE_BYTES or not (s0 <= base and base + size * 64 <= s1):
                return base
        return None

    def doorbell(self, v: int) -> DeviceError:
        """Write CMD_TAIL = ``v``: checks of section 3 in order; accepted -> pending (run them
        with ``process``). A rejected doorbell changes nothing but the error registers."""
        v = int(v)
        if not self.ready:
            code, value = E.NOT_READY, v
        elif (bad := self._ring_config_error()) is not None:
            code, value = E.RING_CONFIG, bad
        elif v >= self.cmd_size:
            code, value = E.DOORBELL_RANGE, v
        elif (v - self.tail) % self.cmd_size > self.cmd_size - 1 - self.pending:
            code, value = E.RING_OVERFLOW, v
        else:
            self.tail = v
            return E.OK
        self._error(code, value)
        return code

    def process(self) -> list[dict]:
        """Execute every pending descriptor in ring order: read it, execute, write its completion
        to the same slot of the completion ring, advance head. Returns the parsed completions."""
        out = []
        while self.head != self.tail:
            i = self.head
            rec = self.execute(self.mem.read(self.cmd_base + DESC_BYTES * i, DESC_BYTES))
            self._write(self.cpl_base + CPL_BYTES * i, rec, "cpl")
            self.head = (i + 1) % self.cmd_size
            self.irq_status.add("CPL")
            out.append(self.parse_cpl(rec))
        return out
