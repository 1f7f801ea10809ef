"""Seeded multi-batch training workload and its expected results from the golden model.

A :class:`TrainingWorkload` is pure data (no cocotb): the tables (directory entries and initial
contents), the LR, the command/completion ring placement, and per batch the staging data
(offsets, indices, gradients), the descriptors (per table LOOKUP+LOG, then per table UPDATE,
then COMMIT) and what ``sw_model.training.TrainingDevice`` says about them: every completion
record and the bytes of every table after the batch's COMMIT.

Layout (all in the configuration's regions): tables back to back from ``table_base``; in
staging: the command ring (``ring_size`` descriptors) at ``staging_base``, the completion ring
right after it, then one private area per batch (offsets, indices, gradients, LOOKUP outputs),
so the staging data of every batch can be written up front and re-written for a replay.

Table contents (``init``): ``"all"`` writes every row up front (from the workload's seed, in
table order); ``"touched"`` writes only the rows some batch reads (LOOKUP bags, table 1's own
UPDATE bags, the hot rows), each from a stream seeded by (seed, table, row), before the run
(the batches are drawn first, then run on the model); the other rows are never written and
read as zeros. The device
never reads them, so the images stay as small as the rows a run touches and tables of 2^20
rows cost no more than small ones (the comparisons walk every line either image holds, so a
write anywhere in a table is still caught).

Indices are Zipf-skewed (``sw_model.workload.zipf_indices``, alpha ~1, rows shuffled), bags of
uniform length 0..2*pooling (empty bags occur). Gradients are int32 normals; table 2 (when
present) updates with the descriptor's lr (flag ``DESC_LR``), the others with the LR CSR.
Each UPDATE uses its table's LOOKUP bags (rows already logged by the LOOKUP), except table 1's,
which has bags of its own so the UPDATE's synchronous logging path runs too.

Error completions (``allow_errors``): by default every model completion must be OK. With
``allow_errors`` the model's error completions are the expected ones, for example ``LOG_FULL``
when a batch logs more rows than the configuration's ``log_slots`` (docs/training.md section 5:
the LOOKUP still writes its outputs, the UPDATE stops before the first row it could not log,
the COMMIT commits what was applied). The run, and so every replay after a crash, is still one
deterministic sequence: every batch starts with an empty log and logged set.

MLP snapshots (``snap_bytes`` > 0, docs/training.md section 9): every batch ``b`` also holds
SNAPSHOT(``b``) after its UPDATEs, before its COMMIT, of ``snap_bytes`` seeded bytes from a
buffer of its own (unaligned, never rewritten), with the lag bound ``snap_lag`` (k) written to
MLP_LAG. A snapshot every batch keeps every replay after a crash valid whatever slot recovery
chose (COMMIT(``b``) either passes ``b - P <= k`` or waits for the in-flight SNAPSHOT(``b``)), so
the descriptors and completions of a batch never depend on where a run was cut.
:meth:`TrainingWorkload.legal_mlp` gives the MLP slots recovery may report after a cut, from
the model's own run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hw.config import DeviceConfig
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, FLAG_DESC_LR, FLAG_LOG, DescKind,
                          DeviceError, unpack_fields)
from sw_model.memory import MemoryImage
from sw_model.training import TrainingDevice, log_set_index
from sw_model.workload import RegionAllocator, make_bags, make_table

__all__ = ["TableSpec", "Batch", "TrainingWorkload", "make_workload", "CPL_COMPARE_SKIP"]

# completion fields a comparison skips: cycles (RTL only), seq (counts since the ring was
# configured, so it differs after a restart)
CPL_COMPARE_SKIP = ("cycles", "seq")


@dataclass(frozen=True)
class TableSpec:
    tid: int
    base: int
    rows: int
    dim: int

    @property
    def nbytes(self) -> int:
        return self.rows * self.dim * 4

    def holds(self, addr: int) -> bool:
        return self.base <= addr < self.base + self.nbytes


@dataclass
class Batch:
    """One training batch (1-based ``batch`` id = the committed id after its COMMIT)."""
    batch: int
    staging: list            # [(addr, bytes)]: offsets, indices, gradients (host-written data)
    descs: list              # [bytes] 64-byte descriptors in submission order
    expect: list             # [dict] model completions (CPL_FIELDS; cycles 0)
    tables_after: dict       # table lines after the COMMIT (TrainingWorkload.read_tables)
    out_areas: list = field(default_factory=list)   # [(addr, nbytes)] LOOKUP outputs
    snap: tuple | None = None  # (epoch, slot index, payload bytes) of its SNAPSHOT, if any
    doorbells: tuple = ()     # descriptors per doorbell, in order (empty: one doorbell)

    @property
    def parts(self) -> list:
        """``[(first index, descriptors)]``: the descriptors of each doorbell, in order."""
        sizes = self.doorbells or (len(self.descs),)
        out, k = [], 0
        for n in sizes:
            out.append((k, self.descs[k:k + n]))
            k += n
        return out

    @property
    def errors(self) -> list:
        """Status names of its error completions (the model's), sorted."""
        return sorted(DeviceError(c["status"]).name for c in self.expect
                      if c["status"] != DeviceError.OK)


@dataclass
class TrainingWorkload:
    cfg: DeviceConfig
    seed: int
    tables: list             # [TableSpec]
    lr: int                  # LR CSR value
    ring_base: int
    ring_size: int
    cpl_base: int
    initial: MemoryImage     # tables only (superblock unformatted, log and staging empty)
    tables0: dict            # table lines of ``initial`` (read_tables)
    batches: list            # [Batch]
    final_image: MemoryImage  # model memory after the whole run (no completions written)
    model_recover_records: int = 0
    mlp_lag: int | None = None   # MLP_LAG written at configuration (None: reset value)
    prewrite: bool = False   # the host writes each doorbell's descriptors during the previous one

    @property
    def n_batches(self) -> int:
        return len(self.batches)

    @property
    def final_tables(self) -> dict:
        return self.batches[-1].tables_after if self.batches else self.tables0

    def tables_after(self, c: int) -> dict:
        """Expected table bytes with ``c`` batches committed."""
        if not 0 <= c <= len(self.batches):
            raise ValueError(f"committed batch {c} outside 0..{len(self.batches)}")
        return self.tables0 if c == 0 else self.batches[c - 1].tables_after

    def read_tables(self, mem) -> dict:
        """``{line address: bytes}`` of every line of the tables' extents that ``mem`` holds
        (lines never written are absent and read as ``mem``'s fill). One pass over ``mem``'s
        lines, so it costs what the image holds, not the tables' size."""
        return _table_lines(self.tables, mem)

    def table_diffs(self, mem, want: dict, limit: int = 4) -> list:
        """``[(tid, row, element, want, got)]`` of the first differing elements of ``mem``'s
        tables against ``want`` (table lines, :meth:`read_tables`), in address order."""
        got = self.read_tables(mem)
        fill = mem._fill_line
        out = []
        for a in sorted(set(got) | set(want)):
            g, w = got.get(a, fill), want.get(a, fill)
            if g == w:
                continue
            t = next(t for t in self.tables if t.holds(a))
            gi, wi = np.frombuffer(g, "<i4"), np.frombuffer(w, "<i4")
            for k in np.nonzero(gi != wi)[0].tolist():
                el = (a - t.base) // 4 + k
                out.append((t.tid, el // t.dim, el % t.dim, int(wi[k]), int(gi[k])))
                if len(out) >= limit:
                    return out
        return out

    def regions_excluding_staging(self):
        c = self.cfg
        return [(getattr(c, r + "_base"), getattr(c, r + "_size"))
                for r in ("table", "log", "superblock", "slots")]

    def model(self, mem: MemoryImage) -> TrainingDevice:
        """A golden model over ``mem`` with this workload's directory and LR programmed."""
        dev = TrainingDevice(self.cfg, mem)
        for t in self.tables:
            dev.set_table(t.tid, t.base, t.rows, t.dim)
        dev.lr = self.lr
        if self.mlp_lag is not None:
            dev.csr_write("MLP_LAG", self.mlp_lag)
        return dev

    @property
    def cpl_errors(self) -> dict:
        """``{status name: count}`` of the model's error completions over the run."""
        out = {}
        for b in self.batches:
            for name in b.errors:
                out[name] = out.get(name, 0) + 1
        return out

    @property
    def snapshots(self) -> list:
        """``[(epoch, slot index, payload)]`` of the model's run, in order."""
        return [b.snap for b in self.batches if b.snap is not None]

    def legal_mlp(self, committed: int, batches_rung: int, batches_read: int) -> set:
        """The ``(MLP_SLOT, MLP_EPOCH)`` pairs recovery may report after a cut, from the model's
        run: ``committed`` = the recovered C, ``batches_rung`` = batches whose doorbell was
        rung before the cut (their SNAPSHOT may have been accepted), ``batches_read`` =
        batches whose completions the host had read.

        Snapshots complete in order, so the cut leaves ``n`` of them complete, between
        ``n_lo`` and ``n_hi``: ``n_hi`` = SNAPSHOTs rung; ``n_lo`` from what the host saw: a
        SNAPSHOT completion read means the previous snapshot was done (a SNAPSHOT waits for the
        one in flight), a COMMIT(``b``) completion read means a snapshot of epoch >= ``b - k``
        was done. With ``n`` complete, snapshot ``n``'s slot holds it and the other slot
        snapshot ``n-1``'s, unless snapshot ``n+1`` (accepted, ``n < n_hi``) was being written
        there: then that slot is torn (invalid) (once its header has landed it counts as
        complete). Recovery chooses the valid slot with the larger epoch ``<= committed``."""
        snaps = [(b.batch, b.snap) for b in self.batches if b.snap is not None]
        rung = [s for bb, s in snaps if bb <= batches_rung]
        read = [s for bb, s in snaps if bb <= batches_read]
        n_hi = len(rung)
        n_lo = max(0, len(read) - 1)
        k = self.mlp_lag
        if k is not None:
            for b in range(1, batches_read + 1):     # COMMIT(b) completed: P >= b - k
                need = [j for j, s in enumerate(snaps, 1) if s[1][0] >= b - k]
                if b - k > 0 and need:
                    n_lo = max(n_lo, need[0])
        n_lo = min(n_lo, n_hi)

        def chosen(slots):
            best = None
            for i in (0, 1):
                s = slots.get(i)
                if s is not None and s[0] <= committed and (best is None or s[0] > best[1]):
                    best = (i, s[0])
            return (0, 0) if best is None else (best[0] + 1, best[1])

        out = set()
        for n in range(n_lo, n_hi + 1):
            slots = {}
            for e, i, _p in rung[:n]:
                slots[i] = (e,)
            out.add(chosen(slots))
            if n < n_hi:
                torn = dict(slots)
                torn.pop(rung[n][1], None)       # snapshot n+1's slot, being overwritten
                out.add(chosen(torn))
        return out

    @staticmethod
    def cpl_mismatches(want: dict, got: dict) -> dict:
        return {k: (want[k], got.get(k)) for k in want
                if k not in CPL_COMPARE_SKIP and int(want[k]) != int(got.get(k, -1))}


def _table_lines(tables, mem) -> dict:
    spans = sorted((t.base, t.base + t.nbytes) for t in tables)
    lo, hi = spans[0][0], spans[-1][1]
    return {a: bytes(v) for a, v in mem._lines.items()
            if lo <= a < hi and any(b <= a < e for b, e in spans)}


def _lr_fixed(x: float, frac_bits: int) -> int:
    return int(round(x * (1 << frac_bits)))


def make_workload(cfg: DeviceConfig, seed: int, *, dims=(16, 32, 64), rows=(300, 200, 160),
                  n_batches: int = 4, n_bags: int = 4, pooling: int = 3, alpha: float = 1.05,
                  lr: float = 0.05, ring_size: int = 16, snap_bytes: int = 0,
                  snap_lag: int | None = None, hot_set: int = 0, init: str = "all",
                  allow_errors: bool = False, late_lookup: int = 0,
                  split_doorbell: bool = False, prewrite: bool = False) -> TrainingWorkload:
    """Build the workload and run it on the golden model (fresh device: format, then batches).

    ``init``: ``"all"`` or ``"touched"`` (which table rows are written; module docstring).
    ``allow_errors``: error completions of the model are expected ones instead of a refusal.

    ``snap_bytes`` > 0: a SNAPSHOT of that many bytes in every batch, with MLP_LAG =
    ``snap_lag`` (None: not written; module docstring). ``hot_set`` > 0: the last bag of table
    0 in every batch also reads ``hot_set`` rows that all fall in one set of the logged set
    (seeded set), so with more rows than ways the set overflows: those rows are logged again
    by every LOOKUP+LOG and UPDATE that touches them (duplicate records; recovery applies the
    oldest last). Needs ``rows[0] >= hot_set * log_set_sets``.

    ``late_lookup`` > 0: every batch also holds a second LOOKUP+LOG of the last table (the
    widest rows), right after its UPDATEs (before its SNAPSHOT and COMMIT): that many bags of
    ``pooling`` distinct rows the batch has not read before (so each is logged), with an
    output area of its own. Its records outpace the media write port, so they may still be in
    flight when the LOOKUP completes and the next descriptor (or the host) runs.
    ``split_doorbell``: every batch is rung as two doorbells, the second holding its SNAPSHOT
    (if any) and COMMIT; the host waits for the first doorbell's completions in between.
    ``prewrite``: the host writes the descriptors of each doorbell into the ring (through
    CXL.mem) while the device executes the previous doorbell, right after ringing it
    (``DeviceDriver.submit(ahead=...)``); the descriptors and completions are the same."""
    if len(dims) != len(rows):
        raise ValueError("dims and rows must have the same length")
    if snap_bytes < 0:
        raise ValueError(f"snap_bytes must be >= 0, got {snap_bytes}")
    if snap_lag is not None and not 0 <= snap_lag < 1 << 32:
        raise ValueError(f"snap_lag must fit 32 bits, got {snap_lag}")
    per_batch = 2 * len(dims) + 1 + (1 if snap_bytes else 0) + (1 if late_lookup else 0)
    if late_lookup < 0:
        raise ValueError(f"late_lookup must be >= 0 bags, got {late_lookup}")
    sets = cfg.log_set_sets
    if hot_set and (hot_set > sets or rows[0] < hot_set * sets):
        raise ValueError(f"hot_set={hot_set} needs at most {sets} rows and table 0 of at "
                         f"least {hot_set * sets} rows, has {rows[0]}")
    if init not in ("all", "touched"):
        raise ValueError(f"init must be 'all' or 'touched', got {init!r}")
    if per_batch > ring_size - 1:
        raise ValueError(f"{per_batch} descriptors per batch do not fit a ring of {ring_size}")
    rng = np.random.default_rng(seed)
    hot_rows = []
    if hot_set:
        # x = sets*j + (s ^ j): x ^ (x >> log2(sets)) = s for every j < sets (table 0)
        s_hot = int(rng.integers(0, sets))
        hot_rows = [sets * j + ((s_hot ^ j) & (sets - 1)) for j in range(hot_set)]
        assert len({log_set_index(sets, 0, x) for x in hot_rows}) == 1
    mem = MemoryImage(1 << cfg.addr_bits)
    talloc = RegionAllocator(cfg.table_base, cfg.table_size)
    specs = []
    for tid, (r, d) in enumerate(zip(rows, dims)):
        base = talloc.alloc(r * d * 4)
        specs.append(TableSpec(tid, base, r, d))
        if init == "all":
            mem.write_i32(base, make_table(rng, r, d, cfg.frac_bits, 1.0).ravel())
    touched = [set() for _ in specs]        # init "touched": rows some batch reads, per table
    salloc = RegionAllocator(cfg.staging_base, cfg.staging_size)
    ring_base = salloc.alloc(ring_size * DESC_BYTES)
    cpl_base = salloc.alloc(ring_size * CPL_BYTES)
    lr_csr = _lr_fixed(lr, cfg.frac_bits)
    lr_desc = _lr_fixed(lr * 0.5, cfg.frac_bits)

    # every batch's staging data and descriptors first (they do not depend on the model) ...
    plans = []
    tag = 1
    for b in range(1, n_batches + 1):
        staging, descs, outs = [], [], []
        per_table = []
        for t in specs:
            offsets, indices = make_bags(rng, n_bags, pooling, t.rows, mode="uniform",
                                         alpha=alpha)
            # shuffle rank -> row so the hot rows are spread over the table
            perm = rng.permutation(t.rows).astype(np.uint32)
            indices = perm[indices]
            if t.tid == 0 and hot_rows:
                indices = np.concatenate([indices, np.array(hot_rows, np.uint32)])
                offsets = offsets.copy()
                offsets[-1] += len(hot_rows)
            touched[t.tid].update(indices.tolist())
            if t is specs[-1]:
                batch_rows = indices.tolist()
            oaddr = salloc.alloc(4 * len(offsets))
            iaddr = salloc.alloc(max(4 * len(indices), 4))
            gaddr = salloc.alloc(n_bags * t.dim * 4)
            out = salloc.alloc(n_bags * t.dim * 4)
            grads = (rng.standard_normal((n_bags, t.dim)) * (1 << cfg.frac_bits)).astype(np.int32)
            staging += [(oaddr, offsets.astype("<u4").tobytes()),
                        (iaddr, indices.astype("<u4").tobytes()),
                        (gaddr, grads.astype("<i4").tobytes())]
            outs.append((out, n_bags * t.dim * 4))
            uo, ui = oaddr, iaddr
            if t.tid == 1:
                # this table's UPDATE has bags of its own: rows the LOOKUP did not log are
                # logged by the UPDATE itself (synchronous path)
                offsets, indices = make_bags(rng, n_bags, pooling, t.rows, mode="uniform",
                                             alpha=alpha)
                uo = salloc.alloc(4 * len(offsets))
                ui = salloc.alloc(max(4 * len(indices), 4))
                staging += [(uo, offsets.astype("<u4").tobytes()),
                            (ui, perm[indices].astype("<u4").tobytes())]
                touched[t.tid].update(perm[indices].tolist())
            per_table.append((t, oaddr, iaddr, gaddr, out, uo, ui))
        for t, oaddr, iaddr, _g, out, _uo, _ui in per_table:
            descs.append(TrainingDevice.make_desc(
                kind=DescKind.LOOKUP, flags=FLAG_LOG, table=t.tid, tag=tag, batch=b,
                n_bags=n_bags, offsets_addr=oaddr, indices_addr=iaddr, out_addr=out))
            tag += 1
        for t, _o, _i, gaddr, _out, oaddr, iaddr in per_table:
            use_desc_lr = t.tid == 2
            descs.append(TrainingDevice.make_desc(
                kind=DescKind.UPDATE, flags=FLAG_DESC_LR if use_desc_lr else 0, table=t.tid,
                tag=tag, batch=b, n_bags=n_bags, lr=lr_desc if use_desc_lr else 0,
                offsets_addr=oaddr, indices_addr=iaddr, grads_addr=gaddr))
            tag += 1
        if late_lookup:
            # rows this batch has not read yet, so every one is logged: its records then
            # outpace the write port and still drain when the LOOKUP completes
            t = specs[-1]
            fresh = np.setdiff1d(np.arange(t.rows), np.asarray(batch_rows, np.int64))
            need = late_lookup * pooling
            if need > len(fresh):
                raise ValueError(f"late_lookup={late_lookup} bags of {pooling} rows need "
                                 f"{need} rows of table {t.tid} not read in batch {b}, "
                                 f"it has {len(fresh)}")
            indices = rng.permutation(fresh)[:need].astype(np.uint32)
            offsets = (np.arange(late_lookup + 1) * pooling).astype(np.uint32)
            touched[t.tid].update(indices.tolist())
            oaddr = salloc.alloc(4 * len(offsets))
            iaddr = salloc.alloc(max(4 * len(indices), 4))
            out = salloc.alloc(late_lookup * t.dim * 4)
            staging += [(oaddr, offsets.astype("<u4").tobytes()),
                        (iaddr, indices.astype("<u4").tobytes())]
            outs.append((out, late_lookup * t.dim * 4))
            descs.append(TrainingDevice.make_desc(
                kind=DescKind.LOOKUP, flags=FLAG_LOG, table=t.tid, tag=tag, batch=b,
                n_bags=late_lookup, offsets_addr=oaddr, indices_addr=iaddr, out_addr=out))
            tag += 1
        payload = None
        if snap_bytes:
            # its own buffer, at an unaligned start (the engine realigns)
            src = salloc.alloc(snap_bytes + 64) + (8 * b + 4) % 64
            payload = rng.integers(0, 256, snap_bytes, dtype=np.uint8).tobytes()
            staging.append((src, payload))
            descs.append(TrainingDevice.make_desc(kind=DescKind.SNAPSHOT, tag=tag, batch=b,
                                                  data_addr=src, length=snap_bytes))
            tag += 1
        descs.append(TrainingDevice.make_desc(kind=DescKind.COMMIT, tag=tag, batch=b))
        tag += 1
        tail = 1 + (1 if snap_bytes else 0)          # SNAPSHOT, COMMIT
        doorbells = (len(descs) - tail, tail) if split_doorbell else ()
        plans.append((b, staging, descs, outs, payload, doorbells))
    if init == "touched":
        # each row from its own stream: its values do not depend on the other rows read
        for t in specs:
            for x in sorted(touched[t.tid]):
                v = make_table(np.random.default_rng([seed, t.tid, x]), 1, t.dim,
                               cfg.frac_bits, 1.0)
                mem.write_i32(t.base + x * t.dim * 4, v.ravel())
    initial = mem.copy()

    # ... then the golden model runs them
    dev = TrainingDevice(cfg, mem)
    for t in specs:
        dev.set_table(t.tid, t.base, t.rows, t.dim)
    dev.lr = lr_csr
    if snap_lag is not None:
        dev.csr_write("MLP_LAG", snap_lag)
    rec = dev.recover()
    batches = []
    for b, staging, descs, outs, payload, doorbells in plans:
        for a, data in staging:
            mem.write(a, data)
        expect = []
        for d in descs:
            c = unpack_fields(CPL_FIELDS, dev.execute(d))
            if c["status"] != DeviceError.OK and not allow_errors:
                raise RuntimeError(f"workload seed {seed}: model completion {c} is an error; "
                                   "allow_errors (\"allow_errors\": true in a campaign's "
                                   "--workload) expects error completions")
            expect.append(c)
        snap = (b, dev.mlp_slot - 1, payload) if snap_bytes else None
        batches.append(Batch(b, staging, descs, expect, _table_lines(specs, mem), outs, snap,
                             doorbells))
    return TrainingWorkload(cfg=cfg, seed=seed, tables=specs, lr=lr_csr, ring_base=ring_base,
                            ring_size=ring_size, cpl_base=cpl_base, initial=initial,
                            tables0=_table_lines(specs, initial), batches=batches, final_image=mem,
                            model_recover_records=rec, mlp_lag=snap_lag, prewrite=prewrite)

