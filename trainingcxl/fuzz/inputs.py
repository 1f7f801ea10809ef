"""Fuzz inputs, pure Python (no cocotb): mutated command descriptors, CSR operations, raw
CXL.mem headers. Every generator takes a ``random.Random`` so a run is reproducible from its
seed; the benches (:mod:`trainingcxl.fuzz.tb`) decide the expected answer with the golden model,
never with the RTL.
"""
from __future__ import annotations

import random

from hw.encodings import (DESC_BYTES, DESC_FIELDS, FLAG_DESC_LR, FLAG_LOG, N_TABLES, DescKind,
                          pack_fields, unpack_fields)

__all__ = ["FIELD_NAMES", "RESERVED_BYTES", "mutate_desc", "interesting", "bound_work",
           "csr_op", "lookup_overlaps_inputs", "reads_range", "MAX_BAGS_RUN", "MAX_SNAP_RUN"]

FIELD_NAMES = tuple(n for n, _, _ in DESC_FIELDS)
_WIDTH = {n: w for n, _, w in DESC_FIELDS}
# bytes no field covers (docs/training.md section 2: reserved, written 0, ignored by the device)
RESERVED_BYTES = tuple(sorted(set(range(DESC_BYTES)) -
                              {o + k for _, o, w in DESC_FIELDS for k in range(w)}))
# a descriptor that passes every range check runs at most this many bags (the bench's time budget;
# larger counts that would pass are folded below it, see bound_work)
MAX_BAGS_RUN = 16
# and a SNAPSHOT that passes its checks copies less than this many bytes
MAX_SNAP_RUN = 4096


def interesting(rng: random.Random, width_bytes: int, near=()) -> int:
    """A value for a field of ``width_bytes``: boundaries, small numbers, values near ``near``
    (valid addresses, the open batch), single bits, or uniform random."""
    top = (1 << (8 * width_bytes)) - 1
    r = rng.random()
    if r < 0.25 and near:
        v = rng.choice(near) + rng.choice((0, 0, 1, -1, 2, 4, -4, 64, -64, 4096))
    elif r < 0.45:
        v = rng.choice((0, 1, 2, 3, 7, 8, 15, 16, 64, 255, 256, 0xFFFF, 0x10000))
    elif r < 0.6:
        v = rng.choice((top, top - 1, top >> 1, (top >> 1) + 1))
    elif r < 0.75:
        v = 1 << rng.randrange(8 * width_bytes)
    else:
        v = rng.getrandbits(8 * width_bytes)
    return v & top


