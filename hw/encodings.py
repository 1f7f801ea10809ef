"""Encodings shared by RTL, golden model and cosim (pure Python, no behaviour).

Only numbers and field lists live here; each side implements its own semantics.
"""
import enum


class LookupErrorCode(enum.IntEnum):
    """Error codes in a LOOKUP completion (``err_code``). Checked in this order (docs/lookup.md)."""
    OK = 0
    BAD_DIM = 1          # dim not in 16/32/64/128; value = dim
    ALIGN = 2            # misaligned table/out (64 B) or offsets/indices (4 B); value = address
    ADDR_RANGE = 3       # table, offsets, out or indices outside their region; value = address
    OFFSETS_ORDER = 4    # offsets[b+1] < offsets[b]; value = offsets[b+1], bag = b
    BAG_TOO_LONG = 5     # offsets[b+1]-offsets[b] > max_bag; value = length, bag = b
    INDEX_RANGE = 6      # index >= table rows; value = index, bag = b
    MEDIA = 7            # media port returned an error response (RRESP/BRESP != OKAY)


# Field lists (name, width) LSB first. ``A`` stands for DeviceConfig.addr_bits.
LOOKUP_CMD_FIELDS = (
    ("tag", 16),           # echoed in the completion
    ("dim", 16),           # elements per row (raw, validated by the engine)
    ("table_rows", 32),
    ("n_bags", 32),
    ("table_base", "A"),   # byte address, 64 B aligned, in the table region
    ("offsets_addr", "A"),  # byte address of n_bags+1 little-endian u32 offsets, in staging
    ("indices_addr", "A"),  # byte address of little-endian u32 indices, in staging
    ("out_addr", "A"),     # byte address of n_bags*dim int32 outputs, 64 B aligned, in staging
)

LOOKUP_CPL_FIELDS = (
    ("tag", 16),
    ("err_code", 4),       # LookupErrorCode
    ("err_bag", 32),       # bag of the error (0 for command-level errors)
    ("err_value", 64),     # offending value (see LookupErrorCode)
    ("rows", 32),          # rows summed into bags that were written
    ("sat", 32),           # output lanes that saturated on write-out
    ("out_lines", 32),     # 64 B output lines written
    ("cycles", 32),        # cycles from command accept to completion (RTL only; model leaves 0)
)


def widths(fields, addr_bits):
    return [(n, addr_bits if w == "A" else w) for n, w in fields]


# ---- training state: command rings, descriptors, completions, undo log, superblock ------------
# (docs/training.md is the contract; these are only the numbers and byte layouts)

class DeviceError(enum.IntEnum):
    """Status of a completion record and the ``ERR_CODE`` CSR. 0..7 are ``LookupErrorCode``'s codes
    with the same meaning (UPDATE reuses them); the rest are docs/training.md section 6."""
    OK = 0
    BAD_DIM = 1
    ALIGN = 2
    ADDR_RANGE = 3
    OFFSETS_ORDER = 4
    BAG_TOO_LONG = 5
    INDEX_RANGE = 6
    MEDIA = 7
    UNKNOWN_KIND = 8     # descriptor kind not LOOKUP/UPDATE/COMMIT; value = kind
    WRONG_BATCH = 9      # descriptor batch != open batch (committed + 1); value = batch
    BAD_TABLE = 10       # table id >= N_TABLES or its directory entry invalid; value = table id
    LOG_FULL = 11        # undo log region full; value = slot index
    RING_OVERFLOW = 12   # doorbell claims more descriptors than free slots; value = written tail
    DOORBELL_RANGE = 13  # CMD_TAIL written with a value >= CMD_SIZE; value = written tail
    RING_CONFIG = 14     # ring base/size invalid at the doorbell; value = the bad base or size
    CSR_RO = 15          # CSR write to a read-only register; value = CSR byte address
    CSR_ADDR = 16        # CSR access to an unmapped address; value = CSR byte address
    NOT_READY = 17       # doorbell before recovery completed; value = written tail
    CSR_BUSY = 18        # ring configuration written while descriptors are pending; value = addr
    MLP_LAG = 19         # COMMIT refused: batch - MLP snapshot epoch > MLP_LAG; value = the lag
    BAD_EPOCH = 20       # SNAPSHOT epoch not in (last accepted epoch, open batch]; value = epoch
    SNAP_LENGTH = 21     # SNAPSHOT length > slot capacity; value = length


