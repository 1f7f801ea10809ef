"""Payload layouts of the UPDATE engine (docs/training.md section 4).

``A`` below is ``DeviceConfig.addr_bits``.

- ``update_cmd_layout(A)``: ``table_id`` 16 (echoed on ``ensure``), ``dim`` 16, ``table_rows``
  32, ``n_bags`` 32, ``table_base`` A, ``offsets_addr`` A, ``indices_addr`` A, ``grads_addr`` A,
  ``lr`` 32 (unsigned Q(32-f).f), ``nolog`` 1.
- ``update_cpl_layout()``: ``err_code`` 8 (``DeviceError``), ``err_bag`` 32, ``err_value`` 64,
  ``rows`` 32 ((bag, row) updates applied), ``sat`` 32 (lanes clamped), ``lines`` 32 (row lines
  written), ``stalls`` 32 (cycles an item waited in the hazard check: its row in
  flight, or the row tracker full), ``cycles`` 32.
- ``ensure_layout(A)``: ``table`` 16, ``row`` 32, ``addr`` A (byte address of the row),
  ``dim_log`` 2 (dim = 16 << dim_log). ``ensure_done_layout``: ``err_code`` 8.
"""
from amaranth.lib import data

__all__ = ["update_cmd_layout", "update_cpl_layout", "ensure_layout", "ensure_done_layout",
           "upd_item_layout", "line_ctx_layout", "DELTA_BITS"]

# A delta saturated to [-2^32, 2^32] gives the same clamped row and the same saturation flag as
# the exact int64 delta (a row is int32), so deltas are kept in 34 signed bits.
DELTA_BITS = 34


def update_cmd_layout(addr_bits):
    return data.StructLayout({
        "table_id": 16, "dim": 16, "table_rows": 32, "n_bags": 32,
        "table_base": addr_bits, "offsets_addr": addr_bits, "indices_addr": addr_bits,
        "grads_addr": addr_bits, "lr": 32, "nolog": 1,
    })


def update_cpl_layout():
    return data.StructLayout({
        "err_code": 8, "err_bag": 32, "err_value": 64, "rows": 32, "sat": 32, "lines": 32,
        "stalls": 32, "cycles": 32,
    })


def ensure_layout(addr_bits):
    return data.StructLayout({"table": 16, "row": 32, "addr": addr_bits, "dim_log": 2})


ensure_done_layout = data.StructLayout({"err_code": 8})

# sequencer -> fork -> grad stage -> row-read stage: one row item with its bag number
upd_item_layout = data.StructLayout({"index": 32, "first": 1, "last": 1, "empty": 1, "bag": 32})

def line_ctx_layout(ent_bits):
    """Row-read stage -> write stage (in-flight context FIFO): one line of a row item, with
    the row tracker entry (``ent_bits`` wide) its write acknowledgement decrements, and ``fwd``:
    the line is not read, its row data is forwarded from the previous item on that row."""
    return data.StructLayout({"row": 32, "k": 3, "bag_last": 1, "bag": 32, "ent": ent_bits,
                              "fwd": 1})
