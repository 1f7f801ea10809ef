"""Command-level checks shared by the LOOKUP and UPDATE engines (docs/lookup.md checks 1-3;
docs/training.md section 4 with ``grads_addr`` as the data buffer)."""
from amaranth.hdl import Cat, Signal

from .encodings import LookupErrorCode

__all__ = ["command_checks", "CHECK_LATENCY"]


def _below(x, base):
    """x < base, without a constant-false compare (Verilator lint) when base is 0."""
    return (x < base) if base else 0


CHECK_LATENCY = 2
"""Cycles from a new command in ``c`` to its check results (:func:`command_checks`)."""


def command_checks(m, cfg, c, data_addr, start, *, err_width):
    """Add the command-level checks of command ``c`` (fields ``dim``, ``table_base``,
    ``table_rows``, ``n_bags``, ``offsets_addr``, ``indices_addr``) with ``data_addr`` the
    64 B-aligned per-bag buffer (LOOKUP ``out_addr``, UPDATE ``grads_addr``) to module ``m``.

    Returns ``(err, value, dim_log, off_end, ready)``: the first failing check's code (0 if
    none) and offending value, ``log2(dim/16)``, the end of the offsets list (the offsets
    reader's limit), and ``ready``: the results are those of the command written to ``c`` in
    the cycle ``start`` was last high (the engine's accept). Order: BAD_DIM; ALIGN of
    table_base, data, offsets, indices; ADDR_RANGE of the table, offsets, data and indices (end
    inclusive) ranges.

    Latency: the results are registered in two stages (the ends of the ranges; then each
    check's outcome), so they hold for the ``c`` and ``data_addr`` of :data:`CHECK_LATENCY`
    cycles before, and ``ready`` rises ``CHECK_LATENCY`` cycles after the cycle ``c`` is written.
    (In one cycle, the 64-bit sums, the compares and the priority chain make a 15-19 ns path on
    the ECP5: docs/fpga.md, "Each block alone".)
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
    # stage 1: the ends of the ranges (and the dim decode), registered
    dl_q = Signal(2)
    dim_ok_q = Signal()
    row_shift = dl + 6
    ends = {"table_end": c.table_base + (c.table_rows << row_shift),
            "off_end": c.offsets_addr + ((c.n_bags + 1) << 2),
            "data_end": data_addr + (c.n_bags << row_shift)}
    table_end, off_end, data_end = (Signal(v.shape(), name=k) for k, v in ends.items())
    m.d.sync += [dl_q.eq(dl), dim_ok_q.eq(dim_ok), table_end.eq(ends["table_end"]),
                 off_end.eq(ends["off_end"]), data_end.eq(ends["data_end"])]
    # stage 2: each check's outcome, registered; the priority among them is combinational
    E = LookupErrorCode
    checks = [
        (~dim_ok_q, E.BAD_DIM, c.dim),
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
    fails = Signal(len(checks))
    m.d.sync += fails.eq(Cat(cond for cond, _, _ in checks))
    for i, (_, code, val) in enumerate(checks):
        with (m.If if i == 0 else m.Elif)(fails[i]):
            m.d.comb += [err.eq(code), value.eq(val)]
    # the results' age: cycles since the command was written, up to CHECK_LATENCY
    age = Signal(range(CHECK_LATENCY + 1), init=CHECK_LATENCY)
    with m.If(start):
        m.d.sync += age.eq(0)
    with m.Elif(age != CHECK_LATENCY):
        m.d.sync += age.eq(age + 1)
    return err, value, dl_q, off_end, age == CHECK_LATENCY
