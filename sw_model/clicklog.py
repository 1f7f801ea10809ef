"""Click logs for DLRM training: a seeded synthetic generator, an npz format, a Criteo TSV converter
and a batch iterator (pure numpy). Format and semantics: docs/dlrm.md.

A click log is a :class:`ClickData`: ``dense`` float32 (N, n_dense), per table ``t`` a bag list in
torch ``EmbeddingBag`` form (``offsets[t]`` int64 (N+1,), ``offsets[t][0] = 0``, non-decreasing,
``offsets[t][N] = len(indices[t])``; ``indices[t]`` int64 in ``[0, table_rows[t])``), ``labels``
float32 (N,) in {0, 1} and ``table_rows`` int64 (T,). Sample ``i``'s bag of table ``t`` is
``indices[t][offsets[t][i]:offsets[t][i+1]]`` (possibly empty).

Synthetic data (:class:`ClickLogGenerator`): batch ``b`` of a split depends only on
``(seed, split, b, batch_size)``, so any batch can be regenerated after a crash. Labels come from a
hidden teacher (random per-row scores and vectors, a linear dense term and a dense x embedding
interaction), so there is learnable signal.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from .workload import zipf_indices

NPZ_VERSION = 1
CRITEO_DENSE = 13
CRITEO_CAT = 26
_U64 = (1 << 64) - 1


class ClickLogFormatError(ValueError):
    """A click log (in memory, npz file or TSV line) violates the documented format."""


# ---- the container -------------------------------------------------------------------------------

@dataclass
class ClickData:
    """N samples: ``dense`` (N, n_dense) float32, ``offsets``/``indices`` (lists of T int64
    arrays, EmbeddingBag form), ``labels`` (N,) float32, ``table_rows`` (T,) int64.
    ``validate()`` checks everything; constructors in this module always return valid data."""
    dense: np.ndarray
    offsets: list
    indices: list
    labels: np.ndarray
    table_rows: np.ndarray

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_tables(self) -> int:
        return len(self.offsets)

    @property
    def bags(self) -> list:
        """``[(offsets_t, indices_t)]`` per table (the form the embedding devices take)."""
        return list(zip(self.offsets, self.indices))

    def __len__(self):
        return self.n

    def validate(self, where: str = "click log") -> "ClickData":
        """Raise :class:`ClickLogFormatError` naming the first violation; returns self."""
        def bad(msg):
            raise ClickLogFormatError(f"{where}: {msg}")
        tr = np.asarray(self.table_rows)
        if tr.ndim != 1 or tr.dtype.kind not in "iu":
            bad(f"table_rows must be a 1-D integer array, got {tr.dtype} {tr.shape}")
        if tr.size and int(tr.min()) < 1:
            bad(f"table_rows must be >= 1, got {tr.tolist()}")
        T = tr.shape[0]
        if len(self.offsets) != T or len(self.indices) != T:
            bad(f"{T} tables in table_rows but {len(self.offsets)} offsets and "
                f"{len(self.indices)} indices arrays")
        lab = self.labels
        if not isinstance(lab, np.ndarray) or lab.dtype != np.float32 or lab.ndim != 1:
            bad(f"labels must be float32 (N,), got {getattr(lab, 'dtype', type(lab))} "
                f"{getattr(lab, 'shape', '')}")
        n = lab.shape[0]
        if not np.all((lab == 0) | (lab == 1)):
            i = int(np.flatnonzero(~((lab == 0) | (lab == 1)))[0])
            bad(f"labels must be 0 or 1, labels[{i}] = {float(lab[i])}")
        d = self.dense
        if not isinstance(d, np.ndarray) or d.dtype != np.float32 or d.ndim != 2:
            bad(f"dense must be float32 (N, n_dense), got {getattr(d, 'dtype', type(d))} "
                f"{getattr(d, 'shape', '')}")
        if d.shape[0] != n:
            bad(f"dense has {d.shape[0]} rows but labels has {n}")
        if not np.all(np.isfinite(d)):
            i, j = (int(v) for v in np.argwhere(~np.isfinite(d))[0])
            bad(f"dense[{i}, {j}] = {float(d[i, j])} is not finite (NaN/inf)")
        for t in range(T):
            o, x = np.asarray(self.offsets[t]), np.asarray(self.indices[t])
            if o.dtype.kind not in "iu" or x.dtype.kind not in "iu":
                bad(f"table {t}: offsets/indices must be integer arrays, got {o.dtype}/{x.dtype}")
            if o.shape != (n + 1,):
                bad(f"table {t}: offsets must have shape ({n + 1},), got {o.shape}")
            if x.ndim != 1:
                bad(f"table {t}: indices must be 1-D, got shape {x.shape}")
            if o[0] != 0:
                bad(f"table {t}: offsets[0] = {int(o[0])}, must be 0")
            dif = np.diff(o.astype(np.int64))
            if np.any(dif < 0):
                i = int(np.flatnonzero(dif < 0)[0])
                bad(f"table {t}: offsets decrease at sample {i}: {int(o[i])} -> {int(o[i + 1])}")
            if int(o[-1]) != x.shape[0]:
                bad(f"table {t}: offsets[-1] = {int(o[-1])} but there are {x.shape[0]} indices")
            if x.size:
                lo, hi = int(x.min()), int(x.max())
                if lo < 0 or hi >= int(tr[t]):
                    v = lo if lo < 0 else hi
                    j = int(np.flatnonzero(x == v)[0])
                    bad(f"table {t}: indices[{j}] = {v} outside [0, {int(tr[t])})")
        return self

    def slice(self, lo: int, hi: int) -> "ClickData":
        """Samples ``lo .. hi-1`` (offsets rebased to 0)."""
        offs, idxs = [], []
        for o, x in zip(self.offsets, self.indices):
            s, e = int(o[lo]), int(o[hi])
            offs.append(np.asarray(o[lo:hi + 1], dtype=np.int64) - s)
            idxs.append(np.asarray(x[s:e], dtype=np.int64))
        return ClickData(self.dense[lo:hi], offs, idxs, self.labels[lo:hi],
                         np.asarray(self.table_rows, dtype=np.int64))

    @staticmethod
    def concat(parts: Sequence["ClickData"]) -> "ClickData":
        """Samples of ``parts`` in order (they must share ``table_rows`` and ``n_dense``)."""
        if not parts:
            raise ValueError("ClickData.concat: nothing to concatenate")
        tr = np.asarray(parts[0].table_rows, dtype=np.int64)
        for p in parts[1:]:
            if not np.array_equal(np.asarray(p.table_rows), tr):
                raise ValueError("ClickData.concat: table_rows differ")
        offs, idxs = [], []
        for t in range(len(tr)):
            base, os_ = 0, [np.zeros(1, dtype=np.int64)]
            for p in parts:
                o = np.asarray(p.offsets[t], dtype=np.int64)
                os_.append(o[1:] + base)
                base += int(o[-1])
            offs.append(np.concatenate(os_))
            idxs.append(np.concatenate([np.asarray(p.indices[t], dtype=np.int64) for p in parts]))
        return ClickData(np.concatenate([p.dense for p in parts]), offs, idxs,
                         np.concatenate([p.labels for p in parts]), tr)


def iter_batches(data: ClickData, batch_size: int, *, drop_last: bool = False
                 ) -> Iterator[ClickData]:
    """Consecutive batches of ``batch_size`` samples (the last one shorter unless ``drop_last``)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for lo in range(0, data.n, batch_size):
        hi = min(lo + batch_size, data.n)
        if hi - lo < batch_size and drop_last:
            return
        yield data.slice(lo, hi)


