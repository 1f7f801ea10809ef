"""Device cycle formulas for LOOKUP(+LOG), UPDATE, COMMIT and SNAPSHOT, fitted to RTL runs.

The forms follow the RTL's structure (docs/benchmarks.md, docs/training.md, the engines'
docstrings): the media port moves one line per cycle each way, limited by Little's law on the
256 outstanding reads/writes; only fixed overheads, the record buffer's capacity and the
snapshot's per-window cost are fitted (least squares on relative error) to the ``fit`` points of
``data/rtl_cycles.json`` (measured by ``python -m trainingcxl.system.measure``).
:func:`validate` checks them on the ``held_out`` points, which no fit saw. All counts in device
clock cycles; ``L`` is the media read = write latency in cycles; ``little`` =
``max(1, (L + 3) / 256)``; ``d = dim/16`` lines per row; ``n`` lookups, ``B`` bags, ``U``
distinct rows.

LOOKUP+LOG (doorbell to completion record persistent)::

    c0 + c1*L + max(R * little,  W * little - K)
    R = n*d + ceil(n/16) + ceil((B+1)/16)     lines read: rows, index list, offsets
    W = U*(d + 1) + B*d                        lines written: undo records, pooled outputs
    K                                          what the record buffer absorbs (fitted)

UPDATE (doorbell, after the undo backlog drained, to completion persistent)::

    c0 + c1*L + (n*d + loss) * little
    loss = rho * ((G - 1) * (d - q) + S * (1 - q))
    rho  = r / n                               share of items that read their row (the rest
                                               join a row still in flight and are forwarded)
    r    = D(w) + (n - w) * (D(w + 1) - D(w))  expected such items, D(k) = expected distinct
                                               rows among k draws of the table's distribution
    w    = floor((2L + 12) / (d * little)) + 1 items whose tracker entries an item still finds
    G    = min(B, n)                           gradient bursts (a bag's d lines, at its first item)
    S    = max(0, ceil(n/16) - 32) + max(0, ceil((B+1)/16) - 32)
                                               index and offsets lines read while rows stream
    q    = 1 - rho ** (n / (G + S))            the read slice has its line of room again

    The row stage issues one line per cycle, a row read or a forwarded line, and the write
    stage writes one line per cycle behind it. Row reads share the engine's read port with the
    gradient, index and offsets reads, which have priority (RequestPortMux, fixed priority):
    every cycle the port serves one of those while the row stage has a row read waiting is a
    cycle the writes lose, except the one the register slice in front of the port absorbs when
    a forwarded line has drained it since the last such episode. Forwarded lines need no
    port, so a burst that meets a forwarded item costs nothing. Uniform rows over a large table
    (rho = 1, q = 0) give n*d + (B - 1)*d + S, the reads; skewed rows give less.

COMMIT (completion ``cycles`` + the descriptor fetch and completion write around it)::

    c0 + c1*L

SNAPSHOT (doorbell to the superblock flip acknowledged), Q = source lines
= ceil((src % 64 + bytes) / 64)::

    c0 + c1*L + max(Q + e*L,  a*Q + b*Q*L/32 + e*ceil(Q/32)*L)

    the copy keeps at most 32 source reads in flight (SnapshotEngine.depth = min(max_reads,
    32)), so above a latency of about 24 cycles it moves 32 lines per round trip (Little's
    law), else one line per cycle; ``e*L`` is the round trip of the last window
"""
from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from trainingcxl.system.workload import expected_distinct

__all__ = ["DATA_FILE", "Formulas", "fit", "default_formulas", "validate", "load_data",
           "update_window", "update_row_reads"]

DATA_FILE = pathlib.Path(__file__).resolve().parent / "data" / "rtl_cycles.json"
MAX_OUTSTANDING = 256   # DeviceConfig().max_reads = max_writes of the measured build
SNAP_DEPTH = 32         # SnapshotEngine depth: min(max_reads, 32) source reads in flight
SNAP_OFFSET = 7         # measure.py copies from a staging address 7 bytes past a line
ROUND_TRIP = 3          # cycles of a media read beyond L: the PMEM model's handshake, the media
                        # adapter's R register and its response path (docs/benchmarks.md, LOOKUP)
COMMANDS = ("lookup", "update", "commit", "snapshot")
# An UPDATE item's row-tracker entry lives 2L + d + 12 cycles from its first line's issue at the
# row stage: the fit points' traces give 2L + d + 9 from that line's media read to the last
# line's write acknowledgement, plus the request and acknowledgement paths around the media.
ENTRY_EXTRA = 12
# Lines the UPDATE's offsets and index readers fetch before the rows stream (WordReader depth
# max(4, max_reads / 8) = 32 lines each, hw/gather/front.py)
READ_AHEAD = 32


def little(latency) -> float:
    return max(1.0, (latency + ROUND_TRIP) / MAX_OUTSTANDING)


