"""A training workload: embedding tables, batch, MLP sizes; read from TOML or JSON.

Description (TOML shown; JSON has the same keys)::

    name = "criteo-tb"
    batch = 4096                     # samples per training step
    lag = 4                          # MLP snapshot lag bound k (TrainingCXL), >= 1
    mlp_bottom = [13, 512, 256, 128] # dense features first; last = interaction width
    mlp_top = [1024, 1024, 512, 256, 1]

    [[tables]]                       # a group of identical tables
    count = 26
    rows = 40_000_000
    dim = 128                        # 16, 32, 64 or 128 (the device's row formats)
    pooling = 1                      # lookups per sample (mean bag length)
    dist = "zipf"                    # "uniform" or "zipf"
    alpha = 1.05                     # zipf only

Every bad field raises :class:`WorkloadError` naming it (``tables[1].dim``) and the bad value.
"""
from __future__ import annotations

import json
import math
import pathlib
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

__all__ = ["WorkloadError", "Table", "Workload", "load", "from_dict", "expected_distinct",
           "BUILTIN", "builtin"]

DIMS = (16, 32, 64, 128)
DISTS = ("uniform", "zipf")


class WorkloadError(ValueError):
    """A workload description is invalid; the message names the field and the value."""


@dataclass(frozen=True)
class Table:
    rows: int
    dim: int
    pooling: float
    dist: str = "uniform"
    alpha: float = 1.05

    @property
    def row_bytes(self) -> int:
        return self.dim * 4

    def lookups(self, batch: int) -> int:
        return max(1, round(batch * self.pooling))

    def distinct(self, batch: int) -> float:
        return expected_distinct(self.lookups(batch), self.rows, self.dist, self.alpha)


@dataclass(frozen=True)
class Workload:
    name: str
    batch: int
    tables: tuple[Table, ...]
    mlp_bottom: tuple[int, ...]
    mlp_top: tuple[int, ...]
    lag: int = 4
    notes: str = field(default="", compare=False)

    @property
    def interaction_width(self) -> int:
        """Input width of the top MLP: DLRM's dot interaction (pairs of the bottom output and
        the pooled tables) when every dim equals the bottom MLP's output, else concatenation."""
        d = self.mlp_bottom[-1]
        t = len(self.tables)
        if all(tb.dim == d for tb in self.tables):
            return d + (t + 1) * t // 2
        return d + sum(tb.dim for tb in self.tables)

    def mlp_layers(self) -> list[tuple[int, int]]:
        b = list(self.mlp_bottom)
        top = [self.interaction_width] + list(self.mlp_top)
        return list(zip(b[:-1], b[1:])) + list(zip(top[:-1], top[1:]))

    @property
    def mlp_params(self) -> int:
        return sum(i * o + o for i, o in self.mlp_layers())

    @property
    def mlp_flops(self) -> float:
        """Forward + backward FLOPs of one step (backward = 2x forward), MLPs and the dot
        interaction."""
        fwd = sum(2 * i * o for i, o in self.mlp_layers())
        t = len(self.tables) + 1
        fwd += t * t * self.mlp_bottom[-1] if self.interaction_width < t * self.mlp_bottom[-1] \
            else 0
        return 3.0 * fwd * self.batch

    @property
    def table_bytes(self) -> int:
        return sum(t.rows * t.row_bytes for t in self.tables)

    def with_(self, **kw) -> "Workload":
        """A copy with ``batch``/``lag`` changed, or every table's ``pooling``/``dim``/``rows``
        set (``dim`` also sets the bottom MLP's output so the interaction stays a dot)."""
        tkeys = {k: kw.pop(k) for k in ("pooling", "dim", "rows", "dist") if k in kw}
        tables = tuple(Table(**{**t.__dict__, **tkeys}) for t in self.tables)
        bottom = self.mlp_bottom
        if "dim" in tkeys:
            bottom = self.mlp_bottom[:-1] + (tkeys["dim"],)
        d = dict(name=self.name, batch=self.batch, tables=tables, mlp_bottom=bottom,
                 mlp_top=self.mlp_top, lag=self.lag)
        d.update(kw)
        return from_dict({**d, "tables": [t.__dict__ for t in d["tables"]]})


