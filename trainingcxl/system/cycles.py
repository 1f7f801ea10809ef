"""Device cycle formulas for LOOKUP(+LOG), UPDATE, COMMIT and SNAPSHOT, fitted to RTL runs.

The forms follow the RTL's structure (docs/benchmarks.md, docs/training.md); the coefficients
are least-squares fits to the ``fit`` points of ``data/rtl_cycles.json`` (measured by
``python -m trainingcxl.system.measure``), and :func:`validate` checks them on the
``held_out`` points, which no fit saw. All counts in device clock cycles; ``latency`` is the
media read = write latency in cycles (the PMEM model's ``read_latency``).

LOOKUP+LOG (doorbell to completion record persistent)::

    c0 + c1*L + max(a_r * R * little,  a_w * W - K)

    R = n*dim/16 + ceil(n/16) + ceil((B+1)/16)   lines read: rows, index list, offsets
    little = max(1, (L + 2) / max_reads)           Little's law on the outstanding reads
    W = U*(dim/16 + 1) + B*dim/16                  lines written: undo records, outputs
    K                                              what the record buffer absorbs

UPDATE (doorbell, after the undo backlog drained, to completion persistent)::

    c0 + c1*L + max(a_w * n*dim/16 + a_g * B*dim/16,  a_t * n_rows * (2L) / upd_rows)

    first term: the row writes (one per (bag, row)) and the gradient reads on the shared
    one-line-per-cycle ports; second: the exact row tracker (``upd_rows`` rows in flight from
    read to write acknowledge, Little's law)

COMMIT (completion ``cycles`` + the descriptor fetch and completion write around it)::

    c0 + c1*L

SNAPSHOT (doorbell to the superblock flip acknowledged)::

    c0 + c1*L + max(S, a*S + b*S*L/32)                          S = ceil(bytes/64)

    the copy reads at most ``depth`` = 32 source lines ahead (hw/snapshot/engine.py), so it
    runs at 32/(L + c) lines per cycle (Little's law, ``a`` = c/32) unless that exceeds the
    port's one line per cycle
"""
from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["DATA_FILE", "Formulas", "fit", "default_formulas", "validate", "load_data",
           "features"]

DATA_FILE = pathlib.Path(__file__).resolve().parent / "data" / "rtl_cycles.json"
MAX_READS = 256       # DeviceConfig().max_reads of the measured build
UPD_ROWS = 512        # DeviceConfig().upd_rows
SNAP_DEPTH = 32       # SnapshotEngine depth: min(max_reads, 32) source reads in flight
COMMANDS = ("lookup", "update", "commit", "snapshot")


def features(n_bags, lookups, dim, distinct, latency):
    lines_row = dim / 16
    R = lookups * lines_row + math.ceil(lookups / 16) + math.ceil((n_bags + 1) / 16)
    little = max(1.0, (latency + 2) / MAX_READS)
    W = distinct * (lines_row + 1) + n_bags * lines_row
    return R, little, W


def _max2(X1, X2, y, iters=30):
    """Fit y = max(X1 @ b1, X2 @ b2) with shared columns handled by the caller: alternate
    between assigning each point to the branch that is larger and least squares per branch
    (relative errors: rows scaled by 1/y). Returns (b1, b2)."""
    w = 1.0 / y
    assign = np.zeros(len(y), dtype=bool)          # False: branch 1
    b1 = np.linalg.lstsq(X1 * w[:, None], y * w, rcond=None)[0]
    b2 = None
    for _ in range(iters):
        if b2 is None:
            p1, p2 = X1 @ b1, np.full(len(y), -np.inf)
        else:
            p1, p2 = X1 @ b1, X2 @ b2
        new = p2 > p1
        if b2 is not None and (new == assign).all():
            break
        assign = new
        if (~assign).sum() >= X1.shape[1]:
            b1 = np.linalg.lstsq(X1[~assign] * w[~assign, None], y[~assign] * w[~assign],
                                 rcond=None)[0]
        if assign.sum() >= X2.shape[1]:
            b2 = np.linalg.lstsq(X2[assign] * w[assign, None], y[assign] * w[assign],
                                 rcond=None)[0]
        elif b2 is None:
            # seed branch 2 from the points where branch 1 under-predicts most
            worst = np.argsort((y - p1) / y)[-max(X2.shape[1], 3):]
            b2 = np.linalg.lstsq(X2[worst] * w[worst, None], y[worst] * w[worst], rcond=None)[0]
    return b1, b2


