"""DLRM in numpy (float32) trained against an embedding device (docs/dlrm.md).

Model: bottom MLP (ReLU after every layer) on the dense features -> x (N, d); sum-pooled
embedding bags e_0..e_{T-1} (N, d) from the device; dot interaction: the pairwise dot products
of the F = T+1 vectors (x, e_0, ..., e_{T-1}) for i < j (upper triangle, row-major), concatenated
after x; top MLP (ReLU between layers, last layer linear, width 1); sigmoid + binary cross
entropy (mean over the batch, evaluated from the logit, numerically stable). Manual backward;
plain SGD on the MLP parameters; the gradients w.r.t. the pooled embeddings go back to the
device as per-bag gradients (the device applies ``row -= lr * grad[bag]`` to every row of the
bag, the exact gradient of sum pooling).

:func:`train` runs the host protocol of docs/training.md section 9, with crash handling.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from hw.config import DEFAULT, DeviceConfig, SUPPORTED_DIMS
from .clicklog import ClickData, ClickLogConfig, ClickLogGenerator, iter_batches
from .embedding_device import (FloatEmbeddings, ModelDevice, PowerFailure, RecoveryInfo,
                               StagingLayout)
from .fixedpoint import to_fixed, to_float


# ---- configuration -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DLRMConfig:
    """Model, data and training options (defaults: a small model for RTL-in-the-loop runs).

    ``emb_dim``: every table's dim (the dot interaction needs one d; the device allows 16, 32,
    64, 128). ``bottom_mlp``: layer widths after the ``n_dense`` inputs, the last = ``emb_dim``.
    ``top_mlp``: widths after the interaction (``emb_dim + F(F-1)/2`` inputs), the last = 1.
    ``lr``: MLP SGD learning rate; ``emb_lr``: the device's (None = ``lr``). ``lag_k``: the MLP
    snapshot lag bound k (MLP_LAG; SNAPSHOT(b) when ``b - last >= max(k, 1)``). ``emb_init``:
    embeddings start uniform in [-emb_init, emb_init]. ``seed``: MLP and embedding init;
    ``data_seed``: the synthetic click log. ``pooling``/``alphas``: bag sizes and Zipf skews.
    """
    n_dense: int = 13
    table_rows: tuple = (1000, 2000, 3000, 5000)
    emb_dim: int = 16
    bottom_mlp: tuple = (32, 16)
    top_mlp: tuple = (32, 1)
    batch_size: int = 32
    pooling: tuple = (1, 4)
    alphas: tuple = (1.05, 1.1, 0.9, 1.2)
    lr: float = 0.1
    emb_lr: float | None = 0.5
    lag_k: int = 4
    emb_init: float = 0.05
    seed: int = 0
    data_seed: int = 0

    def __post_init__(self):
        def need(c, msg):
            if not c:
                raise ValueError(f"DLRMConfig: {msg}")
        need(self.emb_dim in SUPPORTED_DIMS, f"emb_dim must be one of {SUPPORTED_DIMS} (device "
             f"rule), got {self.emb_dim}")
        need(1 <= len(self.table_rows) <= 8, "1..8 tables (device table directory)")
        need(len(self.alphas) == len(self.table_rows), "one alpha per table")
        need(self.bottom_mlp and self.bottom_mlp[-1] == self.emb_dim,
             f"bottom_mlp must end in emb_dim={self.emb_dim}, got {self.bottom_mlp}")
        need(self.top_mlp and self.top_mlp[-1] == 1, f"top_mlp must end in 1, got {self.top_mlp}")
        need(self.batch_size >= 1 and self.n_dense >= 1, "batch_size, n_dense >= 1")
        need(self.lag_k >= 0, "lag_k >= 0")
        need(self.lr > 0 and (self.emb_lr is None or self.emb_lr > 0), "learning rates > 0")

    @property
    def n_tables(self) -> int:
        return len(self.table_rows)

    @property
    def dims(self) -> tuple:
        return (self.emb_dim,) * self.n_tables

    @property
    def n_interactions(self) -> int:
        f = self.n_tables + 1
        return f * (f - 1) // 2

    @property
    def layer_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of every MLP layer: bottom then top."""
        b = [self.n_dense, *self.bottom_mlp]
        t = [self.emb_dim + self.n_interactions, *self.top_mlp]
        return list(zip(b[:-1], b[1:])) + list(zip(t[:-1], t[1:]))

    @property
    def n_params(self) -> int:
        return sum(i * o + o for i, o in self.layer_shapes)

    @property
    def param_bytes(self) -> int:
        return 4 * self.n_params

    def clicklog(self) -> ClickLogConfig:
        return ClickLogConfig(n_dense=self.n_dense, table_rows=tuple(self.table_rows),
                              alphas=tuple(self.alphas), pooling=tuple(self.pooling),
                              seed=self.data_seed)

    def layout(self, dev_cfg: DeviceConfig = DEFAULT, *, ring_size: int = 16) -> StagingLayout:
        """Staging layout for this job: max_bags = batch_size, max indices = batch_size *
        pooling[1] per table, snapshot buffers of ``param_bytes``."""
        return StagingLayout(dev_cfg, self.table_rows, self.dims, self.batch_size,
                             self.batch_size * self.pooling[1], self.param_bytes,
                             ring_size=ring_size)