@lru_cache(maxsize=65536)
def expected_distinct(n: int, rows: int, dist: str = "uniform", alpha: float = 1.05) -> float:
    """Expected number of distinct rows among ``n`` independent draws over ``rows`` rows:
    sum over rows of 1 - (1 - p_i)^n. Zipf ranks beyond 2^16 are grouped into geometric buckets
    of nearly equal probability (relative error well below 1 %)."""
    if n <= 0:
        return 0.0
    if dist == "uniform":
        return float(-rows * math.expm1(n * math.log1p(-1.0 / rows))) if rows > 1 else 1.0
    exact = min(rows, 1 << 16)
    ranks = np.arange(1, exact + 1, dtype=np.float64)
    edges = np.unique(np.geomspace(exact + 1, rows + 1, num=4096).astype(np.int64)) \
        if rows > exact else np.array([], dtype=np.int64)
    # bucket [a, b): count b - a, representative rank at the geometric midpoint
    a, b = edges[:-1].astype(np.float64), edges[1:].astype(np.float64)
    counts = b - a
    mid = np.sqrt(a * np.maximum(b - 1, a))
    w_exact = ranks ** -alpha
    w_tail = counts * mid ** -alpha
    z = w_exact.sum() + w_tail.sum()
    p_exact, p_tail = w_exact / z, mid ** -alpha / z
    hit = -np.expm1(n * np.log1p(-p_exact))
    hit_t = -np.expm1(n * np.log1p(-np.minimum(p_tail, 1 - 1e-15)))
    return float(hit.sum() + (counts * hit_t).sum())


# ------------------------------------------------------------------------------------------
# parsing
# ------------------------------------------------------------------------------------------
_TOP_KEYS = {"name", "batch", "lag", "mlp_bottom", "mlp_top", "tables", "notes"}
_TABLE_KEYS = {"count", "rows", "dim", "pooling", "dist", "alpha"}


def _int(v, where, lo=1, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and
                                                                  not v.is_integer()):
        raise WorkloadError(f"{where} must be an integer, got {v!r}")
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise WorkloadError(f"{where} must be {rng}, got {v!r}")
    return v


def _num(v, where, lo_excl=0.0, hi=None):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise WorkloadError(f"{where} must be a finite number, got {v!r}")
    if v <= lo_excl or (hi is not None and v > hi):
        rng = f"> {lo_excl}" if hi is None else f"in ({lo_excl}, {hi}]"
        raise WorkloadError(f"{where} must be {rng}, got {v!r}")
    return float(v)


def _int_list(v, where):
    if not isinstance(v, (list, tuple)) or len(v) < 2:
        raise WorkloadError(f"{where} must be a list of at least 2 layer widths, got {v!r}")
    return tuple(_int(x, f"{where}[{i}]") for i, x in enumerate(v))


