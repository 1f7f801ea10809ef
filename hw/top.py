"""Device top: the full TrainingCXL device (architecture section 2). Only wiring.

Ports (Verilog names): ``clk``, ``rst`` (active high, registered once: it acts one cycle
later, :func:`~hw.reset.with_registered_reset`); the CXL.mem channels ``m2s_req``,
``m2s_rwd``, ``m2s_birsp`` (in) and ``s2m_ndr``, ``s2m_drs``, ``s2m_bisnp`` (out) as
``<ch>__{payload,valid,ready}``; ``s_axil__*`` (CSRs, AXI4-Lite slave, 12-bit addresses, 32-bit
data; register map docs/registers.md); ``m_axi__*`` (AXI4 master to the PMEM controller);
``irq`` (level, ``|(IRQ_STATUS & IRQ_ENABLE)``); the DCOH status outputs (``ready``, ``err``,
``err_code``, ``err_addr``, ``bisnp_sent``, ``conflicts``, ``proto_errors``).

Blocks: CSR block → command processor (rings in staging) → gather (LOOKUP, with the undo-log
tee), update engine, undo logger, persist engine (COMMIT, recovery, MLP slot choice), snapshot
engine (the background copy of SNAPSHOT); their device request ports share the DCOH's device
port through a fixed-priority mux with a registered read grant (ids: docs/training.md section
8; the snapshot engine has the lowest priority) and a register slice; DCOH → media adapter →
``m_axi``.
"""
from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AXI4LiteSignature
from .cmdproc.processor import CommandProcessor, RING_REGS
from .config import DeviceConfig
from .csr.regblock import CsrBlock, csr_offsets
from .cxl.messages import connect_host_channels, host_channel_members
from .dcoh import DCOH, forward_status, status_members
from .encodings import N_TABLES
from .gather import GatherReduce
from .media_axi import MediaAXI, media_axi_signature
from .persist.engine import PersistEngine
from .snapshot import SnapshotEngine
from .port_mux import RequestPortMux
from .req_slice import DeviceRequestSlice
from .reset import with_registered_reset
from .undolog.logger import UndoLogger
from .update.engine import UpdateEngine

__all__ = ["TrainingCXLDevice", "TOP_NAME", "PORT_IDS", "BLOCK_NAMES", "device_blocks"]

TOP_NAME = "trainingcxl_device"
# requesters on the DCOH device port, highest priority first (docs/training.md section 8). The
# gather is above the undo logger: with a deep record buffer the logger always has a write
# waiting, and the LOOKUP's output writes must not wait for the whole backlog to drain (the
# logger makes no reads during a LOOKUP, and the gather is idle during an UPDATE).
PORT_IDS = (("cmdproc", (3,)), ("persist", (10,)), ("gather", (0, 1, 2)), ("logger", (8, 9)),
            ("update", (4, 5, 6, 7)), ("snapshot", (11,)))


def _cp(cfg):
    offs = csr_offsets()
    return CommandProcessor(cfg, {r: offs[r] for r in (*RING_REGS, "control")})


# the device's blocks by their instance names in the top, each built from the configuration
_BLOCKS = {
    "csr": lambda cfg: CsrBlock(),
    "cp": _cp,
    "gather": GatherReduce,
    "update": UpdateEngine,
    "logger": UndoLogger,
    "persist": lambda cfg: PersistEngine(cfg, snapshots=True),
    "snapshot": SnapshotEngine,
    "dcoh": DCOH,
    "media": MediaAXI,
    "mux": lambda cfg: RequestPortMux(cfg.addr_bits, [ids for _, ids in PORT_IDS],
                                      registered_grant=("rd",)),
}
BLOCK_NAMES = tuple(_BLOCKS)


def device_blocks(cfg: DeviceConfig, names=None) -> dict:
    """The device's blocks, unconnected, by their instance names in the top
    (:data:`BLOCK_NAMES`: ``csr``, ``cp``, ``gather``, ``update``, ``logger``, ``persist``,
    ``snapshot``, ``dcoh``, ``media`` and the device port ``mux``; only those in ``names``, if
    given; an unknown name is a ``ValueError``). Every connection a block has in the device is
    a member of its signature, so each can also stand alone (the FPGA flow's ``--block``)."""
    names = BLOCK_NAMES if names is None else names
    unknown = [n for n in names if n not in _BLOCKS]
    if unknown:
        raise ValueError(f"no block {', '.join(map(repr, unknown))} in the device; blocks: "
                         + ", ".join(BLOCK_NAMES))
    return {n: _BLOCKS[n](cfg) for n in names}