# ---- initial embeddings and devices --------------------------------------------------------------

def init_tables(cfg: DLRMConfig, frac_bits: int = DEFAULT.frac_bits) -> list[np.ndarray]:
    """Initial tables as int32 fixed point: uniform(-emb_init, emb_init) float32 (seeded by
    ``cfg.seed``) through ``to_fixed``. Every device of a comparison starts from these."""
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(1,)))
    out = []
    for rows in cfg.table_rows:
        f = rng.uniform(-cfg.emb_init, cfg.emb_init, size=(rows, cfg.emb_dim)).astype(np.float32)
        out.append(to_fixed(f, frac_bits)[0])
    return out


def make_model_device(cfg: DLRMConfig, dev_cfg: DeviceConfig = DEFAULT, *, seed: int = 0,
                      ring_size: int = 16) -> ModelDevice:
    """ModelDevice with ``cfg.layout(dev_cfg)``, ``init_tables`` and MLP_LAG = ``lag_k``."""
    return ModelDevice(cfg.layout(dev_cfg, ring_size=ring_size),
                       init_tables(cfg, dev_cfg.frac_bits), mlp_lag=cfg.lag_k, seed=seed)


def make_float_device(cfg: DLRMConfig, frac_bits: int = DEFAULT.frac_bits) -> FloatEmbeddings:
    """FloatEmbeddings starting from the same (fixed-point) initial tables."""
    return FloatEmbeddings([to_float(t, frac_bits).astype(np.float32)
                            for t in init_tables(cfg, frac_bits)], mlp_lag=cfg.lag_k)


# ---- the model -----------------------------------------------------------------------------------

def _sigmoid(z):
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def bce_with_logits(logits, labels) -> float:
    """Mean binary cross entropy from logits: ``max(z,0) - z*y + log1p(exp(-|z|))``."""
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return float(np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z)))))


@dataclass
class _Cache:
    acts: list          # per layer: (input, pre-activation)
    stack: np.ndarray   # (N, F, d)
    n_bottom: int
    logits: np.ndarray