@dataclass(frozen=True)
class Formulas:
    lookup_r: tuple      # c0, c1, a_r   (read-bound branch)
    lookup_w: tuple      # c0, c1, a_w, -K (write-bound branch)
    update_w: tuple      # c0, c1, a_w, a_g
    update_t: tuple      # c0, c1, a_t
    commit_c: tuple      # c0, c1
    snapshot_c: tuple    # c0, c1, a, b

    def lookup(self, *, n_bags, lookups, dim, distinct, latency) -> float:
        R, little, W = features(n_bags, lookups, dim, distinct, latency)
        r = np.dot(self.lookup_r, [1, latency, R * little])
        w = np.dot(self.lookup_w, [1, latency, W])
        return float(max(r, w))

    def update(self, *, n_bags, lookups, dim, distinct, latency) -> float:
        lines = dim / 16
        a = np.dot(self.update_w, [1, latency, lookups * lines, n_bags * lines])
        t = np.dot(self.update_t, [1, latency, distinct * 2 * latency / UPD_ROWS])
        return float(max(a, t))

    def commit(self, *, latency) -> float:
        return float(np.dot(self.commit_c, [1, latency]))

    def snapshot(self, *, nbytes, latency) -> float:
        S = math.ceil(nbytes / 64)
        c0, c1, a, b = self.snapshot_c
        return float(c0 + c1 * latency + max(S, a * S + b * S * latency / SNAP_DEPTH))

    def predict(self, point: dict) -> dict:
        """Predicted cycles of one measured point's four commands."""
        kw = dict(n_bags=point["n_bags"], lookups=point["lookups"], dim=point["dim"],
                  distinct=point["distinct_rows"], latency=point["latency"])
        return {"lookup": self.lookup(**kw), "update": self.update(**kw),
                "commit": self.commit(latency=point["latency"]),
                "snapshot": self.snapshot(nbytes=point["snap_bytes"],
                                          latency=point["latency"])}

    def as_dict(self) -> dict:
        return {k: [float(x) for x in getattr(self, k)] for k in self.__dataclass_fields__}


def measured(point: dict) -> dict:
    m = point["measured"]
    return {"lookup": m["lookup"], "update": m["update"],
            "commit": m["commit_cycles"] + m["descriptor_overhead"],
            "snapshot": m["snapshot"]}


def load_data(path=None) -> dict:
    """The recorded RTL measurements (default: the committed ``data/rtl_cycles.json``)."""
    return json.loads(pathlib.Path(path or DATA_FILE).read_text())


def fit(points) -> Formulas:
    """Least-squares fit (relative error) of every formula to ``points`` (measured dicts)."""
    if len(points) < 6:
        raise ValueError(f"need at least 6 fit points, got {len(points)}")
    y = {c: np.array([measured(p)[c] for p in points], dtype=float) for c in COMMANDS}
    L = np.array([p["latency"] for p in points], dtype=float)
    one = np.ones(len(points))
    F = [features(p["n_bags"], p["lookups"], p["dim"], p["distinct_rows"], p["latency"])
         for p in points]
    R = np.array([f[0] * f[1] for f in F])
    W = np.array([f[2] for f in F])
    lk_r, lk_w = _max2(np.c_[one, L, R], np.c_[one, L, W], y["lookup"])
    lines = np.array([p["dim"] / 16 for p in points])
    n = np.array([p["lookups"] for p in points], dtype=float)
    B = np.array([p["n_bags"] for p in points], dtype=float)
    U = np.array([p["distinct_rows"] for p in points], dtype=float)
    up_w, up_t = _max2(np.c_[one, L, n * lines, B * lines], np.c_[one, L, U * 2 * L / UPD_ROWS],
                       y["update"])
    if up_t is None:
        up_t = np.array([0.0, 0.0, 0.0])
    if lk_w is None:
        lk_w = np.array([0.0, 0.0, 0.0])
    w = 1 / y["commit"]
    cm = np.linalg.lstsq(np.c_[one, L] * w[:, None], y["commit"] * w, rcond=None)[0]
    S = np.array([math.ceil(p["snap_bytes"] / 64) for p in points], dtype=float)
    # latency-bound points (the Little's-law rate below one line per cycle) fix the form;
    # the port bound (one line per cycle) has no free coefficient
    lb = (L + 8) / SNAP_DEPTH > 1.0
    if lb.sum() < 4:
        raise ValueError("need at least 4 fit points with media latency above 24 cycles")
    w = 1 / y["snapshot"][lb]
    X = np.c_[one, L, S, S * L / SNAP_DEPTH][lb]
    sn = np.linalg.lstsq(X * w[:, None], y["snapshot"][lb] * w, rcond=None)[0]
    return Formulas(tuple(lk_r), tuple(lk_w), tuple(up_w), tuple(up_t), tuple(cm), tuple(sn))


def _points(doc, role):
    return [p for p in doc["points"] if p["role"] == role]


@lru_cache(maxsize=1)
def default_formulas() -> Formulas:
    """The formulas fitted to the committed measurements' ``fit`` points."""
    return fit(_points(load_data(), "fit"))


def validate(doc=None, formulas: Formulas | None = None, role="held_out") -> list[dict]:
    """Predicted vs measured cycles on the points of ``role`` (default: held out)."""
    doc = load_data() if doc is None else doc
    f = formulas or fit(_points(doc, "fit"))
    rows = []
    for p in _points(doc, role):
        pred, meas = f.predict(p), measured(p)
        for c in COMMANDS:
            rows.append({"point": p["point"], "command": c, "latency": p["latency"],
                         "dim": p["dim"], "n_bags": p["n_bags"], "pooling": p["pooling"],
                         "distinct": p["distinct_rows"], "snap_bytes": p["snap_bytes"],
                         "measured": meas[c], "predicted": pred[c],
                         "error": pred[c] / meas[c] - 1})
    return rows