# ---- npz format ----------------------------------------------------------------------------------

def save_npz(path, data: ClickData):
    """Write ``data`` (validated first) as an uncompressed npz: ``version`` (int64 scalar = 1),
    ``dense`` float32 (N, n_dense), ``labels`` float32 (N,), ``table_rows`` int64 (T,), and per
    table ``offsets_<t>`` int64 (N+1,), ``indices_<t>`` int64 (nnz,)."""
    data.validate(f"save_npz({path})")
    arrays = dict(version=np.int64(NPZ_VERSION), dense=data.dense, labels=data.labels,
                  table_rows=np.asarray(data.table_rows, dtype=np.int64))
    for t in range(data.n_tables):
        arrays[f"offsets_{t}"] = np.asarray(data.offsets[t], dtype=np.int64)
        arrays[f"indices_{t}"] = np.asarray(data.indices[t], dtype=np.int64)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load_npz(path) -> ClickData:
    """Read and validate an npz click log. Offsets/indices may be any integer dtype (uint32 and
    int64 are the usual ones; values are range checked, then held as int64); ``dense`` and
    ``labels`` must be float32 (no silent conversion). Missing or unexpected keys, a wrong
    ``version``, bad offsets, an index >= its table's rows, a non-finite dense value or a label
    other than 0/1 raise :class:`ClickLogFormatError`."""
    where = f"{path}"
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        for k in ("version", "dense", "labels", "table_rows"):
            if k not in keys:
                raise ClickLogFormatError(f"{where}: missing key {k!r} (has {sorted(keys)})")
        version = z["version"]
        if version.shape != () or int(version) != NPZ_VERSION:
            raise ClickLogFormatError(f"{where}: version {version!r}, expected {NPZ_VERSION}")
        tr = z["table_rows"]
        if tr.ndim != 1 or tr.dtype.kind not in "iu":
            raise ClickLogFormatError(f"{where}: table_rows must be a 1-D integer array")
        T = tr.shape[0]
        expected = {"version", "dense", "labels", "table_rows"}
        expected |= {f"offsets_{t}" for t in range(T)} | {f"indices_{t}" for t in range(T)}
        missing, extra = sorted(expected - keys), sorted(keys - expected)
        if missing:
            raise ClickLogFormatError(f"{where}: missing keys {missing} for {T} tables")
        if extra:
            raise ClickLogFormatError(f"{where}: unexpected keys {extra} ({T} tables)")
        offs = [z[f"offsets_{t}"] for t in range(T)]
        idxs = [z[f"indices_{t}"] for t in range(T)]
        data = ClickData(z["dense"], offs, idxs, z["labels"], tr)
    data.validate(where)
    data.offsets = [np.asarray(o, dtype=np.int64) for o in data.offsets]
    data.indices = [np.asarray(x, dtype=np.int64) for x in data.indices]
    data.table_rows = np.asarray(data.table_rows, dtype=np.int64)
    return data