class DescKind(enum.IntEnum):
    LOOKUP = 1
    UPDATE = 2
    COMMIT = 3
    SNAPSHOT = 4


# descriptor flags (byte 1)
FLAG_LOG = 0x01          # LOOKUP: append undo records of rows not yet logged in the batch
FLAG_NOLOG = 0x01        # UPDATE: do not log (unsafe, benchmark baseline "no logging")
FLAG_DESC_LR = 0x02      # UPDATE: use the descriptor's lr instead of the LR CSR

DESC_BYTES = 64
CPL_BYTES = 64
N_TABLES = 8

# Byte layouts, little-endian: (name, byte offset, byte width)
DESC_FIELDS = (
    ("kind", 0, 1), ("flags", 1, 1), ("table", 2, 2), ("tag", 4, 4), ("batch", 8, 8),
    ("n_bags", 16, 4), ("lr", 20, 4), ("offsets_addr", 24, 8), ("indices_addr", 32, 8),
    ("data_addr", 40, 8),     # LOOKUP: out_addr; UPDATE: grads_addr; SNAPSHOT: src_addr
    ("length", 48, 4),        # SNAPSHOT: payload bytes (its epoch is the ``batch`` field)
)
CPL_FIELDS = (
    ("tag", 0, 4), ("kind", 4, 1), ("status", 5, 1), ("err_bag", 8, 4), ("rows", 12, 4),
    ("err_value", 16, 8), ("sat", 24, 4), ("lines", 28, 4), ("log_records", 32, 4),
    ("cycles", 36, 4), ("batch", 40, 8), ("seq", 48, 4),
)

# Undo log: fixed slots of LOG_SLOT_LINES lines: line 0 header, lines 1..dim/16 old row contents
LOG_MAGIC = 0x4F444E55          # "UNDO"
LOG_SLOT_LINES = 9
LOG_SLOT_BYTES = LOG_SLOT_LINES * 64
LOG_HDR_FIELDS = (
    ("magic", 0, 4), ("table", 4, 2), ("dim", 6, 2), ("batch", 8, 8), ("row", 16, 4),
    ("crc", 20, 4), ("addr", 24, 8),   # addr: byte address of the row
    ("epoch", 32, 8),                  # superblock recovery_epoch when the record was written
)

# Superblock: one line at superblock_base
SB_MAGIC = 0x4C584354           # "TCXL"
SB_VERSION = 1
SB_FIELDS = (
    ("magic", 0, 4), ("version", 4, 4), ("committed", 8, 8),
    ("mlp_slot", 16, 8),        # 0 none, 1 slot A, 2 slot B: the 8-byte flip word (a hint only)
    ("mlp_epoch", 24, 8),       # reserved, written 0 (the epoch lives in the slot header)
    ("recovery_epoch", 32, 8),
)

# MLP snapshot slots (docs/training.md section 9): the slots region is split into two halves,
# slot A (0) and slot B (1); each is a header line followed by the payload lines.
SNAP_MAGIC = 0x53504C4D         # "MLPS"
SNAP_HDR_FIELDS = (
    ("magic", 0, 4), ("crc", 4, 4), ("epoch", 8, 8), ("length", 16, 4),
)


def pack_fields(fields, values: dict, size: int) -> bytes:
    """Little-endian byte image of ``values`` laid out by ``fields`` (missing names are 0)."""
    out = bytearray(size)
    for name, off, w in fields:
        v = int(values.get(name, 0))
        if not 0 <= v < (1 << (8 * w)):
            raise ValueError(f"{name}={v} does not fit {w} bytes")
        out[off:off + w] = v.to_bytes(w, "little")
    return bytes(out)


def unpack_fields(fields, raw: bytes) -> dict:
    return {name: int.from_bytes(raw[off:off + w], "little") for name, off, w in fields}