class DLRM:
    """Parameters ``params`` = [W_0, b_0, W_1, b_1, ...] (bottom layers then top; W (in, out),
    C order) in ``dtype`` (float32; float64 for gradient checks)."""

    def __init__(self, cfg: DLRMConfig, *, dtype=np.float32, params: Sequence | None = None):
        self.cfg, self.dtype = cfg, np.dtype(dtype)
        shapes = cfg.layer_shapes
        self.n_bottom = len(cfg.bottom_mlp)
        iu = np.triu_indices(cfg.n_tables + 1, 1)
        self._iu = (iu[0], iu[1])
        if params is not None:
            self.params = [np.array(p, dtype=self.dtype) for p in params]
            return
        rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(0,)))
        self.params = []
        for i, o in shapes:          # DLRM reference init: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out)
            self.params.append((rng.standard_normal((i, o)) * np.sqrt(2.0 / (i + o)))
                               .astype(self.dtype))
            self.params.append((rng.standard_normal(o) * np.sqrt(1.0 / o)).astype(self.dtype))

    def copy(self, dtype=None) -> "DLRM":
        return DLRM(self.cfg, dtype=self.dtype if dtype is None else dtype, params=self.params)

    # -- serialisation -----------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """All parameters as little-endian float32, in ``params`` order, each in C order."""
        return b"".join(np.ascontiguousarray(p, dtype="<f4").tobytes() for p in self.params)

    def load_bytes(self, blob: bytes):
        """Inverse of ``to_bytes`` (ValueError unless exactly ``cfg.param_bytes`` long)."""
        if len(blob) != self.cfg.param_bytes:
            raise ValueError(f"MLP blob of {len(blob)} B, expected {self.cfg.param_bytes}")
        off = 0
        for i, p in enumerate(self.params):
            n = p.size * 4
            self.params[i] = (np.frombuffer(blob, dtype="<f4", count=p.size, offset=off)
                              .reshape(p.shape).astype(self.dtype))
            off += n

    @classmethod
    def from_bytes(cls, cfg: DLRMConfig, blob: bytes, dtype=np.float32) -> "DLRM":
        m = cls(cfg, dtype=dtype)
        m.load_bytes(blob)
        return m

    # -- forward / backward ------------------------------------------------------------------------
    def forward(self, dense, pooled: Sequence[np.ndarray]):
        """``(logits (N,), cache)``; ``pooled``: per table (N, d)."""
        dt = self.dtype
        h = np.asarray(dense, dtype=dt)
        acts = []
        L = len(self.params) // 2
        for i in range(self.n_bottom):
            z = h @ self.params[2 * i] + self.params[2 * i + 1]
            acts.append((h, z))
            h = np.maximum(z, 0)
        if len(pooled) != self.cfg.n_tables:
            raise ValueError(f"{len(pooled)} pooled tables, model has {self.cfg.n_tables}")
        stack = np.stack([h] + [np.asarray(e, dtype=dt) for e in pooled], axis=1)
        inter = np.einsum("nid,njd->nij", stack, stack)[:, self._iu[0], self._iu[1]]
        h = np.concatenate([h, inter], axis=1)
        for i in range(self.n_bottom, L):
            z = h @ self.params[2 * i] + self.params[2 * i + 1]
            acts.append((h, z))
            h = np.maximum(z, 0) if i < L - 1 else z
        logits = h[:, 0]
        return logits, _Cache(acts, stack, self.n_bottom, logits)

    def backward(self, cache: _Cache, labels):
        """``(loss, param_grads, pooled_grads)``: mean BCE, d loss / d params (``params`` order),
        d loss / d pooled (per table (N, d), same dtype)."""
        dt = self.dtype
        y = np.asarray(labels, dtype=dt)
        z = cache.logits
        n = z.shape[0]
        loss = bce_with_logits(z, y)
        g = ((_sigmoid(z) - y) / dt.type(n))[:, None].astype(dt)
        grads = [None] * len(self.params)
        L = len(self.params) // 2
        d = self.cfg.emb_dim
        for i in range(L - 1, -1, -1):
            a, zpre = cache.acts[i]
            if i != L - 1:                              # ReLU after every layer but the last
                g = g * (zpre > 0)
            grads[2 * i] = a.T @ g
            grads[2 * i + 1] = g.sum(axis=0)
            if i == self.n_bottom:                      # into the interaction
                gin = g @ self.params[2 * i].T
                dx = gin[:, :d]
                dz = np.zeros((n, self.cfg.n_tables + 1, self.cfg.n_tables + 1), dtype=dt)
                dz[:, self._iu[0], self._iu[1]] = gin[:, d:]
                dstack = np.einsum("nij,njd->nid", dz + dz.transpose(0, 2, 1), cache.stack)
                g = dx + dstack[:, 0]
                pooled_grads = [dstack[:, 1 + t] for t in range(self.cfg.n_tables)]
            elif i > 0:
                g = g @ self.params[2 * i].T
        return loss, grads, pooled_grads

    def sgd_step(self, grads, lr: float):
        for p, g in zip(self.params, grads):
            p -= self.dtype.type(lr) * g

    def predict(self, dense, pooled) -> np.ndarray:
        """Click probabilities (N,)."""
        return _sigmoid(self.forward(dense, pooled)[0].astype(np.float64))


# ---- metrics -------------------------------------------------------------------------------------