# ---- Criteo TSV converter ------------------------------------------------------------------------

def _mix64(x: int) -> int:
    """splitmix64 finaliser (a fixed, platform-independent 64-bit hash)."""
    x &= _U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _U64
    return x ^ (x >> 31)


def criteo_hash(value: int, column: int, rows: int, salt: int = 0) -> int:
    """Row of categorical ``value`` (the parsed hex) of Criteo column ``column`` (0..25) in a
    table of ``rows`` rows: ``mix64(mix64(value) ^ mix64((column + 1) * 2^32 + salt)) % rows``."""
    return _mix64(_mix64(value) ^ _mix64(((column + 1) << 32) + salt)) % rows


def criteo_lines_to_clicklog(lines: Iterable[str], table_rows: Sequence[int], *,
                             column_table: Sequence[int] | None = None, salt: int = 0,
                             source: str = "<lines>") -> ClickData:
    """Convert Criteo-style TSV lines (``label \\t I1..I13 \\t C1..C26``, 40 fields) to a click log.

    - ``label``: "0" or "1".
    - dense ``I1..I13``: decimal integers, empty = 0; transformed ``log(1 + max(x, 0))`` (float32).
    - categorical ``C1..C26``: hex strings, empty = missing (contributes no index). Column ``c``
      goes to table ``column_table[c]`` (default ``c % T``, T = len(table_rows), so several
      columns share a table and its bags are multi-hot, up to ceil(26/T) rows); its row is
      ``criteo_hash(int(hex, 16), c, table_rows[t], salt)``. ``column_table[c] = -1`` drops
      column ``c`` (explicitly; nothing is dropped otherwise).
    - A line with a wrong field count, a bad number or a bad label raises
      :class:`ClickLogFormatError` naming ``source`` and the line number (1-based). Blank lines
      are errors too (nothing is skipped silently). A trailing ``\\n``/``\\r\\n`` is stripped.
    """
    rows = [int(r) for r in table_rows]
    T = len(rows)
    if T < 1 or min(rows) < 1:
        raise ValueError(f"table_rows must be non-empty and >= 1, got {rows}")
    ct = [c % T for c in range(CRITEO_CAT)] if column_table is None else [int(v) for v in
                                                                          column_table]
    if len(ct) != CRITEO_CAT or any(not (v == -1 or 0 <= v < T) for v in ct):
        raise ValueError(f"column_table must have {CRITEO_CAT} entries in -1..{T - 1}, got {ct}")
    dense, labels = [], []
    bag_idx = [[] for _ in range(T)]
    bag_len = [[] for _ in range(T)]
    n_fields = 1 + CRITEO_DENSE + CRITEO_CAT
    for ln, line in enumerate(lines, 1):
        f = line.rstrip("\r\n").split("\t")
        if len(f) != n_fields:
            raise ClickLogFormatError(f"{source}:{ln}: expected {n_fields} tab-separated fields, "
                                      f"got {len(f)}")
        if f[0] not in ("0", "1"):
            raise ClickLogFormatError(f"{source}:{ln}: label must be 0 or 1, got {f[0]!r}")
        labels.append(float(f[0]))
        row = []
        for j in range(CRITEO_DENSE):
            s = f[1 + j]
            try:
                v = int(s) if s else 0
            except ValueError:
                raise ClickLogFormatError(f"{source}:{ln}: dense I{j + 1} = {s!r} is not an "
                                          f"integer") from None
            row.append(np.log1p(max(v, 0)))
        dense.append(row)
        lens = [0] * T
        for c in range(CRITEO_CAT):
            s = f[1 + CRITEO_DENSE + c]
            t = ct[c]
            if not s or t < 0:
                continue
            try:
                v = int(s, 16)
            except ValueError:
                raise ClickLogFormatError(f"{source}:{ln}: categorical C{c + 1} = {s!r} is not "
                                          f"hex") from None
            if v < 0:
                raise ClickLogFormatError(f"{source}:{ln}: categorical C{c + 1} = {s!r} negative")
            bag_idx[t].append(criteo_hash(v, c, rows[t], salt))
            lens[t] += 1
        for t in range(T):
            bag_len[t].append(lens[t])
    n = len(labels)
    offs = [np.concatenate(([0], np.cumsum(np.asarray(bl, dtype=np.int64)))).astype(np.int64)
            for bl in bag_len]
    data = ClickData(np.asarray(dense, dtype=np.float32).reshape(n, CRITEO_DENSE),
                     offs, [np.asarray(x, dtype=np.int64) for x in bag_idx],
                     np.asarray(labels, dtype=np.float32), np.asarray(rows, dtype=np.int64))
    return data.validate(source)


