"""Payload layouts of the gather engine: the LOOKUP command/completion (from hw.encodings) and
the internal stage-to-stage layouts."""
from amaranth.lib import data

from ..encodings import LOOKUP_CMD_FIELDS, LOOKUP_CPL_FIELDS, widths

LEN_BITS = 33          # bag length e - s (offsets are u32)


def cmd_layout(addr_bits):
    return data.StructLayout(dict(widths(LOOKUP_CMD_FIELDS, addr_bits)))


def cpl_layout(addr_bits):
    return data.StructLayout(dict(widths(LOOKUP_CPL_FIELDS, addr_bits)))


# walker -> sequencer: one entry per bag, or an error marker for the bag that failed its checks
# (the marker's offending value is held in the walker's ``err_value`` register, so the FIFO,
# which must be deep enough to let the index prefetch run a PMEM latency ahead, stays narrow)
bag_layout = data.StructLayout({"len": LEN_BITS, "err": 1, "code": 4})

# sequencer -> row issuer: one row of a bag (or one empty bag)
item_layout = data.StructLayout({"index": 32, "first": 1, "last": 1, "empty": 1})

# row issuer -> pool (through the in-flight FIFO): one line of a row
tag_layout = data.StructLayout({"k": 3, "first": 1, "last": 1, "empty": 1})