def auc(labels, scores) -> float:
    """Exact ROC AUC (Mann-Whitney U with average ranks for tied scores). ValueError unless
    labels are 0/1 with both classes present and scores are finite."""
    y = np.asarray(labels).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"labels {y.shape} and scores {s.shape} differ")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    pos = y == 1
    n1 = int(pos.sum())
    n0 = y.size - n1
    if n1 == 0 or n0 == 0:
        raise ValueError(f"AUC needs both classes ({n1} positives, {n0} negatives)")
    _, inv, cnt = np.unique(s, return_inverse=True, return_counts=True)
    avg_rank = np.cumsum(cnt) - (cnt - 1) / 2.0       # 1-based average rank of each value
    r = avg_rank[inv.ravel()]
    return float((r[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def log_loss(labels, probs, eps: float = 1e-7) -> float:
    """Mean binary log loss of probabilities (clipped to [eps, 1-eps])."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    p = np.clip(np.asarray(probs, dtype=np.float64).ravel(), eps, 1 - eps)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def pool_float(tables: Sequence[np.ndarray], bags) -> list[np.ndarray]:
    """Sum-pooled bags of float tables (float64 sums rounded to float32)."""
    out = []
    for tab, (o, x) in zip(tables, bags):
        o = np.asarray(o, dtype=np.int64)
        n = len(o) - 1
        acc = np.zeros((n, tab.shape[1]), dtype=np.float64)
        np.add.at(acc, np.repeat(np.arange(n), np.diff(o)), np.asarray(tab, np.float64)[
            np.asarray(x, dtype=np.int64)[:o[-1]]])
        out.append(acc.astype(np.float32))
    return out


def evaluate(model: DLRM, tables: Sequence[np.ndarray], data: ClickData,
             batch_size: int = 1024) -> dict:
    """``{"auc", "logloss", "n"}`` of ``model`` with float ``tables`` (e.g.
    ``device.float_tables()``) on ``data``; pooling in numpy (no device calls)."""
    ps, ys = [], []
    for bt in iter_batches(data, batch_size):
        ps.append(model.predict(bt.dense, pool_float(tables, bt.bags)))
        ys.append(bt.labels)
    p, y = np.concatenate(ps), np.concatenate(ys)
    return dict(auc=auc(y, p), logloss=log_loss(y, p), n=int(y.size))


# ---- training loop -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Crash:
    """One power failure: during ``phase`` ("lookup", "update", "snapshot", "commit") of batch
    ``batch``; recovery reported ``committed`` C and ``mlp_epoch`` m (None: no snapshot, the
    initial parameters were restored). ``redone`` = batch - C (batches whose embedding work is
    repeated, the interrupted one included); ``mlp_lost`` = C - m (committed batches whose MLP
    step was lost and is not redone); ``lost`` = redone + mlp_lost. ``restart_failures``: further
    failures during recovery before it succeeded."""
    batch: int
    phase: str
    committed: int
    mlp_epoch: int | None
    redone: int
    mlp_lost: int
    restart_failures: int = 0

    @property
    def lost(self) -> int:
        return self.redone + self.mlp_lost


@dataclass
class TrainResult:
    """``loss_log``: (batch, loss) of every attempt in execution order (redone batches appear
    again); ``preds[b]`` = (probabilities, labels) of the last attempt of batch b, computed
    before its update (progressive validation); ``crashes``; ``snapshots``: epochs snapshotted
    (every attempt); ``seconds``: wall time."""
    n_batches: int
    loss_log: list = field(default_factory=list)
    preds: dict = field(default_factory=dict)
    crashes: list = field(default_factory=list)
    snapshots: list = field(default_factory=list)
    seconds: float = 0.0

    def losses(self) -> np.ndarray:
        """Loss of the last attempt of each batch 1..n_batches (NaN if never run)."""
        out = np.full(self.n_batches, np.nan)
        for b, loss in self.loss_log:
            out[b - 1] = loss
        return out

    def progressive_auc(self, first: int = 1, last: int | None = None) -> float:
        """AUC of the training predictions of batches ``first..last`` (made before each update)."""
        last = self.n_batches if last is None else last
        bs = [b for b in range(first, last + 1) if b in self.preds]
        return auc(np.concatenate([self.preds[b][1] for b in bs]),
                   np.concatenate([self.preds[b][0] for b in bs]))

    @property
    def lost_work(self) -> int:
        return sum(c.lost for c in self.crashes)


def train(device, model: DLRM, data: Callable[[int], ClickData], n_batches: int,
          cfg: DLRMConfig | None = None, *, progress: Callable[[dict], None] | None = None,
          initial_blob: bytes | None = None, max_restart_failures: int = 100,
          data_feedback=None) -> TrainResult:
    """Train batches ``device.committed + 1 .. n_batches`` (``data(b)`` returns batch b; it must
    return the same batch every time it is asked, see ClickLogGenerator.batch).

    Per batch b: ``device.lookup`` (all tables, LOG), forward/backward, ``device.update`` with
    the pooled-embedding gradients (lr = emb_lr or lr), MLP SGD step, SNAPSHOT(b) of the
    parameters after the step when ``b - A >= max(k, 1)`` (A: epoch of the last snapshot, 0 at
    start, the recovered epoch after a crash), ``device.commit(b)``.

    On :class:`PowerFailure` from any device call: ``device.restart()`` (repeated if it fails
    too), restore the MLP from the recovered blob (``initial_blob``, default the parameters at
    entry, if none), record a :class:`Crash`, continue at batch C + 1. MLP_LAG is set to k at
    entry (``device.set_mlp_lag``). ``progress(event)`` is called with ``{"kind": "batch",
    "batch", "loss"}`` after each commit and ``{"kind": "crash", "crash": Crash, "info":
    RecoveryInfo}`` after each recovery.

    ``data_feedback`` (optional, a stateful data path such as an importance sampler): gets
    ``losses(b, logits, labels)`` after each forward pass, ``snapshot(b)`` before each MLP
    snapshot and ``recover(C, m)`` after each recovery, before batch C + 1 is asked for.
    """
    cfg = model.cfg if cfg is None else cfg
    t0 = time.perf_counter()
    k = cfg.lag_k
    device.set_mlp_lag(k)
    init_blob = model.to_bytes() if initial_blob is None else bytes(initial_blob)
    emb_lr = cfg.lr if cfg.emb_lr is None else cfg.emb_lr
    res = TrainResult(n_batches)
    A = 0
    b = device.committed + 1
    while b <= n_batches:
        bt = data(b)
        phase = "lookup"
        try:
            pooled = device.lookup(b, bt.bags)
            logits, cache = model.forward(bt.dense, pooled)
            loss, grads, dpooled = model.backward(cache, bt.labels)
            res.loss_log.append((b, loss))
            res.preds[b] = (_sigmoid(logits.astype(np.float64)).astype(np.float32), bt.labels)
            if data_feedback is not None:
                data_feedback.losses(b, logits, bt.labels)
            phase = "update"
            device.update(b, bt.bags, dpooled, emb_lr)
            model.sgd_step(grads, cfg.lr)
            if b - A >= max(k, 1):
                phase = "snapshot"
                res.snapshots.append(b)
                if data_feedback is not None:
                    data_feedback.snapshot(b)
                device.snapshot(b, model.to_bytes())
                A = b
            phase = "commit"
            device.commit(b)
        except PowerFailure:
            fails = 0
            while True:
                try:
                    info: RecoveryInfo = device.restart()
                    break
                except PowerFailure:
                    fails += 1
                    if fails > max_restart_failures:
                        raise
            model.load_bytes(info.blob if info.blob is not None else init_blob)
            m = info.mlp_epoch or 0
            A = m
            c = info.committed
            crash = Crash(b, phase, c, info.mlp_epoch, b - c, c - m, fails)
            if data_feedback is not None:
                data_feedback.recover(c, info.mlp_epoch)
            res.crashes.append(crash)
            if progress is not None:
                progress(dict(kind="crash", crash=crash, info=info))
            b = c + 1
            continue
        if progress is not None:
            progress(dict(kind="batch", batch=b, loss=loss))
        b += 1
    res.seconds = time.perf_counter() - t0
    return res


def synthetic_data(cfg: DLRMConfig) -> Callable[[int], ClickData]:
    """``b -> batch b`` of the synthetic click log of ``cfg`` (train split, cfg.batch_size)."""
    gen = ClickLogGenerator(cfg.clicklog())
    return lambda b: gen.batch(b, cfg.batch_size)


def npz_data(path, batch_size: int, eval_fraction: float = 0.1):
    """A user's click log (npz, docs/dlrm.md) as training data: ``(data, n_batches, eval_data,
    table_rows)`` where ``data(b)`` is batch ``b`` (1-based) of the first ``1 - eval_fraction``
    of the samples in file order, ``n_batches`` how many whole batches that holds, and
    ``eval_data`` the rest (the held-out set). Raises ClickLogFormatError / ValueError."""
    from .clicklog import load_npz
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    full = load_npz(path)
    n_train = int(full.n * (1 - eval_fraction))
    n_batches = n_train // batch_size
    if n_batches < 1 or n_train >= full.n:
        raise ValueError(f"{path}: {full.n} samples are too few for batches of {batch_size} "
                         f"and a held-out {eval_fraction:.0%}")
    train_part, eval_data = full.slice(0, n_train), full.slice(n_train, full.n)

    def data(b: int) -> ClickData:
        if not 1 <= b <= n_batches:
            raise IndexError(f"batch {b} outside 1..{n_batches} of {path}")
        return train_part.slice((b - 1) * batch_size, b * batch_size)

    return data, n_batches, eval_data, tuple(int(r) for r in full.table_rows)