def convert_criteo_tsv(src, dst, table_rows: Sequence[int], **kw) -> ClickData:
    """Convert the TSV file ``src`` to the npz file ``dst`` (see criteo_lines_to_clicklog)."""
    with open(src, "r", encoding="ascii", newline="") as f:
        data = criteo_lines_to_clicklog(f, table_rows, source=str(src), **kw)
    save_npz(dst, data)
    return data


# ---- synthetic generator -------------------------------------------------------------------------

@dataclass(frozen=True)
class ClickLogConfig:
    """Synthetic click log. ``alphas[t]``: Zipf skew of table ``t`` (P(rank k) ~ (k+1)^-alpha,
    ranks mapped to rows by a fixed seeded permutation); bag sizes uniform in
    ``pooling = (lo, hi)`` (inclusive; lo may be 0). Teacher: logit = ``bias`` +
    ``w_dense`` * (z . w) / |w| + ``w_emb`` * sum_t mean_bag(s_t) / sqrt(T) + ``w_cross`` *
    sum_t (z P) . mean_bag(u_t) / sqrt(T * teacher_dim), with z ~ N(0, I) the latent dense
    vector (dense feature j = log1p(exp(mu_j + z_j))), s_t ~ N(0, 1) per row, u_t ~ N(0, I)
    (rows, teacher_dim). Label ~ Bernoulli(sigmoid(logit))."""
    n_dense: int = 13
    table_rows: tuple = (1000, 2000, 3000, 5000)
    alphas: tuple = (1.05, 1.1, 0.9, 1.2)
    pooling: tuple = (1, 4)
    seed: int = 0
    teacher_dim: int = 8
    bias: float = -0.5
    w_dense: float = 1.5
    w_emb: float = 2.0
    w_cross: float = 1.0

    def __post_init__(self):
        if len(self.alphas) != len(self.table_rows):
            raise ValueError(f"{len(self.alphas)} alphas for {len(self.table_rows)} tables")
        lo, hi = self.pooling
        if not 0 <= lo <= hi:
            raise ValueError(f"pooling must be (lo, hi) with 0 <= lo <= hi, got {self.pooling}")
        if self.n_dense < 1 or not self.table_rows or min(self.table_rows) < 1:
            raise ValueError("n_dense >= 1 and at least one table of >= 1 rows required")


_SPLITS = {"train": 1, "eval": 2}
SPLITS = tuple(sorted(_SPLITS))          # the split names a generator accepts