def mutate_desc(rng: random.Random, template: bytes, *, near=()) -> tuple[bytes, str]:
    """One mutation of ``template`` (a valid descriptor); returns (descriptor, what was done).
    Kinds: a field set to an interesting value, a bit flip anywhere, reserved bytes filled, a
    flags byte with unknown bits, a kind byte from 0..255, several fields at once, or 64 random
    bytes."""
    d = unpack_fields(DESC_FIELDS, template)
    raw = bytearray(template)
    r = rng.random()
    if r < 0.40:
        f = rng.choice(FIELD_NAMES)
        d[f] = interesting(rng, _WIDTH[f], near)
        return pack_fields(DESC_FIELDS, d, DESC_BYTES), f"field {f}={d[f]:#x}"
    if r < 0.55:
        bit = rng.randrange(8 * DESC_BYTES)
        raw[bit // 8] ^= 1 << (bit % 8)
        return bytes(raw), f"bit flip {bit}"
    if r < 0.65:
        for b in rng.sample(RESERVED_BYTES, rng.randint(1, len(RESERVED_BYTES))):
            raw[b] = rng.randrange(1, 256)
        return bytes(raw), "reserved bytes"
    if r < 0.72:
        raw[1] = rng.randrange(256)
        return bytes(raw), f"flags {raw[1]:#x}"
    if r < 0.80:
        raw[0] = rng.randrange(256)
        return bytes(raw), f"kind {raw[0]}"
    if r < 0.95:
        fs = rng.sample(FIELD_NAMES, rng.randint(2, 4))
        for f in fs:
            d[f] = interesting(rng, _WIDTH[f], near)
        return pack_fields(DESC_FIELDS, d, DESC_BYTES), "fields " + ",".join(fs)
    return bytes(rng.getrandbits(8) for _ in range(DESC_BYTES)), "random bytes"


def bound_work(desc: bytes, model) -> bytes:
    """Keep the device's work bounded: a LOOKUP/UPDATE whose command-level checks would all pass
    with more than :data:`MAX_BAGS_RUN` bags gets ``n_bags % MAX_BAGS_RUN`` (the checks are
    asked of the golden model itself, ``TrainingDevice._cmd_checks``, so nothing is guessed).
    A huge count that the checks refuse is kept: that refusal is what the fuzz wants to see."""
    from sw_model.training import _Stop
    d = unpack_fields(DESC_FIELDS, desc)
    if d["kind"] == DescKind.SNAPSHOT and d["length"] > MAX_SNAP_RUN:
        # a copy that passes the length and range checks (docs/training.md section 9) would
        # move up to the slot capacity (256 MiB by default): folded below MAX_SNAP_RUN bytes
        from sw_model.training import snap_capacity
        cfg = model.cfg
        s0, s1 = cfg.staging_base, cfg.staging_base + cfg.staging_size
        if d["length"] <= snap_capacity(cfg) and s0 <= d["data_addr"] and \
                d["data_addr"] + d["length"] <= s1:
            d["length"] %= MAX_SNAP_RUN
            return pack_fields(DESC_FIELDS, d, DESC_BYTES)
        return desc
    if d["kind"] not in (DescKind.LOOKUP, DescKind.UPDATE) or d["n_bags"] <= MAX_BAGS_RUN:
        return desc
    if d["table"] >= N_TABLES:
        return desc
    tbase, rows, dim = model.tables[d["table"]]
    try:
        model._cmd_checks(dim, rows, tbase, d["data_addr"], d["offsets_addr"],
                          d["indices_addr"], d["n_bags"])
    except _Stop:
        return desc
    d["n_bags"] %= MAX_BAGS_RUN
    return pack_fields(DESC_FIELDS, d, DESC_BYTES)


# ---- CSR operations -------------------------------------------------------------------------------

def csr_op(rng: random.Random, regmap, *, near=()) -> tuple:
    """One CSR operation: ``("w", addr, value, strb)`` or ``("r", addr)``. Addresses: any mapped
    register (read-only and read/write alike), unmapped offsets in and beyond the map, and
    unaligned byte addresses; values from :func:`interesting`; strobes contiguous and non-empty
    (the AXI4-Lite master's limit)."""
    regs = list(regmap.registers)
    r = rng.random()
    if r < 0.6 and regs:
        addr = regmap.offset(rng.choice(regs))
    elif r < 0.85:
        addr = rng.randrange(0, 0x1000, 4)
    else:
        addr = rng.randrange(0, 0x1000)
    if rng.random() < 0.25:
        return ("r", addr)
    value = interesting(rng, 4, near)
    strb = 0xF if rng.random() < 0.7 else rng.choice((0x1, 0x2, 0x4, 0x8, 0x3, 0x6, 0xC, 0x7, 0xE))
    return ("w", addr, value, strb)


def desc_template(kind: DescKind, **fields) -> bytes:
    fields["kind"] = int(kind)
    return pack_fields(DESC_FIELDS, fields, DESC_BYTES)


FLAGS_GOOD = {DescKind.LOOKUP: (0, FLAG_LOG), DescKind.UPDATE: (0, FLAG_DESC_LR)}


def _bag_command(d: dict, model):
    """``(dim, n_bags)`` of a LOOKUP or UPDATE (unpacked) that the range checks let read its
    inputs, else None (bad table; n_bags > 64 or dim > 1024 are refused before any read)."""
    if d["kind"] not in (DescKind.LOOKUP, DescKind.UPDATE) or d["table"] >= N_TABLES:
        return None
    dim, n = model.tables[d["table"]][2], d["n_bags"]
    return None if n > 64 or dim > 1024 else (dim, n)


def _index_ranges(d: dict, n: int, rows: int) -> list:
    """The offsets (n + 1 words) and the first ``rows`` indices of a LOOKUP/UPDATE."""
    return [(d["offsets_addr"], d["offsets_addr"] + 4 * (n + 1)),
            (d["indices_addr"], d["indices_addr"] + 4 * rows)]


def _overlaps(ranges, lo: int, hi: int) -> bool:
    return any(a < hi and lo < b for a, b in ranges)


def lookup_overlaps_inputs(desc: bytes, model) -> bool:
    """A LOOKUP whose output range may overlap its offsets or indices (conservatively: the
    indices of up to max_bag rows per bag)."""
    d = unpack_fields(DESC_FIELDS, desc)
    g = _bag_command(d, model) if d["kind"] == DescKind.LOOKUP else None
    if g is None:
        return False            # refused by the range checks before any output is written
    dim, n = g
    try:
        ends = model.mem.read_u32(d["offsets_addr"], n + 1).tolist()
    except (ValueError, IndexError):
        return False            # unreadable offsets: refused before any output is written
    top = min(max(ends), model.cfg.max_bag * max(n, 1))
    return _overlaps(_index_ranges(d, n, top), d["data_addr"],
                     d["data_addr"] + max(n, 1) * max(dim, 1) * 4)


def reads_range(desc: bytes, model, rng: tuple) -> bool:
    """A descriptor whose inputs may lie in ``[rng[0], rng[1])`` (conservatively: indices of
    up to max_bag rows per bag, a snapshot's whole length)."""
    d = unpack_fields(DESC_FIELDS, desc)
    if d["kind"] == DescKind.SNAPSHOT:
        return _overlaps([(d["data_addr"], d["data_addr"] + d["length"])], *rng)
    g = _bag_command(d, model)
    if g is None:
        return False            # no inputs, or refused before any is read
    dim, n = g
    ins = _index_ranges(d, n, model.cfg.max_bag * max(n, 1))
    if d["kind"] == DescKind.UPDATE:
        ins.append((d["data_addr"], d["data_addr"] + max(n, 1) * max(dim, 1) * 4))
    return _overlaps(ins, *rng)
