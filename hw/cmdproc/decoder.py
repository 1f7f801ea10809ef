"""DescriptorDecoder: a descriptor's fields, its checks and the engine commands it makes."""
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import DeviceConfig
from ..encodings import DESC_FIELDS, FLAG_DESC_LR, FLAG_LOG, FLAG_NOLOG, N_TABLES, DescKind, \
    DeviceError
from ..gather.layouts import cmd_layout as lookup_cmd_layout
from ..snapshot.engine import snap_capacity, start_layout as snap_start_layout
from ..update.layouts import update_cmd_layout

__all__ = ["DescriptorDecoder", "desc_layout", "table_entry_layout"]

# a descriptor line, its fields at their byte offsets (docs/training.md section 2)
desc_layout = data.FlexibleLayout(512, {n: data.Field(unsigned(8 * w), 8 * off)
                                        for n, off, w in DESC_FIELDS})
# one entry of the table directory CSRs
table_entry_layout = data.StructLayout({"base": 64, "rows": 32, "dim": 32})


class DescriptorDecoder(wiring.Component):
    """What a fetched descriptor asks for and whether it may run.

    The pre-execution checks, in docs order (the first failing one gives ``pre_code`` and
    ``pre_value``; 0 when all pass): unknown kind; table id; batch (LOOKUP with LOG, UPDATE,
    COMMIT: ``batch`` = C+1); the table's dim; addresses wider than ``cfg.addr_bits``;
    SNAPSHOT: epoch in (A, C+1], source width, ``length`` <= the slot capacity, source inside
    the staging region (docs/training.md sections 2 and 9). The engines check the rest.

    Latency: the checks are registered. ``pre_code``, ``pre_value``, ``lag_ok`` and
    ``lag_wait`` of cycle t describe the inputs of cycle t - 1 (each check's outcome, the
    table's base and dim and the lag compares are registered; the first failing check is
    picked after the register from the descriptor's fields, which the caller holds). The
    engine commands (``lk_cmd``, ``up_cmd``, ``snap_cmd``, ``lk_log``) and ``open_batch`` are
    combinational.

    Parameters
    ----------
    cfg : DeviceConfig
        ``addr_bits``, the staging region, the snapshot slot size.

    Members
    -------
    desc : In(desc_layout)
        The descriptor line.
    tables : In(data.ArrayLayout(table_entry_layout, N_TABLES))
        The table directory.
    committed : In(64)
        C; ``open_batch`` = C+1.
    snap_accepted, snap_epoch : In(64)
        A (last accepted snapshot) and P (last completed or recovered snapshot).
    snap_busy : In(1)
        A snapshot copy is in flight.
    mlp_lag : In(32)
        k, the ``MLP_LAG`` CSR.
    lr : In(32)
        The LR CSR (used unless the descriptor carries its own).
    open_batch : Out(64)
    pre_code : Out(8), pre_value : Out(64)
        The first failing check (``DeviceError``) and its value (one cycle late).
    lag_ok : Out(1)
        COMMIT lag check passes: C+1 <= P or C+1 - P <= k (one cycle late).
    lag_wait : Out(1)
        It fails but a snapshot in flight would satisfy it (C+1 - A <= k; one cycle late).
    lk_cmd : Out(lookup_cmd_layout(cfg.addr_bits)), lk_log : Out(1)
        The LOOKUP command and its LOG flag.
    up_cmd : Out(update_cmd_layout(cfg.addr_bits))
        The UPDATE command (its ``lr`` from the descriptor with FLAG_DESC_LR, else ``lr``).
    snap_cmd : Out(snap_start_layout(cfg.addr_bits))
        The SNAPSHOT start.
    """

    def __init__(self, cfg: DeviceConfig):
        self._cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "desc": In(desc_layout),
            "tables": In(data.ArrayLayout(table_entry_layout, N_TABLES)),
            "committed": In(64), "snap_accepted": In(64), "snap_epoch": In(64),
            "snap_busy": In(1), "mlp_lag": In(32), "lr": In(32),
            "open_batch": Out(64), "pre_code": Out(8), "pre_value": Out(64),
            "lag_ok": Out(1), "lag_wait": Out(1),
            "lk_cmd": Out(lookup_cmd_layout(ab)), "lk_log": Out(1),
            "up_cmd": Out(update_cmd_layout(ab)),
            "snap_cmd": Out(snap_start_layout(ab)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        ab = cfg.addr_bits
        s_base, s_end = cfg.staging_base, cfg.staging_base + cfg.staging_size
        d = self.desc
        kind, flags, table, batch, length = d.kind, d.flags, d.table, d.batch, d.length
        t_base, t_rows, t_dim = Signal(64), Signal(32), Signal(32)   # 0 for a bad table id
        t_base_q, t_dim_q = Signal(64), Signal(32)                    # as the checks saw them
        with m.Switch(table):
            for i in range(N_TABLES):
                with m.Case(i):
                    m.d.comb += [t_base.eq(self.tables[i].base), t_rows.eq(self.tables[i].rows),
                                 t_dim.eq(self.tables[i].dim)]
        open_batch = self.open_batch
        m.d.comb += open_batch.eq(self.committed + 1)
        is_lookup = kind == DescKind.LOOKUP
        is_update = kind == DescKind.UPDATE
        is_commit = kind == DescKind.COMMIT
        is_snap = kind == DescKind.SNAPSHOT
        is_lu = is_lookup | is_update
        log_flag = (flags & FLAG_LOG) != 0
        checks_batch = (is_lookup & log_flag) | is_update | is_commit

        def too_wide(x):
            return (x >> ab) != 0

        # SNAPSHOT (section 9): epoch in (A, C+1], source address width, length, staging range
        snap_cap = snap_capacity(cfg)
        len_bad = (length > snap_cap) if snap_cap < (1 << 32) - 1 else 0
        src_in = ((d.data_addr >= s_base) if s_base else 1) & Mux(
            length == 0, d.data_addr < s_end, d.data_addr + length <= s_end)
        checks = [
            (~(is_lu | is_commit | is_snap), DeviceError.UNKNOWN_KIND, kind),
            (is_lu & (table >= N_TABLES), DeviceError.BAD_TABLE, table),
            (checks_batch & (batch != open_batch), DeviceError.WRONG_BATCH, batch),
            (is_lu & (t_dim >> 16 != 0), DeviceError.BAD_DIM, t_dim_q),
            (is_lu & too_wide(t_base), DeviceError.ADDR_RANGE, t_base_q),
            (is_lu & too_wide(d.offsets_addr), DeviceError.ADDR_RANGE, d.offsets_addr),
            (is_lu & too_wide(d.indices_addr), DeviceError.ADDR_RANGE, d.indices_addr),
            (is_lu & too_wide(d.data_addr), DeviceError.ADDR_RANGE, d.data_addr),
            (is_snap & ~((self.snap_accepted < batch) & (batch <= open_batch)),
             DeviceError.BAD_EPOCH, batch),
            (is_snap & too_wide(d.data_addr), DeviceError.ADDR_RANGE, d.data_addr),
            (is_snap & len_bad, DeviceError.SNAP_LENGTH, length),
            (is_snap & ~src_in, DeviceError.ADDR_RANGE, d.data_addr),
        ]
        # each outcome registered (with the table fields a value may name), then the first
        # failing one picked
        failed = Signal(len(checks))
        m.d.sync += [failed.eq(Cat(cond for cond, _, _ in checks)),
                     t_base_q.eq(t_base), t_dim_q.eq(t_dim)]
        for i, (_, code, value) in enumerate(checks):
            with (m.If if i == 0 else m.Elif)(failed[i]):
                m.d.comb += [self.pre_code.eq(code), self.pre_value.eq(value)]

        # COMMIT lag check (section 9): b = C+1, P = last completed snapshot, k = MLP_LAG
        m.d.sync += [
            self.lag_ok.eq((open_batch <= self.snap_epoch) |
                           ((open_batch - self.snap_epoch)[:64] <= self.mlp_lag)),
            self.lag_wait.eq(self.snap_busy & ((open_batch <= self.snap_accepted) |
                                               ((open_batch - self.snap_accepted)[:64] <=
                                                self.mlp_lag))),
        ]

        # ---- engine commands ---------------------------------------------------------------
        lk = self.lk_cmd
        m.d.comb += [lk.tag.eq(d.tag), lk.dim.eq(t_dim), lk.table_rows.eq(t_rows),
                     lk.n_bags.eq(d.n_bags), lk.table_base.eq(t_base),
                     lk.offsets_addr.eq(d.offsets_addr), lk.indices_addr.eq(d.indices_addr),
                     lk.out_addr.eq(d.data_addr), self.lk_log.eq(log_flag)]
        up = self.up_cmd
        m.d.comb += [up.table_id.eq(table), up.dim.eq(t_dim), up.table_rows.eq(t_rows),
                     up.n_bags.eq(d.n_bags), up.table_base.eq(t_base),
                     up.offsets_addr.eq(d.offsets_addr), up.indices_addr.eq(d.indices_addr),
                     up.grads_addr.eq(d.data_addr),
                     up.lr.eq(Mux((flags & FLAG_DESC_LR) != 0, d.lr, self.lr)),
                     up.nolog.eq((flags & FLAG_NOLOG) != 0)]
        sp = self.snap_cmd
        m.d.comb += [sp.epoch.eq(batch), sp.src.eq(d.data_addr), sp.length.eq(length)]
        return m
