"""Studies on top of the step model: sensitivity, crossover, scaling, what the headline needs.

Pure functions returning plain data; :mod:`trainingcxl.system.report` draws and writes them.
"""
from __future__ import annotations

import math

from trainingcxl.system import model
from trainingcxl.system.params import PARAMS, Params
from trainingcxl.system.workload import Workload

__all__ = ["tornado", "crossover", "scaling_devices", "scaling_batch", "scaling_rows",
           "needed_for", "PAPER_SPEEDUP", "PAPER_ENERGY_SAVING"]

PAPER_SPEEDUP = 5.2          # Kwon et al., IEEE Micro 43(2) 2023, arXiv:2301.07492, abstract
PAPER_ENERGY_SAVING = 0.76
REFERENCE = "pmem-log"       # the paper's baseline class


def speedup(w: Workload, p: Params, baseline=REFERENCE, formulas=None) -> float:
    b = model.step(w, baseline, p, formulas=formulas).total_time
    return b / model.step(w, "trainingcxl", p, formulas=formulas).total_time


def tornado(w: Workload, p: Params, baseline=REFERENCE, formulas=None, span=0.5):
    """Speedup against ``baseline`` with each sourced/assumed parameter at (1 -/+ span) x its
    value, sorted by the width of the swing."""
    base = speedup(w, p, baseline, formulas)
    rows = []
    for name, par in PARAMS.items():
        if not par.sensitivity:
            continue
        lo = speedup(w, p.scaled(name, 1 - span), baseline, formulas)
        hi = speedup(w, p.scaled(name, 1 + span), baseline, formulas)
        rows.append({"param": name, "kind": par.kind, "low": lo, "high": hi,
                     "swing": abs(hi - lo)})
    rows.sort(key=lambda r: -r["swing"])
    return base, rows


def crossover(w: Workload, p: Params, axis: str, values, formulas=None) -> list[dict]:
    """Near-data against host gather over the same CXL link, one table group's parameter
    ``axis`` (pooling, dim or batch) swept: link bytes of the embeddings (LOOKUP + UPDATE) and
    step time of ``trainingcxl`` against ``cxl-host`` and ``pmem-log``."""
    out = []
    for v in values:
        wv = w.with_(**{axis: v})
        near = sum(model.link_bytes_table(t, wv.batch, near_data=True) for t in wv.tables)
        host = sum(model.link_bytes_table(t, wv.batch, near_data=False) for t in wv.tables)
        tc = model.step(wv, "trainingcxl", p, formulas=formulas).total_time
        ch = model.step(wv, "cxl-host", p, formulas=formulas).total_time
        pl = model.step(wv, "pmem-log", p, formulas=formulas).total_time
        out.append({axis: v, "near_bytes": near, "host_bytes": host,
                    "bytes_ratio": host / near, "t_trainingcxl": tc, "t_cxl_host": ch,
                    "t_pmem_log": pl, "speedup_vs_cxl_host": ch / tc,
                    "speedup_vs_pmem_log": pl / tc})
    return out


def first_win(rows, axis, key, threshold=1.0):
    """Smallest swept value from which ``key`` stays above ``threshold`` (None if never)."""
    for i, r in enumerate(rows):
        if all(x[key] > threshold for x in rows[i:]):
            return r[axis]
    return None


def scaling_devices(w: Workload, p: Params, counts=(1, 2, 4, 8), formulas=None):
    base = model.step(w, REFERENCE, p, formulas=formulas).total_time
    out = []
    for n in counts:
        r = model.step(w, "trainingcxl", p, formulas=formulas, devices=n)
        out.append({"devices": n, "time": r.total_time, "speedup": base / r.total_time,
                    "lookup": r.time["lookup"], "update": r.time["update"],
                    "link_bytes": r.link_bytes, "energy": r.total_energy})
    return out


def scaling_batch(w: Workload, p: Params, batches=(1024, 2048, 4096, 8192, 16384),
                  formulas=None):
    out = []
    for b in batches:
        wb = w.with_(batch=b)
        c = model.compare(wb, p, formulas=formulas)
        out.append({"batch": b, "speedup": c["speedup"][REFERENCE],
                    "energy_saving": c["energy_saving"][REFERENCE],
                    "time_per_sample_us": c["results"]["trainingcxl"].total_time / b * 1e6})
    return out


def scaling_rows(w: Workload, p: Params, rows=(10**7, 10**8, 10**9, 10**10), formulas=None):
    """Tables growing past one device: each table's rows set to ``rows``; as many devices as
    the largest table needs shards (at least 1), tables sharded by rows over them."""
    cap = p["pmem_dimms"] * p["pmem_dimm_bytes"]
    out = []
    for n in rows:
        wr = w.with_(rows=n)
        need = max(1, math.ceil(wr.table_bytes / cap))
        r = model.step(wr, "trainingcxl", p, formulas=formulas, devices=need)
        b = model.step(wr, REFERENCE, p, formulas=formulas)
        out.append({"rows": n, "table_bytes": wr.table_bytes, "devices": need,
                    "time": r.total_time, "speedup": b.total_time / r.total_time,
                    "link_bytes": r.link_bytes,
                    "host_pmem_fits": wr.table_bytes <= cap})
    return out


def needed_for(w: Workload, p: Params, name: str, target=PAPER_SPEEDUP, formulas=None):
    """The factor on parameter ``name`` (1e-3..1e3, bisection in log space) at which the
    speedup against the paper's baseline class reaches ``target``; None if it does not
    within that range."""
    def f(x):
        return speedup(w, p.scaled(name, x), REFERENCE, formulas) - target
    lo, hi = 1e-3, 1e3
    flo, fhi = f(lo), f(hi)
    if flo * fhi > 0:
        return None
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return math.sqrt(lo * hi)
