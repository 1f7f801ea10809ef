"""Trainer-facing embedding devices (docs/dlrm.md section 4): staging layout, the fixed-point
descriptor layer shared by the golden-model device and the RTL device, and a float32 reference.

- :class:`StagingLayout`: every address the trainer uses (tables in the table region; rings, per
  table bag/output/gradient buffers and two MLP snapshot buffers in staging) and the descriptors
  built from them. The model device and the RTL device (cosim/) use this one class, so they
  issue byte-identical descriptors.
- :class:`FixedPointEmbeddings`: float-facing ``lookup/update/commit/snapshot/restart``; converts
  with :mod:`sw_model.fixedpoint` and drives the device through five I/O primitives a subclass
  provides (``write_staging``, ``read_mem``, ``submit``, ``restart_device``, ``set_mlp_lag_csr``).
- :class:`ModelDevice`: those primitives on :class:`sw_model.training.TrainingDevice` over a
  ``MemoryImage``, with model-level power failures (:meth:`ModelDevice.schedule_power_failure`).
- :class:`FloatEmbeddings`: float32 tables in numpy, same float-facing interface, no failures.

Pure numpy; imports only ``hw.config``/``hw.encodings`` from hw/.
"""
from __future__ import annotations

import abc
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from hw.config import DeviceConfig, LINE_BYTES, SUPPORTED_DIMS
from hw.encodings import (CPL_BYTES, CPL_FIELDS, DESC_BYTES, DESC_FIELDS, FLAG_DESC_LR, FLAG_LOG,
                          N_TABLES, SNAP_HDR_FIELDS, SNAP_MAGIC, DescKind, DeviceError,
                          pack_fields, unpack_fields)
from .fixedpoint import to_fixed, to_float
from .memory import MemoryImage
from .training import TrainingDevice


class PowerFailure(Exception):
    """Power was lost during a device call; the device must be restarted (``restart()``)."""


class DeviceStatusError(RuntimeError):
    """A completion with a status other than OK: ``code`` (DeviceError or int), ``name``,
    ``value`` (the completion's ``err_value``), ``bag`` (``err_bag``), ``descriptor`` (dict of
    ``DESC_FIELDS``), ``completion`` (dict of ``CPL_FIELDS``)."""

    def __init__(self, code, value, descriptor: dict, completion: dict | None = None,
                 bag: int = 0, what: str = ""):
        try:
            code = DeviceError(code)
            name = code.name
        except ValueError:
            name = f"code {int(code)}"
        self.code, self.name, self.value, self.bag = code, name, int(value), int(bag)
        self.descriptor, self.completion = descriptor, completion
        kind = descriptor.get("kind")
        kname = DescKind(kind).name if kind in DescKind._value2member_map_ else kind
        super().__init__(f"{what}{name} (value {int(value)}, bag {bag}) for {kname} descriptor "
                         f"table={descriptor.get('table')} batch={descriptor.get('batch')} "
                         f"tag={descriptor.get('tag')}")


class SnapshotError(RuntimeError):
    """The MLP slot the device reported after recovery does not read back as a valid snapshot."""


@dataclass(frozen=True)
class RecoveryInfo:
    """Result of ``restart()``: ``committed`` (C), ``mlp_epoch`` (epoch m of the recovered MLP
    snapshot, None if none), ``blob`` (its payload bytes, None if none)."""
    committed: int
    mlp_epoch: int | None
    blob: bytes | None