class TrainingCXLDevice(wiring.Component):
    """The full TrainingCXL device (architecture section 2); only wiring (see the module docstring).

    Parameters
    ----------
    cfg : DeviceConfig
        The device configuration (default ``DeviceConfig()``).

    Members
    -------
    s_axil : In(AXI4LiteSignature(addr_width=12, data_width=32))
        CSRs (register map docs/registers.md).
    m_axi : Out(media_axi_signature(cfg))
        AXI4 master to the PMEM controller (one ID: in-order).
    irq : Out(1)
        Level: ``|(IRQ_STATUS & IRQ_ENABLE)``.
    m2s_req, m2s_rwd, m2s_birsp : In; s2m_ndr, s2m_drs, s2m_bisnp : Out
        The CXL.mem channels (``<ch>__{payload,valid,ready}`` in Verilog).
    ready, err, err_code, err_addr, bisnp_sent, conflicts, proto_errors : Out
        The DCOH's status outputs.

    Raises
    ------
    TypeError
        If ``cfg`` is not a :class:`DeviceConfig`.
    """

    def __init__(self, cfg: DeviceConfig = DeviceConfig()):
        if not isinstance(cfg, DeviceConfig):
            raise TypeError(f"cfg must be a DeviceConfig, got {cfg!r}")
        self.cfg = cfg
        ab = cfg.addr_bits
        super().__init__({
            "s_axil": In(AXI4LiteSignature(addr_width=12, data_width=32)),
            "m_axi": Out(media_axi_signature(cfg)),
            "irq": Out(1),
            **host_channel_members(),
            **status_members(ab),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        blocks = device_blocks(cfg)
        for name, block in blocks.items():
            m.submodules[name] = block
        csr, cp, gather, update, logger, persist, snap, dcoh, media, mux = blocks.values()
        wiring.connect(m, wiring.flipped(self.s_axil), csr.axil)

        # ---- device request ports → DCOH → media -------------------------------------------
        engines = {"cmdproc": cp, "persist": persist, "logger": logger, "gather": gather,
                   "update": update, "snapshot": snap}
        for i, (name, _) in enumerate(PORT_IDS):
            wiring.connect(m, engines[name].mem, getattr(mux, f"req_{i}"))
        m.submodules.req_slice = req_slice = DeviceRequestSlice(cfg.addr_bits)
        wiring.connect(m, mux.mem, req_slice.s)
        wiring.connect(m, req_slice.m, dcoh.dev)
        connect_host_channels(m, self, dcoh)
        forward_status(m, self, dcoh)
        wiring.connect(m, dcoh.mem, media.port)
        wiring.connect(m, wiring.flipped(self.m_axi), media.axi)

        # ---- engines ↔ command processor ------------------------------------------------------
        wiring.connect(m, cp.lk_cmd, gather.cmd)
        wiring.connect(m, gather.cpl, cp.lk_cpl)
        m.d.comb += [gather.log.eq(cp.lk_log), gather.table_id.eq(cp.lk_table)]
        wiring.connect(m, gather.log_rows, logger.tee_rows)
        wiring.connect(m, gather.log_lines, logger.tee_lines)
        wiring.connect(m, cp.up_cmd, update.cmd)
        wiring.connect(m, update.cpl, cp.up_cpl)
        wiring.connect(m, update.ensure, logger.ensure)
        wiring.connect(m, logger.ensure_done, update.ensure_done)
        # the logger's ensure path waits while the update engine still writes the row
        m.d.comb += [update.q_row.eq(logger.q_row), logger.q_busy.eq(update.q_busy)]
        wiring.connect(m, cp.commit, persist.commit)
        wiring.connect(m, persist.commit_done, cp.commit_done)
        m.d.comb += [
            logger.batch.eq(cp.log_batch),
            logger.retire.eq(persist.retire),
            logger.epoch.eq(persist.epoch),
            cp.log_idle.eq(logger.idle), cp.log_records.eq(logger.records),
            # the gather completes only after the logger took all its rows and lines
            cp.log_settled.eq(1),
            cp.log_full_events.eq(logger.full_events),
            # a failed record write: UPDATE and COMMIT of the batch are refused with MEDIA
            cp.log_media_err.eq(logger.media_err),
            # a media error during recovery: ERR_CODE = MEDIA (recovery then stops unready)
            cp.rec_err.eq(persist.rec_media),
            cp.committed.eq(persist.committed), cp.ready.eq(persist.ready),
            cp.persist_busy.eq(persist.busy),
            persist.recover.eq(cp.recover),
        ]
        # ---- snapshot engine (docs/training.md section 9) -------------------------------------
        wiring.connect(m, cp.snap_start, snap.start)
        m.d.comb += [
            cp.snap_busy.eq(snap.busy), cp.snap_accepted.eq(snap.accepted),
            cp.snap_epoch.eq(snap.mlp_epoch), cp.mlp_lag.eq(csr.mlp_lag),
            # a media error of the background copy: ERR_CODE = MEDIA, value = its epoch
            cp.snap_err.eq(snap.err), cp.snap_err_value.eq(snap.err_value),
            # recovery's slot choice; a RECOVER waits for a copy in flight to end
            persist.snap_busy.eq(snap.busy), snap.load.eq(persist.mlp_load),
            snap.load_slot.eq(persist.mlp_slot), snap.load_epoch.eq(persist.mlp_epoch),
        ]

        # ---- CSRs ↔ command processor ---------------------------------------------------------
        for r in RING_REGS:
            m.d.comb += [getattr(cp, r).eq(getattr(csr, r)),
                         getattr(cp, r + "_swmod").eq(getattr(csr, r + "_swmod")),
                         getattr(csr, r + "_next").eq(getattr(cp, r + "_next")),
                         getattr(csr, r + "_we").eq(getattr(cp, r + "_we"))]
        for t in range(N_TABLES):
            for f in ("base_lo", "base_hi", "rows", "dim"):
                m.d.comb += getattr(cp, f"table{t}_{f}").eq(getattr(csr, f"table{t}_{f}"))
        m.d.comb += [
            cp.lr.eq(csr.lr),
            cp.recover_req.eq(csr.control_recover),
            cp.err_clear.eq(csr.err_clear_clear),
            cp.csr_err_valid.eq(csr.err_valid), cp.csr_err_code.eq(csr.err_event_code),
            cp.csr_err_value.eq(csr.err_event_value),
            csr.cmd_head.eq(cp.cmd_head), csr.cpl_head.eq(cp.cpl_head),
            csr.err_code.eq(cp.err_code), csr.err_value_lo.eq(cp.err_value[:32]),
            csr.err_value_hi.eq(cp.err_value[32:]), csr.err_count.eq(cp.err_count),
            csr.status_busy.eq(cp.busy | persist.busy),
            csr.status_error.eq(cp.error),
            csr.status_ready.eq(persist.ready),
            csr.status_recovering.eq(persist.recovering),
            csr.committed_lo.eq(persist.committed[:32]),
            csr.committed_hi.eq(persist.committed[32:]),
            csr.mlp_epoch_lo.eq(snap.mlp_epoch[:32]), csr.mlp_epoch_hi.eq(snap.mlp_epoch[32:]),
            csr.mlp_slot.eq(snap.mlp_slot), csr.status_snap_busy.eq(snap.busy),
            csr.recovered_records.eq(persist.recovered_records),
            csr.log_slot.eq(logger.records),
        ]
        # interrupts: completion, error, recovery done (rising edge of ready)
        ready_d = Signal()
        m.d.sync += ready_d.eq(persist.ready)
        m.d.comb += [csr.irq_status_cpl_set.eq(cp.irq_cpl), csr.irq_status_err_set.eq(cp.irq_err),
                     csr.irq_status_recovered_set.eq(persist.ready & ~ready_d),
                     self.irq.eq((csr.irq_status_cpl & csr.irq_enable_cpl) |
                                 (csr.irq_status_err & csr.irq_enable_err) |
                                 (csr.irq_status_recovered & csr.irq_enable_recovered))]
        # capabilities and memory map (build parameters)
        caps = {"cap_tables": N_TABLES, "cap_frac_bits": cfg.frac_bits,
                "cap_log_set_rows": cfg.log_set_sets * cfg.log_set_ways,
                "cap_log_window": cfg.log_window, "cap_log_slots": cfg.log_slots}
        for r in ("table", "log", "superblock", "slots", "staging"):
            base, size = getattr(cfg, r + "_base"), getattr(cfg, r + "_size")
            caps[f"region_{r}_base_lo"] = base & 0xFFFF_FFFF
            caps[f"region_{r}_base_hi"] = base >> 32
            caps[f"region_{r}_size_lo"] = size & 0xFFFF_FFFF
            caps[f"region_{r}_size_hi"] = size >> 32
        for name, value in caps.items():
            m.d.comb += getattr(csr, name).eq(value)

        # ---- performance counters ---------------------------------------------------------------
        lines_rd = Signal(32)
        lines_wr = Signal(32)
        log_lines = Signal(64)
        mp = dcoh.mem
        m.d.sync += [lines_rd.eq(lines_rd + (mp.rd_req.valid & mp.rd_req.ready)),
                     lines_wr.eq(lines_wr + (mp.wr_req.valid & mp.wr_req.ready)),
                     log_lines.eq(log_lines + (logger.mem.wr_req.valid &
                                               logger.mem.wr_req.ready))]
        log_bytes = Cat(Const(0, 6), log_lines)
        m.d.comb += [
            csr.perf_cyc_lookup.eq(cp.cyc_lookup), csr.perf_cyc_update.eq(cp.cyc_update),
            csr.perf_cyc_commit.eq(cp.cyc_commit), csr.perf_cyc_recover.eq(persist.cyc_recover),
            csr.perf_lines_rd.eq(lines_rd), csr.perf_lines_wr.eq(lines_wr),
            csr.perf_bisnp.eq(dcoh.bisnp_sent), csr.perf_conflicts.eq(dcoh.conflicts),
            csr.perf_log_records.eq(cp.log_total),
            csr.perf_log_bytes_lo.eq(log_bytes[:32]), csr.perf_log_bytes_hi.eq(log_bytes[32:64]),
            csr.perf_upd_stalls.eq(cp.upd_stalls), csr.perf_sat.eq(cp.sat_total),
            csr.perf_desc_done.eq(cp.desc_done), csr.perf_set_overflow.eq(logger.set_overflow),
        ]
        return with_registered_reset(m)
