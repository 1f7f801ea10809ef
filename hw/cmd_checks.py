"""Command-level checks shared by the LOOKUP and UPDATE engines (docs/lookup.md checks 1-3;
docs/training.md section 4 with ``grads_addr`` as the data buffer)."""
from amaranth.hdl import Signal

from .encodings import LookupErrorCode

__all__ = ["command_checks"]


def _below(x, base):
    """x < base, without a constant-false compare (Verilator lint) when base is 0."""
    return (x < base) if base else 0


def command_checks(m, cfg, c, data_addr, *, err_width):
    """Add the command-level checks of command ``c`` (fields ``dim``, ``table_base``,
    ``table_rows``, ``n_bags``, ``offsets_addr``, ``indices_addr``) with ``data_addr`` the
    64 B-aligned per-bag buffer (LOOKUP ``out_addr``, UPDATE ``grads_addr``) to module ``m``.

    Returns ``(err, value, dim_log, off_end)``: the first failing check's code (0 if none) and
    offending value, ``log2(dim/16)``, and the end of the offsets list (the offsets reader's
    limit). Order: BAD_DIM; ALIGN of table_base, data, offsets, indices; ADDR_RANGE of the
    table, offsets, data and indices (end inclusive) ranges.
    """
    t_base, t_end = cfg.table_base, cfg.table_base + cfg.table_size
    s_base, s_end = cfg.staging_base, cfg.staging_base + cfg.staging_size
    err = Signal(err_width)
    value = Signal(64)
    dim_ok = Signal()
    dl = Signal(2)
    with m.Switch(c.dim):
        for i, d in enumerate((16, 32, 64, 128)):
            with m.Case(d):
                m.d.comb += [dim_ok.eq(1), dl.eq(i)]
    row_shift = dl + 6
    table_end = c.table_base + (c.table_rows << row_shift)
    off_end = c.offsets_addr + ((c.n_bags + 1) << 2)
    data_end = data_addr + (c.n_bags << row_shift)
    E = LookupErrorCode
    checks = [
        (~dim_ok, E.BAD_DIM, c.dim),
        (c.table_base[:6] != 0, E.ALIGN, c.table_base),
        (data_addr[:6] != 0, E.ALIGN, data_addr),
        (c.offsets_addr[:2] != 0, E.ALIGN, c.offsets_addr),
        (c.indices_addr[:2] != 0, E.ALIGN, c.indices_addr),
        (_below(c.table_base, t_base) | (table_end > t_end), E.ADDR_RANGE, c.table_base),
        (_below(c.offsets_addr, s_base) | (off_end > s_end), E.ADDR_RANGE, c.offsets_addr),
        (_below(data_addr, s_base) | (data_end > s_end), E.ADDR_RANGE, data_addr),
        (_below(c.indices_addr, s_base) | (c.indices_addr > s_end), E.ADDR_RANGE,
         c.indices_addr),
    ]
    for i, (cond, code, val) in enumerate(checks):
        with (m.If if i == 0 else m.Elif)(cond):
            m.d.comb += [err.eq(code), value.eq(val)]
    return err, value, dl, off_end