def lookup_lines(n_bags, lookups, dim, distinct):
    """Lines read ``R`` and written ``W`` by a LOOKUP+LOG."""
    d = dim / 16
    R = lookups * d + math.ceil(lookups / 16) + math.ceil((n_bags + 1) / 16)
    W = distinct * (d + 1) + n_bags * d
    return R, W


def update_window(dim, latency) -> int:
    """Items before an UPDATE item whose rows are still in flight when it reaches the row stage
    (it joins such a row instead of reading it): the entry's life in items of d lines."""
    d = dim // 16
    return math.floor((2 * latency + ENTRY_EXTRA) / (d * little(latency))) + 1


def update_row_reads(*, lookups, dim, latency, rows, dist="uniform", alpha=1.05) -> float:
    """Expected UPDATE items that read their row (no item of the same row among the previous
    ``update_window`` items): sum over items of the probability that the row is new in the
    window, D(w) + (n - w) * (D(w + 1) - D(w)) with D the expected distinct rows."""
    n = int(lookups)
    w = update_window(dim, latency)
    if n <= w:
        return expected_distinct(n, rows, dist, alpha)
    dw = expected_distinct(w, rows, dist, alpha)
    return dw + (n - w) * (expected_distinct(w + 1, rows, dist, alpha) - dw)


def update_body(n_bags, lookups, dim, latency, row_reads) -> float:
    """UPDATE cycles beyond c0 + c1*L: the write stream and the cycles its row reads lose to
    the gradient, index and offsets reads on the shared read port (module docstring)."""
    d = dim / 16
    rho = min(1.0, row_reads / lookups)
    bursts = min(n_bags, lookups)
    steals = (max(0, math.ceil(lookups / 16) - READ_AHEAD)
              + max(0, math.ceil((n_bags + 1) / 16) - READ_AHEAD))
    q = 1.0 - rho ** (lookups / (bursts + steals))
    loss = rho * ((bursts - 1) * (d - q) + steals * (1 - q))
    return (lookups * d + loss) * little(latency)


@dataclass(frozen=True)
class Formulas:
    lookup_c: tuple      # c0, c1
    lookup_k: float      # K: record-buffer lines
    update_c: tuple      # c0, c1
    commit_c: tuple      # c0, c1
    snapshot_c: tuple    # c0, c1, a, b, e

    def lookup_body(self, *, n_bags, lookups, dim, distinct, latency) -> float:
        R, W = lookup_lines(n_bags, lookups, dim, distinct)
        return max(R, W - self.lookup_k / little(latency)) * little(latency)

    def lookup(self, *, n_bags, lookups, dim, distinct, latency) -> float:
        c0, c1 = self.lookup_c
        return c0 + c1 * latency + self.lookup_body(n_bags=n_bags, lookups=lookups, dim=dim,
                                                    distinct=distinct, latency=latency)

    def update(self, *, n_bags, lookups, dim, latency, row_reads) -> float:
        """``row_reads``: items that read their row (:func:`update_row_reads`)."""
        c0, c1 = self.update_c
        return c0 + c1 * latency + update_body(n_bags, lookups, dim, latency, row_reads)

    def commit(self, *, latency) -> float:
        c0, c1 = self.commit_c
        return c0 + c1 * latency

    def snapshot(self, *, nbytes, latency, offset=0) -> float:
        Q = math.ceil((offset % 64 + nbytes) / 64)
        c0, c1, a, b, e = self.snapshot_c
        L = latency
        return c0 + c1 * L + max(Q + e * L, a * Q + b * Q * L / SNAP_DEPTH
                                 + e * math.ceil(Q / SNAP_DEPTH) * L)

    def predict(self, point: dict) -> dict:
        """Predicted cycles of one measured point's four commands."""
        kw = dict(n_bags=point["n_bags"], lookups=point["lookups"], dim=point["dim"],
                  distinct=point["distinct_rows"], latency=point["latency"])
        return {"lookup": self.lookup(**kw),
                "update": self.update(n_bags=point["n_bags"], lookups=point["lookups"],
                                      dim=point["dim"], latency=point["latency"],
                                      row_reads=point_row_reads(point)),
                "commit": self.commit(latency=point["latency"]),
                "snapshot": self.snapshot(nbytes=point["snap_bytes"], latency=point["latency"],
                                          offset=point.get("snap_offset", SNAP_OFFSET))}

    def as_dict(self) -> dict:
        return {k: (float(v) if not isinstance(v, tuple) else [float(x) for x in v])
                for k, v in self.__dict__.items()}


def point_row_reads(point: dict) -> float:
    """Expected row-reading UPDATE items of a measured point, from its description (the
    distribution, not its drawn index list)."""
    return update_row_reads(lookups=point["lookups"], dim=point["dim"],
                            latency=point["latency"], rows=point["rows"], dist=point["dist"],
                            alpha=point.get("alpha", 1.05))