def _align(x: int, a: int = LINE_BYTES) -> int:
    return -(-x // a) * a


def snap_slot_bytes(cfg: DeviceConfig) -> int:
    """Bytes of one MLP slot (docs/training.md section 9): ``(slots_size // 2) // 64 * 64``."""
    return (cfg.slots_size // 2) // LINE_BYTES * LINE_BYTES


def snap_crc(payload: bytes, header_line: bytes) -> int:
    """Section 9 CRC: zlib CRC-32 over the payload zero-padded to whole lines, then the header
    line with its ``crc`` bytes zero."""
    pad = bytes(payload) + bytes(_align(len(payload)) - len(payload))
    hdr = bytearray(header_line[:LINE_BYTES])
    _, off, w = next(f for f in SNAP_HDR_FIELDS if f[0] == "crc")
    hdr[off:off + w] = bytes(w)
    return zlib.crc32(pad + bytes(hdr)) & 0xFFFFFFFF


# ---- staging layout ------------------------------------------------------------------------------

class StagingLayout:
    """Addresses for one training job on a device of configuration ``cfg``.

    Table region: table ``t`` at ``table_base[t]`` (back to back from ``cfg.table_base``, 64 B
    aligned, ``rows*dim*4`` bytes). Staging region, from ``cfg.staging_base`` + ``offset``, each
    buffer 64 B aligned, in this order: command ring (``ring_size`` x 64 B), completion ring
    (same), then per table ``t``: ``offsets[t]`` ((max_bags+1) u32), ``indices[t]``
    (max_indices[t] u32), ``out[t]`` (max_bags x dim int32), ``grads[t]`` (same); then the two
    MLP snapshot buffers ``snap[0]``, ``snap[1]`` (``snapshot_bytes`` each). ``end`` is the first
    byte after them. Raises ValueError if anything does not fit its region or the device rules
    (dims 16/32/64/128, at most 8 tables, ring size a power of two in 2..65536 that holds one
    descriptor per table, snapshot no larger than a slot's capacity).
    """

    def __init__(self, cfg: DeviceConfig, table_rows: Sequence[int], table_dims: Sequence[int],
                 max_bags: int, max_indices, snapshot_bytes: int, *, ring_size: int = 16,
                 offset: int = 0):
        rows, dims = [int(r) for r in table_rows], [int(d) for d in table_dims]
        T = len(rows)
        if not 1 <= T <= N_TABLES or len(dims) != T:
            raise ValueError(f"need 1..{N_TABLES} tables with one dim each, got {T} rows, "
                             f"{len(dims)} dims")
        for t, (r, d) in enumerate(zip(rows, dims)):
            if d not in SUPPORTED_DIMS:
                raise ValueError(f"table {t}: dim {d} not in {SUPPORTED_DIMS}")
            if not 1 <= r < (1 << 32):
                raise ValueError(f"table {t}: rows {r} must be in 1..2^32-1")
        if isinstance(max_indices, (int, np.integer)):
            max_indices = [int(max_indices)] * T
        max_indices = [int(m) for m in max_indices]
        if len(max_indices) != T or min(max_indices) < 0 or max_bags < 1:
            raise ValueError(f"max_bags >= 1 and one max_indices >= 0 per table required, got "
                             f"{max_bags}, {max_indices}")
        if not (2 <= ring_size <= 65536 and ring_size & (ring_size - 1) == 0
                and ring_size - 1 >= T):
            raise ValueError(f"ring_size must be a power of two in 2..65536 holding {T} "
                             f"descriptors (>= {T + 1}), got {ring_size}")
        cap = snap_slot_bytes(cfg) - LINE_BYTES
        if not 0 <= snapshot_bytes <= cap:
            raise ValueError(f"snapshot_bytes {snapshot_bytes} exceeds the slot capacity {cap}")
        if offset % LINE_BYTES:
            raise ValueError(f"offset {offset:#x} must be 64 B aligned")
        self.cfg, self.table_rows, self.table_dims = cfg, tuple(rows), tuple(dims)
        self.max_bags, self.max_indices = int(max_bags), tuple(max_indices)
        self.snapshot_bytes, self.ring_size = int(snapshot_bytes), int(ring_size)

        a = cfg.table_base
        self.table_base = []
        for r, d in zip(rows, dims):
            self.table_base.append(a)
            a = _align(a + r * d * 4)
        if a > cfg.table_base + cfg.table_size:
            raise ValueError(f"tables need {a - cfg.table_base:#x} B, table region has "
                             f"{cfg.table_size:#x}")
        self.table_end = a

        self._regions = []
        cur = [cfg.staging_base + offset]

        def take(name, nbytes):
            addr = cur[0]
            self._regions.append((name, addr, int(nbytes)))
            cur[0] = _align(addr + max(int(nbytes), 1))
            return addr

        self.cmd_ring = take("cmd_ring", ring_size * DESC_BYTES)
        self.cpl_ring = take("cpl_ring", ring_size * CPL_BYTES)
        self.offsets, self.indices, self.out, self.grads = [], [], [], []
        for t in range(T):
            self.offsets.append(take(f"offsets{t}", 4 * (max_bags + 1)))
            self.indices.append(take(f"indices{t}", 4 * max_indices[t]))
            self.out.append(take(f"out{t}", 4 * max_bags * dims[t]))
            self.grads.append(take(f"grads{t}", 4 * max_bags * dims[t]))
        self.snap = [take("snap0", snapshot_bytes), take("snap1", snapshot_bytes)]
        self.end = cur[0]
        if self.end > cfg.staging_base + cfg.staging_size:
            raise ValueError(f"staging layout needs {self.end - cfg.staging_base:#x} B, staging "
                             f"has {cfg.staging_size:#x}")

    @property
    def n_tables(self) -> int:
        return len(self.table_rows)

    def regions(self) -> list[tuple[str, int, int]]:
        """``(name, address, bytes)`` of every staging buffer, in address order."""
        return list(self._regions)

    def directory(self) -> list[tuple[int, int, int, int]]:
        """Table directory entries ``(table id, base, rows, dim)``."""
        return [(t, self.table_base[t], self.table_rows[t], self.table_dims[t])
                for t in range(self.n_tables)]

    # -- descriptors (the same bytes for every device) ------------------------------------------
    def lookup_desc(self, t: int, batch: int, n_bags: int, *, log: bool = True,
                    tag: int = 0) -> bytes:
        return pack_fields(DESC_FIELDS, dict(
            kind=DescKind.LOOKUP, flags=FLAG_LOG if log else 0, table=t, tag=tag, batch=batch,
            n_bags=n_bags, offsets_addr=self.offsets[t], indices_addr=self.indices[t],
            data_addr=self.out[t]), DESC_BYTES)

    def update_desc(self, t: int, batch: int, n_bags: int, lr_q: int, *, tag: int = 0) -> bytes:
        """UPDATE with the descriptor's lr (flag DESC_LR); the LR CSR is not used."""
        return pack_fields(DESC_FIELDS, dict(
            kind=DescKind.UPDATE, flags=FLAG_DESC_LR, table=t, tag=tag, batch=batch,
            n_bags=n_bags, lr=lr_q, offsets_addr=self.offsets[t], indices_addr=self.indices[t],
            data_addr=self.grads[t]), DESC_BYTES)

    def commit_desc(self, batch: int, *, tag: int = 0) -> bytes:
        return pack_fields(DESC_FIELDS, dict(kind=DescKind.COMMIT, tag=tag, batch=batch),
                           DESC_BYTES)

    def snapshot_desc(self, epoch: int, buf: int, length: int, *, tag: int = 0) -> bytes:
        """SNAPSHOT (kind 4): ``batch`` = epoch, ``data_addr`` = ``snap[buf]``, ``length``."""
        return pack_fields(DESC_FIELDS, dict(kind=DescKind.SNAPSHOT, tag=tag, batch=epoch,
                                             data_addr=self.snap[buf], length=length),
                           DESC_BYTES)

    def slot_addr(self, slot_index: int) -> int:
        """Header address of MLP slot ``slot_index`` (0 = A, 1 = B)."""
        return self.cfg.slots_base + slot_index * snap_slot_bytes(self.cfg)


# ---- the fixed-point descriptor layer ------------------------------------------------------------

def lr_to_fixed(lr: float, frac_bits: int) -> int:
    """Learning rate as the unsigned Q(32-f).f ``lr`` field: ``round_half_even(lr * 2^f)``.
    ValueError if it is negative, not finite, >= 2^32 after scaling, or rounds to 0 from a
    positive value (the device would silently not learn)."""
    lr = float(lr)
    if not np.isfinite(lr) or lr < 0:
        raise ValueError(f"learning rate {lr!r} must be finite and >= 0")
    q = int(np.rint(lr * float(1 << frac_bits)))
    if q >= 1 << 32:
        raise ValueError(f"learning rate {lr} does not fit unsigned Q{32 - frac_bits}.{frac_bits}"
                         f" (max {((1 << 32) - 1) / (1 << frac_bits)})")
    if q == 0 and lr > 0:
        raise ValueError(f"learning rate {lr} rounds to 0 in Q{32 - frac_bits}.{frac_bits}")
    return q


def _bags_u32(bags, n_tables: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Check ``bags`` = one ``(offsets, indices)`` per table; return them as u32 arrays."""
    if len(bags) != n_tables:
        raise ValueError(f"expected bags for {n_tables} tables, got {len(bags)}")
    out = []
    for t, (o, x) in enumerate(bags):
        o, x = np.asarray(o), np.asarray(x)
        for name, a in (("offsets", o), ("indices", x)):
            if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
                raise ValueError(f"table {t}: {name} must be a 1-D integer array")
            if a.size and (int(a.min()) < 0 or int(a.max()) >= 1 << 32):
                raise ValueError(f"table {t}: {name} outside u32")
        if o.size < 1:
            raise ValueError(f"table {t}: offsets must have n_bags + 1 >= 1 entries")
        out.append((o.astype(np.uint32), x.astype(np.uint32)))
    return out


class FixedPointEmbeddings(abc.ABC):
    """Float-facing embedding device over the descriptor protocol of docs/training.md.

    Float layer (what the trainer calls): :meth:`lookup`, :meth:`update`, :meth:`commit`,
    :meth:`snapshot`, :meth:`restart`, :meth:`tables`, :meth:`float_tables`, :meth:`set_mlp_lag`.
    Raw layer (fixed point, concrete here): :meth:`lookup_q`, :meth:`update_q`, :meth:`commit_q`,
    :meth:`snapshot_q`: each writes its staging buffers, builds the descriptors with the layout
    (LOOKUP and UPDATE: one descriptor per table, rung with one doorbell), submits them and
    raises :class:`DeviceStatusError` for any non-OK completion (or a completion whose tag/kind
    does not match its descriptor).

    I/O primitives a subclass implements: ``write_staging(chunks)`` (host writes ``[(addr,
    bytes)]``), ``read_mem(addr, n)`` (host read of staging or the MLP slots), ``submit(descs)``
    (write descriptors at the ring tail, ring the doorbell once, wait, return the completion
    records as ``CPL_FIELDS`` dicts in order), ``restart_device()`` (power on, program directory
    and rings, RECOVER; returns ``(committed, mlp_slot, mlp_epoch)``; the subclass also re-applies
    MLP_LAG), ``set_mlp_lag_csr(k)``, ``read_tables_q()`` (list of int32 (rows, dim)).
    Any of them may raise :class:`PowerFailure`.

    Counters (``stats``): ``grad_sat`` (gradient elements saturated by to_fixed), ``lookup_sat``,
    ``update_sat``, ``update_rows``, ``log_records``, ``descriptors``, ``snapshots``.
    """

    def __init__(self, layout: StagingLayout, *, mlp_lag: int | None = None):
        self.layout = layout
        self.cfg = layout.cfg
        self.frac_bits = layout.cfg.frac_bits
        self.mlp_lag = mlp_lag
        self._tag = 0
        self._snap_buf = 0
        self.committed = 0
        self.stats = dict(grad_sat=0, lookup_sat=0, update_sat=0, update_rows=0, log_records=0,
                          descriptors=0, snapshots=0)

    # -- I/O primitives ----------------------------------------------------------------------------
    @abc.abstractmethod
    def write_staging(self, chunks: list[tuple[int, bytes]]): ...

    @abc.abstractmethod
    def read_mem(self, addr: int, n: int) -> bytes: ...

    @abc.abstractmethod
    def submit(self, descs: list[bytes]) -> list[dict]: ...

    @abc.abstractmethod
    def restart_device(self) -> tuple[int, int, int]: ...

    @abc.abstractmethod
    def set_mlp_lag_csr(self, k: int): ...

    @abc.abstractmethod
    def read_tables_q(self) -> list[np.ndarray]: ...

    # -- helpers -----------------------------------------------------------------------------------
    def _next_tag(self) -> int:
        self._tag = (self._tag + 1) & 0xFFFFFFFF
        return self._tag

    def _run(self, descs: list[bytes], what: str) -> list[dict]:
        cpls = self.submit(descs)
        if len(cpls) != len(descs):
            raise RuntimeError(f"{what}: {len(descs)} descriptors but {len(cpls)} completions")
        self.stats["descriptors"] += len(descs)
        for d, c in zip(descs, cpls):
            dd = unpack_fields(DESC_FIELDS, d)
            if c["tag"] != dd["tag"] or c["kind"] != dd["kind"]:
                raise RuntimeError(f"{what}: completion tag/kind {c['tag']}/{c['kind']} does "
                                   f"not match the descriptor's {dd['tag']}/{dd['kind']}")
            if c["status"] != DeviceError.OK:
                raise DeviceStatusError(c["status"], c["err_value"], dd, c, bag=c["err_bag"],
                                        what=f"{what}: ")
        return cpls

    def _stage_bags(self, bags) -> list[tuple[np.ndarray, np.ndarray]]:
        L = self.layout
        bags = _bags_u32(bags, L.n_tables)
        chunks = []
        for t, (o, x) in enumerate(bags):
            n = len(o) - 1
            if n > L.max_bags:
                raise ValueError(f"table {t}: {n} bags, layout holds {L.max_bags}")
            if len(x) > L.max_indices[t]:
                raise ValueError(f"table {t}: {len(x)} indices, layout holds {L.max_indices[t]}")
            chunks += [(L.offsets[t], o.astype("<u4").tobytes()),
                       (L.indices[t], x.astype("<u4").tobytes())]
        self.write_staging(chunks)
        return bags

    # -- raw (fixed-point) layer -------------------------------------------------------------------
    def lookup_q(self, batch: int, bags, *, log: bool = True) -> list[np.ndarray]:
        """LOOKUP every table (flag LOG if ``log``; batch must then be the open batch); returns
        int32 (n_bags, dim) per table."""
        L = self.layout
        bags = self._stage_bags(bags)
        descs = [L.lookup_desc(t, batch, len(o) - 1, log=log, tag=self._next_tag())
                 for t, (o, _) in enumerate(bags)]
        cpls = self._run(descs, f"LOOKUP batch {batch}")
        outs = []
        for t, ((o, _), c) in enumerate(zip(bags, cpls)):
            n, dim = len(o) - 1, L.table_dims[t]
            self.stats["lookup_sat"] += c["sat"]
            self.stats["log_records"] += c["log_records"]
            outs.append(np.frombuffer(self.read_mem(L.out[t], n * dim * 4), dtype="<i4")
                        .astype(np.int32).reshape(n, dim))
        return outs

    def update_q(self, batch: int, bags, grads_q: Sequence[np.ndarray], lr_q: int):
        """UPDATE every table with int32 gradients (n_bags, dim) and u32 ``lr_q``."""
        L = self.layout
        bags = self._stage_bags(bags)
        if len(grads_q) != L.n_tables:
            raise ValueError(f"expected gradients for {L.n_tables} tables, got {len(grads_q)}")
        chunks = []
        for t, ((o, _), g) in enumerate(zip(bags, grads_q)):
            g = np.asarray(g)
            shape = (len(o) - 1, L.table_dims[t])
            if g.shape != shape or g.dtype != np.int32:
                raise ValueError(f"table {t}: gradients must be int32 {shape}, got {g.dtype} "
                                 f"{g.shape}")
            chunks.append((L.grads[t], g.astype("<i4").tobytes()))
        self.write_staging(chunks)
        descs = [L.update_desc(t, batch, len(o) - 1, lr_q, tag=self._next_tag())
                 for t, (o, _) in enumerate(bags)]
        for c in self._run(descs, f"UPDATE batch {batch}"):
            self.stats["update_sat"] += c["sat"]
            self.stats["update_rows"] += c["rows"]
            self.stats["log_records"] += c["log_records"]

    def commit_q(self, batch: int):
        self._run([self.layout.commit_desc(batch, tag=self._next_tag())], f"COMMIT {batch}")
        self.committed = batch

    def snapshot_q(self, epoch: int, blob: bytes):
        """Write ``blob`` to the next of the two snapshot buffers, SNAPSHOT(epoch) from it."""
        L = self.layout
        blob = bytes(blob)
        if len(blob) > L.snapshot_bytes:
            raise ValueError(f"snapshot of {len(blob)} B, layout buffers hold {L.snapshot_bytes}")
        buf = self._snap_buf
        self.write_staging([(L.snap[buf], blob)])
        self._run([L.snapshot_desc(epoch, buf, len(blob), tag=self._next_tag())],
                  f"SNAPSHOT {epoch}")
        self._snap_buf ^= 1
        self.stats["snapshots"] += 1

    # -- float layer -------------------------------------------------------------------------------
    def lookup(self, batch: int, bags, *, log: bool = True) -> list[np.ndarray]:
        """Pooled embeddings per table as float32 (n_bags, dim): the exact fixed-point sums,
        saturated to int32, divided by 2^frac_bits."""
        return [to_float(q, self.frac_bits).astype(np.float32)
                for q in self.lookup_q(batch, bags, log=log)]

    def update(self, batch: int, bags, grads, lr: float):
        """SGD on the rows of every bag: ``row -= lr * grad[bag]`` in the device's fixed point
        (gradients through ``to_fixed``, saturations counted in ``stats['grad_sat']``; NaN is
        a ValueError; ``lr`` through :func:`lr_to_fixed`)."""
        lr_q = lr_to_fixed(lr, self.frac_bits)
        gq = []
        for g in grads:
            q, n_sat = to_fixed(np.asarray(g, dtype=np.float32), self.frac_bits)
            self.stats["grad_sat"] += n_sat
            gq.append(q)
        self.update_q(batch, bags, gq, lr_q)

    def commit(self, batch: int):
        self.commit_q(batch)

    def snapshot(self, epoch: int, blob: bytes):
        self.snapshot_q(epoch, blob)

    def set_mlp_lag(self, k: int):
        """MLP_LAG = ``k`` now and after every restart."""
        if not 0 <= int(k) < 1 << 32:
            raise ValueError(f"MLP_LAG {k} does not fit 32 bits")
        self.mlp_lag = int(k)
        self.set_mlp_lag_csr(self.mlp_lag)

    def tables(self) -> list[np.ndarray]:
        """Current tables as int32 (rows, dim)."""
        return self.read_tables_q()

    def float_tables(self) -> list[np.ndarray]:
        return [to_float(q, self.frac_bits) for q in self.read_tables_q()]

    def restart(self) -> RecoveryInfo:
        """Power on after a failure: recover the device, read the MLP slot it chose."""
        c, slot, epoch = self.restart_device()
        self.committed = c
        self._snap_buf = 0
        if slot == 0:
            return RecoveryInfo(c, None, None)
        if slot not in (1, 2):
            raise SnapshotError(f"MLP_SLOT = {slot}, expected 0, 1 or 2")
        return RecoveryInfo(c, epoch, self.read_slot(slot - 1, epoch))

    def read_slot(self, i: int, epoch: int | None = None) -> bytes:
        """Payload of MLP slot ``i`` (0 = A, 1 = B) after checking magic, length, CRC and (if
        given) the epoch; SnapshotError otherwise."""
        a = self.layout.slot_addr(i)
        line = self.read_mem(a, LINE_BYTES)
        h = unpack_fields(SNAP_HDR_FIELDS, line)
        cap = snap_slot_bytes(self.cfg) - LINE_BYTES
        if h["magic"] != SNAP_MAGIC or h["length"] > cap:
            raise SnapshotError(f"slot {i}: bad header {h}")
        if epoch is not None and h["epoch"] != epoch:
            raise SnapshotError(f"slot {i}: epoch {h['epoch']}, device reported {epoch}")
        payload = self.read_mem(a + LINE_BYTES, h["length"])
        if snap_crc(payload, line) != h["crc"]:
            raise SnapshotError(f"slot {i}: CRC mismatch")
        return payload


# ---- golden-model device with power failures -----------------------------------------------------

class _JournalMemory(MemoryImage):
    """MemoryImage that remembers the bytes each write replaced (``last``: addr, old bytes)."""

    last = None
    journal = False          # only while a power failure is scheduled (costs a read per write)

    def write(self, address, data, **kwargs):
        data = bytes(data)
        if self.journal:
            self.last = (int(address), self.read(address, len(data)))
        super().write(address, data)

    def copy(self):
        m = _JournalMemory(self.size, self.fill)
        m._lines = {a: bytearray(v) for a, v in self._lines.items()}
        m.poisoned = set(self.poisoned)
        return m


class ModelDevice(FixedPointEmbeddings):
    """:class:`FixedPointEmbeddings` on the golden model: a :class:`TrainingDevice` over a
    ``MemoryImage``, driven through its command ring and doorbell exactly as a host would.

    ``init_tables``: per table int32 (rows, dim) written into the table region before the first
    recovery (which formats the superblock). ``seed``: the power-failure coin and the garbage
    written over staging on a failure.

    Power failures: :meth:`schedule_power_failure` (``after_writes`` = n): the next n device
    writes (everything the model reports through ``on_write``: rows, undo records, superblock,
    snapshot slots, completions) land; the (n+1)-th is in flight when power is lost: each of
    its 64 B lines lands or not by a seeded coin, then :class:`PowerFailure` is raised, the
    staging buffers of the layout are overwritten with seeded garbage and every call but
    :meth:`restart` raises PowerFailure. ``restart()`` builds a fresh TrainingDevice over the
    surviving memory, reprograms directory, rings and MLP_LAG, recovers and reads the slot.
    ``writes`` counts device writes since construction (to place failures).
    """

    def __init__(self, layout: StagingLayout, init_tables: Sequence[np.ndarray], *,
                 mlp_lag: int | None = None, seed: int = 0, mem: MemoryImage | None = None):
        super().__init__(layout, mlp_lag=mlp_lag)
        self.mem = mem if mem is not None else _JournalMemory(1 << layout.cfg.addr_bits)
        if not isinstance(self.mem, _JournalMemory):
            raise TypeError("ModelDevice needs its own journaling memory (pass mem=None)")
        self.rng = np.random.default_rng(seed)
        self.writes = 0
        self.failures = 0
        self._fail_at = None
        self.dead = False
        if len(init_tables) != layout.n_tables:
            raise ValueError(f"{len(init_tables)} initial tables for {layout.n_tables}")
        for t, tab in enumerate(init_tables):
            tab = np.asarray(tab)
            shape = (layout.table_rows[t], layout.table_dims[t])
            if tab.shape != shape or tab.dtype != np.int32:
                raise ValueError(f"table {t}: need int32 {shape}, got {tab.dtype} {tab.shape}")
            self.mem.write_i32(layout.table_base[t], tab.ravel())
        self._power_on()

    # -- power -------------------------------------------------------------------------------------
    def _power_on(self):
        L = self.layout
        dev = TrainingDevice(self.cfg, self.mem)
        dev.on_write = self._on_write
        for t, base, rows, dim in L.directory():
            dev.set_table(t, base, rows, dim)
        self.dev = dev
        self.dead = False
        dev.recover()               # may raise PowerFailure (a failure during recovery)
        if dev.configure_ring(L.cmd_ring, L.ring_size, L.cpl_ring) != DeviceError.OK:
            raise RuntimeError("configure_ring refused after recovery")
        self.tail = 0
        if self.mlp_lag is not None:
            self.set_mlp_lag_csr(self.mlp_lag)
        self.committed = dev.committed

    def _on_write(self, addr: int, data: bytes, what: str):
        self.writes += 1
        if self._fail_at is None or self.writes < self._fail_at:
            return
        # this write was in flight when power was lost: each line lands or not
        a0, old = self.mem.last
        assert a0 == addr and len(old) == len(data)
        o = 0
        while o < len(data):
            k = min(LINE_BYTES - (addr + o) % LINE_BYTES, len(data) - o)
            if self.rng.random() < 0.5:
                MemoryImage.write(self.mem, addr + o, old[o:o + k])
            o += k
        self._fail_at = None
        self.mem.journal = False
        self.failures += 1
        self.dead = True
        for _, a, n in self.layout.regions():
            MemoryImage.write(self.mem, a, self.rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        raise PowerFailure(f"power failure at device write {self.writes} ({what} at {addr:#x})")

    def schedule_power_failure(self, after_writes: int):
        """Lose power during the device write after the next ``after_writes`` writes."""
        if after_writes < 0:
            raise ValueError("after_writes must be >= 0")
        self._fail_at = self.writes + int(after_writes) + 1
        self.mem.journal = True

    def restart_from(self, mem: MemoryImage, *, copy: bool = True):
        """Power on over a copy of ``mem`` (e.g. another device's crash image), reprogram and
        recover as :meth:`restart_device` does (lock-step twins of the RTL use it);
        ``copy=False`` takes ``mem``'s lines over instead (``mem`` must not be used
        afterwards)."""
        m = _JournalMemory(mem.size, mem.fill)
        m._lines = {a: bytearray(v) for a, v in mem._lines.items()} if copy else mem._lines
        m.poisoned = set(mem.poisoned)
        self.mem = m
        self.cancel_power_failure()
        self._power_on()

    def cancel_power_failure(self):
        self._fail_at = None
        self.mem.journal = False

    def _alive(self):
        if self.dead:
            raise PowerFailure("device is powered off (call restart())")

    # -- I/O primitives ----------------------------------------------------------------------------
    def write_staging(self, chunks):
        self._alive()
        for a, d in chunks:
            MemoryImage.write(self.mem, a, d)

    def read_mem(self, addr, n):
        self._alive()
        return self.mem.read(addr, n)

    def submit(self, descs):
        self._alive()
        L, dev = self.layout, self.dev
        if len(descs) > L.ring_size - 1:
            raise ValueError(f"{len(descs)} descriptors do not fit a ring of {L.ring_size}")
        slots = [(self.tail + i) % L.ring_size for i in range(len(descs))]
        for s, d in zip(slots, descs):
            MemoryImage.write(self.mem, L.cmd_ring + DESC_BYTES * s, d)
        new_tail = (self.tail + len(descs)) % L.ring_size
        code = dev.doorbell(new_tail)
        if code != DeviceError.OK:
            raise DeviceStatusError(code, dev.err_value, {}, what="doorbell refused: ")
        dev.process()
        self.tail = new_tail
        return [unpack_fields(CPL_FIELDS, self.mem.read(L.cpl_ring + CPL_BYTES * s, CPL_BYTES))
                for s in slots]

    def restart_device(self):
        self._power_on()            # a scheduled failure may hit recovery too
        return self.dev.committed, self.dev.mlp_slot, self.dev.mlp_epoch

    def set_mlp_lag_csr(self, k):
        self._alive()
        self.dev.csr_write("MLP_LAG", int(k))

    def read_tables_q(self):
        self._alive()
        return [self.dev.table_array(t).copy() for t in range(self.layout.n_tables)]

    def read_rows_q(self, t: int, rows) -> np.ndarray:
        """Rows ``rows`` (in the order given, each in [0, the table's rows)) of table ``t`` as
        int32 (len(rows), dim): a few rows of a large table without reading all of it."""
        self._alive()
        base, n, dim = self.dev.tables[t]
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"table {t}: rows outside [0, {n})")
        row = 4 * dim
        mem = self.dev.mem
        raw = b"".join([mem.read(base + row * int(r), row) for r in rows.tolist()])
        return np.frombuffer(raw, dtype="<i4").astype(np.int32).reshape(rows.size, dim)


# ---- float32 reference ---------------------------------------------------------------------------

class FloatEmbeddings:
    """The float32-embedding reference: tables float32 in numpy, ``row -= lr * grad`` applied
    row by row in bag order (``np.subtract.at``), pooling summed in float64 and rounded to
    float32. Same float-facing interface as FixedPointEmbeddings; ``batch`` arguments are
    checked (LOG/UPDATE/COMMIT need the open batch) so a trainer bug shows up here too.
    ``restart`` is not supported (no failures)."""

    def __init__(self, init_tables: Sequence[np.ndarray], *, mlp_lag: int | None = None):
        self._tables = [np.array(t, dtype=np.float32) for t in init_tables]
        for t, tab in enumerate(self._tables):
            if tab.ndim != 2 or tab.shape[1] not in SUPPORTED_DIMS:
                raise ValueError(f"table {t}: need (rows, dim) with dim in {SUPPORTED_DIMS}")
        self.committed = 0
        self.mlp_lag = mlp_lag
        self.snapshots = {}
        self.stats = dict(descriptors=0, snapshots=0)

    def _check_batch(self, batch, what):
        if batch != self.committed + 1:
            raise ValueError(f"{what}: batch {batch} is not the open batch {self.committed + 1}")

    def lookup(self, batch: int, bags, *, log: bool = True) -> list[np.ndarray]:
        if log:
            self._check_batch(batch, "lookup")
        out = []
        for t, (o, x) in enumerate(_bags_u32(bags, len(self._tables))):
            tab = self._tables[t]
            n = len(o) - 1
            lens = np.diff(o.astype(np.int64))
            if np.any(lens < 0):
                raise ValueError(f"table {t}: offsets decrease")
            if len(x) < int(o[-1]):
                raise ValueError(f"table {t}: {len(x)} indices, offsets need {int(o[-1])}")
            x = x[:int(o[-1])].astype(np.int64)
            if x.size and x.max() >= tab.shape[0]:
                raise ValueError(f"table {t}: index {int(x.max())} >= rows {tab.shape[0]}")
            acc = np.zeros((n, tab.shape[1]), dtype=np.float64)
            np.add.at(acc, np.repeat(np.arange(n), lens), tab[x])
            out.append(acc.astype(np.float32))
        return out

    def update(self, batch: int, bags, grads, lr: float):
        self._check_batch(batch, "update")
        for t, ((o, x), g) in enumerate(zip(_bags_u32(bags, len(self._tables)), grads)):
            g = np.asarray(g, dtype=np.float32)
            if np.isnan(g).any():
                raise ValueError(f"table {t}: NaN gradient")
            lens = np.diff(o.astype(np.int64))
            seg = np.repeat(np.arange(len(o) - 1), lens)
            np.subtract.at(self._tables[t], x[:int(o[-1])].astype(np.int64),
                           np.float32(lr) * g[seg])

    def commit(self, batch: int):
        self._check_batch(batch, "commit")
        self.committed = batch

    def snapshot(self, epoch: int, blob: bytes):
        self.snapshots[epoch] = bytes(blob)
        self.stats["snapshots"] += 1

    def set_mlp_lag(self, k: int):
        self.mlp_lag = int(k)

    def tables(self) -> list[np.ndarray]:
        """Current tables (float32 copies; this device has no fixed point)."""
        return [t.copy() for t in self._tables]

    def float_tables(self) -> list[np.ndarray]:
        return [t.astype(np.float64) for t in self._tables]

    def restart(self) -> RecoveryInfo:
        raise RuntimeError("FloatEmbeddings has no power failures and cannot restart")