def from_dict(d: dict, source: str = "workload") -> Workload:
    if not isinstance(d, dict):
        raise WorkloadError(f"{source}: a workload must be a table/object, got {type(d).__name__}")
    unknown = sorted(set(d) - _TOP_KEYS)
    if unknown:
        raise WorkloadError(f"{source}: unknown field {unknown[0]!r} (known: "
                            f"{', '.join(sorted(_TOP_KEYS))})")
    for k in ("batch", "tables", "mlp_bottom", "mlp_top"):
        if k not in d:
            raise WorkloadError(f"{source}: missing field {k!r}")
    name = d.get("name", pathlib.Path(source).stem)
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"name must be a non-empty string, got {name!r}")
    batch = _int(d["batch"], "batch", 1, 1 << 24)
    lag = _int(d.get("lag", 4), "lag", 1, 1 << 31)
    bottom = _int_list(d["mlp_bottom"], "mlp_bottom")
    top = _int_list(d["mlp_top"], "mlp_top") if isinstance(d["mlp_top"], (list, tuple)) and \
        len(d["mlp_top"]) >= 2 else None
    if top is None:
        v = d["mlp_top"]
        if isinstance(v, (list, tuple)) and len(v) == 1:
            top = (_int(v[0], "mlp_top[0]"),)
        else:
            raise WorkloadError(f"mlp_top must be a non-empty list of layer widths, got {v!r}")
    groups = d["tables"]
    if not isinstance(groups, (list, tuple)) or not groups:
        raise WorkloadError(f"tables must be a non-empty list of table groups, got {groups!r}")
    tables = []
    for i, g in enumerate(groups):
        w = f"tables[{i}]"
        if not isinstance(g, dict):
            raise WorkloadError(f"{w} must be a table/object, got {g!r}")
        unknown = sorted(set(g) - _TABLE_KEYS)
        if unknown:
            raise WorkloadError(f"{w}: unknown field {unknown[0]!r} (known: "
                                f"{', '.join(sorted(_TABLE_KEYS))})")
        for k in ("rows", "dim", "pooling"):
            if k not in g:
                raise WorkloadError(f"{w}: missing field {k!r}")
        count = _int(g.get("count", 1), f"{w}.count", 1, 4096)
        rows = _int(g["rows"], f"{w}.rows", 1, 1 << 40)
        dim = _int(g["dim"], f"{w}.dim")
        if dim not in DIMS:
            raise WorkloadError(f"{w}.dim must be one of {DIMS} (the device's row formats), "
                                f"got {dim!r}")
        pooling = _num(g["pooling"], f"{w}.pooling", 0.0, 65536)
        dist = g.get("dist", "uniform")
        if dist not in DISTS:
            raise WorkloadError(f"{w}.dist must be one of {DISTS}, got {dist!r}")
        alpha = _num(g.get("alpha", 1.05), f"{w}.alpha", 0.0, 10.0)
        tables += [Table(rows, dim, pooling, dist, alpha)] * count
    if len(tables) > 4096:
        raise WorkloadError(f"tables: at most 4096 tables in all, got {len(tables)}")
    return Workload(name, batch, tuple(tables), bottom, top, lag, str(d.get("notes", "")))


def load(path) -> Workload:
    """A workload from a ``.toml`` or ``.json`` file."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise WorkloadError(f"workload file {str(path)!r} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            d = tomllib.loads(text)
        elif path.suffix == ".json":
            d = json.loads(text)
        else:
            raise WorkloadError(f"workload file {str(path)!r}: the suffix must be .toml or "
                                f".json, got {path.suffix!r}")
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise WorkloadError(f"workload file {str(path)!r} is not valid "
                            f"{path.suffix[1:].upper()}: {e}") from None
    return from_dict(d, source=str(path))


# The comparison's workloads, fixed before any comparison was run. Criteo-Terabyte as in the
# MLPerf DLRM reference (26 tables hashed to at most 4e7 rows, dim 128, one index per table,
# MLPs 13-512-256-128 / 1024-1024-512-256-1); RMC1-3 after the DLRM-RMC classes of DeepRecSys
# (Gupta et al., ISCA 2020: RMC1 few tables with pooling 80 and dim 32, RMC2 many tables with
# pooling 80 and dim 64, RMC3 few tables with pooling 20 and a wide bottom MLP), rows 10^7.
BUILTIN = {
    "criteo-tb": dict(name="criteo-tb", batch=4096, mlp_bottom=[13, 512, 256, 128],
                      mlp_top=[1024, 1024, 512, 256, 1],
                      tables=[dict(count=26, rows=40_000_000, dim=128, pooling=1,
                                   dist="zipf", alpha=1.05)]),
    "rmc1": dict(name="rmc1", batch=4096, mlp_bottom=[256, 128, 32], mlp_top=[256, 64, 1],
                 tables=[dict(count=8, rows=10_000_000, dim=32, pooling=80, dist="zipf",
                              alpha=1.05)]),
    "rmc2": dict(name="rmc2", batch=4096, mlp_bottom=[256, 128, 64], mlp_top=[512, 128, 1],
                 tables=[dict(count=32, rows=10_000_000, dim=64, pooling=80, dist="zipf",
                              alpha=1.05)]),
    "rmc3": dict(name="rmc3", batch=4096, mlp_bottom=[2560, 512, 32], mlp_top=[512, 128, 1],
                 tables=[dict(count=10, rows=10_000_000, dim=32, pooling=20, dist="zipf",
                              alpha=1.05)]),
}


def builtin(name: str) -> Workload:
    if name not in BUILTIN:
        raise WorkloadError(f"unknown built-in workload {name!r} (known: {', '.join(BUILTIN)})")
    return from_dict(BUILTIN[name], source=name)
