"""Line fields and slot addresses shared by the persist engine's parts."""
from ..encodings import LOG_HDR_FIELDS

__all__ = ["field", "slot_line", "dim_lines"]


def field(value, fields, name):
    """Bits of byte field ``name`` (from an encodings byte layout) of a line value."""
    for n, off, w in fields:
        if n == name:
            return value[8 * off:8 * (off + w)]
    raise KeyError(name)


def slot_line(log_line, slot, line_bits):
    """Line address of log slot ``slot`` (9 lines per slot) of a log starting at line
    ``log_line``, ``line_bits`` wide."""
    return (log_line + (slot << 3) + slot)[:line_bits]


def dim_lines(hdr):
    """dim/16 of an undo record header (bytes 0..31), for a valid dim."""
    return field(hdr, LOG_HDR_FIELDS, "dim")[4:8]
