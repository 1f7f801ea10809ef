"""Stream layouts of the undo logger (docs/training.md section 5): the LOOKUP tee, the
synchronous ``ensure`` path of UPDATE, and the logger's record lines and headers on their way to
its write port."""
from amaranth.lib import data

__all__ = ["log_row_layout", "log_line_layout", "ensure_done_layout", "record_line_layout",
           "record_header_layout"]


def log_row_layout(addr_bits):
    """One row to log: ``table`` id, ``row`` index, ``addr`` byte address of the row (64 B
    aligned), ``dim_log`` (dim = 16 << dim_log)."""
    return data.StructLayout({"table": 16, "row": 32, "addr": addr_bits, "dim_log": 2})


# one 64 B line of a row's contents (byte 0 in bits 7:0), lines of a row in order; ``err``: the
# media read of this line answered an error (the data is not trustworthy)
log_line_layout = data.StructLayout({"data": 512, "err": 1})

# answer to one ``ensure`` request (DeviceError code; 0 = the row is logged and persistent)
ensure_done_layout = data.StructLayout({"err_code": 8})

# one data line of a record on its way to the write port; ``last``: the record's last data line
record_line_layout = data.StructLayout({"data": 512, "last": 1})


def record_header_layout(addr_bits):
    """The variable fields of a record's header line (the rest are ``batch``, ``epoch`` and
    constants): ``table``, ``row``, ``addr``, ``dl`` (dim_log), ``crc`` (the CRC state after
    the record's data lines, or the final CRC once the header's share is added)."""
    return data.StructLayout({"table": 16, "row": 32, "addr": addr_bits, "dl": 2, "crc": 32})
