"""Encodings shared by RTL, golden model and cosim (pure Python, no behaviour).

Only numbers and field lists live here; each side implements its own semantics.
"""
import enum


class LookupError_(enum.IntEnum):
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
    ("err_code", 4),       # LookupError_
    ("err_bag", 32),       # bag of the error (0 for command-level errors)
    ("err_value", 64),     # offending value (see LookupError_)
    ("rows", 32),          # rows summed into bags that were written
    ("sat", 32),           # output lanes that saturated on write-out
    ("out_lines", 32),     # 64 B output lines written
    ("cycles", 32),        # cycles from command accept to completion (RTL only; model leaves 0)
)


def widths(fields, addr_bits):
    return [(n, addr_bits if w == "A" else w) for n, w in fields]