@dataclass
class _Teacher:
    mu: np.ndarray
    w: np.ndarray
    proj: np.ndarray
    perm: list = field(default_factory=list)
    score: list = field(default_factory=list)
    vec: list = field(default_factory=list)


class ClickLogGenerator:
    """Seeded synthetic click log; ``batch(b, batch_size, split)`` is a pure function of
    ``(cfg.seed, split, b, batch_size)`` (numpy SeedSequence spawn keys, so splits and batches
    never share a stream)."""

    def __init__(self, cfg: ClickLogConfig = ClickLogConfig()):
        self.cfg = cfg
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(0,)))
        D, K = cfg.n_dense, cfg.teacher_dim
        th = _Teacher(mu=rng.normal(0.5, 1.0, D), w=rng.standard_normal(D),
                      proj=rng.standard_normal((D, K)) / np.sqrt(D))
        for rows in cfg.table_rows:
            th.perm.append(rng.permutation(rows))
            th.score.append(rng.standard_normal(rows))
            th.vec.append(rng.standard_normal((rows, K)))
        self.teacher = th

    def _rng(self, split: str, b: int) -> np.random.Generator:
        if split not in _SPLITS:
            raise ValueError(f"split must be one of {sorted(_SPLITS)}, got {split!r}")
        if b < 0:
            raise ValueError(f"batch index must be >= 0, got {b}")
        return np.random.default_rng(np.random.SeedSequence(self.cfg.seed,
                                                            spawn_key=(_SPLITS[split], b)))

    def _make(self, b: int, batch_size: int, split: str):
        cfg, th = self.cfg, self.teacher
        rng = self._rng(split, int(b))
        n, T = int(batch_size), len(cfg.table_rows)
        z = rng.standard_normal((n, cfg.n_dense))
        dense = np.log1p(np.exp(th.mu + z)).astype(np.float32)
        logit = cfg.bias + cfg.w_dense * (z @ th.w) / np.linalg.norm(th.w)
        zp = z @ th.proj
        offs, idxs = [], []
        lo, hi = cfg.pooling
        for t, rows in enumerate(cfg.table_rows):
            lens = rng.integers(lo, hi + 1, size=n)
            o = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
            ranks = zipf_indices(rng, int(o[-1]), rows, cfg.alphas[t]).astype(np.int64)
            x = th.perm[t][ranks].astype(np.int64)
            seg = np.repeat(np.arange(n), lens)
            cnt = np.maximum(lens, 1)
            s_mean = np.bincount(seg, th.score[t][x], minlength=n) / cnt
            u_mean = np.zeros((n, cfg.teacher_dim))
            np.add.at(u_mean, seg, th.vec[t][x])
            u_mean /= cnt[:, None]
            logit += cfg.w_emb * s_mean / np.sqrt(T)
            logit += cfg.w_cross * np.sum(zp * u_mean, axis=1) / np.sqrt(T * cfg.teacher_dim)
            offs.append(o)
            idxs.append(x)
        p = 1.0 / (1.0 + np.exp(-logit))
        labels = (rng.random(n) < p).astype(np.float32)
        data = ClickData(dense, offs, idxs, labels, np.asarray(cfg.table_rows, dtype=np.int64))
        return data, logit

    def batch(self, b: int, batch_size: int, split: str = "train") -> ClickData:
        """Batch ``b`` (>= 0) of ``batch_size`` samples of ``split`` ("train" or "eval")."""
        return self._make(b, batch_size, split)[0]

    def teacher_logits(self, b: int, batch_size: int, split: str = "train") -> np.ndarray:
        """The teacher's logits (float64) for the samples of ``batch(b, batch_size, split)``
        (their AUC is the best any model can expect)."""
        return self._make(b, batch_size, split)[1]

    def iter_batches(self, n_batches: int, batch_size: int, *, start: int = 1,
                     split: str = "train") -> Iterator[tuple[int, ClickData]]:
        """``(b, batch)`` for ``b = start .. start + n_batches - 1``."""
        for b in range(start, start + n_batches):
            yield b, self.batch(b, batch_size, split)

    def generate(self, n_batches: int, batch_size: int, *, start: int = 1,
                 split: str = "train") -> ClickData:
        """Batches ``start ..`` concatenated (e.g. to save as npz)."""
        return ClickData.concat([d for _, d in self.iter_batches(n_batches, batch_size,
                                                                 start=start, split=split)])
