"""Stream layouts of the undo logger (docs/training.md section 5): the LOOKUP tee and the
synchronous ``ensure`` path of UPDATE."""
from amaranth.lib import data

__all__ = ["log_row_layout", "log_line_layout", "ensure_done_layout"]


def log_row_layout(addr_bits):
    """One row to log: ``table`` id, ``row`` index, ``addr`` byte address of the row (64 B
    aligned), ``dim_log`` (dim = 16 << dim_log)."""
    return data.StructLayout({"table": 16, "row": 32, "addr": addr_bits, "dim_log": 2})


# one 64 B line of a row's contents (byte 0 in bits 7:0), lines of a row in order
log_line_layout = data.StructLayout({"data": 512})

# answer to one ``ensure`` request (DeviceError code; 0 = the row is logged and persistent)
ensure_done_layout = data.StructLayout({"err_code": 8})