def measured(point: dict) -> dict:
    m = point["measured"]
    return {"lookup": m["lookup"], "update": m["update"],
            "commit": m["commit_cycles"] + m["descriptor_overhead"],
            "snapshot": m["snapshot"]}


def load_data(path=None) -> dict:
    """The recorded RTL measurements (default: the committed ``data/rtl_cycles.json``)."""
    return json.loads(pathlib.Path(path or DATA_FILE).read_text())


def _lsq(X, y, z):
    """Least squares of X b = z, rows weighted by 1/y (relative error in y)."""
    w = 1.0 / y
    return np.linalg.lstsq(X * w[:, None], z * w, rcond=None)[0]


def fit(points) -> Formulas:
    """Fit every formula to ``points`` (measured dicts). LOOKUP's buffer ``K`` is the grid
    value (16-line steps up to 8192) with the least squared relative error."""
    if len(points) < 6:
        raise ValueError(f"need at least 6 fit points, got {len(points)}")
    y = {c: np.array([measured(p)[c] for p in points], dtype=float) for c in COMMANDS}
    L = np.array([p["latency"] for p in points], dtype=float)
    X = np.c_[np.ones(len(points)), L]
    kw = [dict(n_bags=p["n_bags"], lookups=p["lookups"], dim=p["dim"],
               distinct=p["distinct_rows"], latency=p["latency"]) for p in points]
    best = None
    for K in range(0, 8193, 16):
        f = Formulas((0.0, 0.0), float(K), (0.0, 0.0), (0.0, 0.0), (0.0,) * 5)
        body = np.array([f.lookup_body(**k) for k in kw])
        c = _lsq(X, y["lookup"], y["lookup"] - body)
        err = ((X @ c + body) / y["lookup"] - 1)
        sse = float(err @ err)
        if best is None or sse < best[0]:
            best = (sse, float(K), tuple(c))
    _, K, lk = best
    ub = np.array([update_body(p["n_bags"], p["lookups"], p["dim"], p["latency"],
                               point_row_reads(p)) for p in points])
    up = _lsq(X, y["update"], y["update"] - ub)
    cm = _lsq(X, y["commit"], y["commit"])
    Q = np.array([math.ceil((p.get("snap_offset", SNAP_OFFSET) % 64 + p["snap_bytes"]) / 64)
                  for p in points], dtype=float)
    # windowed points (32/(L + c) lines per cycle below the port's one) fix the form; the port
    # bound shares c0, c1 and e
    lb = (L + 8) / SNAP_DEPTH > 1.0
    if lb.sum() < 5:
        raise ValueError("need at least 5 fit points with media latency above 24 cycles")
    Xs = np.c_[np.ones(len(points)), L, Q, Q * L / SNAP_DEPTH, np.ceil(Q / SNAP_DEPTH) * L]
    sn = _lsq(Xs[lb], y["snapshot"][lb], y["snapshot"][lb])
    return Formulas(tuple(float(x) for x in lk), K, tuple(float(x) for x in up),
                    tuple(float(x) for x in cm), tuple(float(x) for x in sn))


VALIDATION_ROLES = ("held_out", "blind", "blind2")


def _points(doc, role):
    roles = (role,) if isinstance(role, str) else tuple(role)
    return [p for p in doc["points"] if p["role"] in roles]


@lru_cache(maxsize=1)
def default_formulas() -> Formulas:
    """The formulas fitted to the committed measurements' ``fit`` points."""
    return fit(_points(load_data(), "fit"))


def rows_desc(point: dict) -> str:
    """The table's rows and distribution, e.g. ``zipf 1.05 of 2^20`` or ``uniform of 512``."""
    r = point["rows"]
    size = f"2^{r.bit_length() - 1}" if r & (r - 1) == 0 and r >= 1024 else str(r)
    dist = f"zipf {point.get('alpha', 1.05):g}" if point["dist"] == "zipf" else point["dist"]
    return f"{dist} of {size}"


def validate(doc=None, formulas: Formulas | None = None, role=VALIDATION_ROLES) -> list[dict]:
    """Predicted vs measured cycles on the points of ``role`` (a role or a tuple of roles;
    default: the held-out and both blind sets, none of which the fit sees)."""
    doc = load_data() if doc is None else doc
    f = formulas or fit(_points(doc, "fit"))
    rows = []
    for p in _points(doc, role):
        pred, meas = f.predict(p), measured(p)
        for c in COMMANDS:
            rows.append({"point": p["point"], "role": p["role"], "command": c,
                         "latency": p["latency"],
                         "dim": p["dim"], "n_bags": p["n_bags"], "pooling": p["pooling"],
                         "rows_desc": rows_desc(p),
                         "distinct": p["distinct_rows"], "snap_bytes": p["snap_bytes"],
                         "measured": meas[c], "predicted": pred[c],
                         "error": pred[c] / meas[c] - 1})
    return rows
