"""A sharded click log on disk standing for the remote storage a training job reads.

Layout of a store directory: ``manifest.json`` (``format`` = "trainingcxl-sample-store",
``version`` = 1, ``n_samples``, ``shard_size``, ``table_rows``, ``n_dense``, and ``shards`` =
``[{"file", "n"}]`` in sample order) and one click-log npz per shard (the format of
docs/dlrm.md, version 1). Sample ``i`` lives in shard ``i // shard_size`` at position
``i % shard_size``.
"""
from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from sw_model.clicklog import NPZ_VERSION, ClickData, ClickLogFormatError, load_npz, save_npz

STORE_FORMAT = "trainingcxl-sample-store"
STORE_VERSION = 1


class ShardError(ValueError):
    """A shard of a sample store is missing, truncated, of a wrong version or holds other
    samples than the manifest says, or a sample id is outside the store. The message names the
    shard (index and file) or the sample id."""


def gather(data: ClickData, rows: Sequence[int]) -> ClickData:
    """Samples ``rows`` (any order, repeats allowed) of ``data`` as one ClickData."""
    rows = np.asarray(rows, dtype=np.int64)
    offs, idxs = [], []
    for o, x in zip(data.offsets, data.indices):
        lo, hi = o[rows], o[rows + 1]
        lens = hi - lo
        new_o = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
        # position of every output index in x: its bag's start + its rank inside the bag
        start = np.repeat(lo - new_o[:-1], lens)
        idxs.append(np.asarray(x, dtype=np.int64)[start + np.arange(int(new_o[-1]))])
        offs.append(new_o)
    return ClickData(data.dense[rows], offs, idxs, data.labels[rows],
                     np.asarray(data.table_rows, dtype=np.int64))


def write_store(data: ClickData, directory, shard_size: int) -> Path:
    """Split ``data`` into shards of ``shard_size`` samples (the last one shorter) under
    ``directory`` (created) and write the manifest; returns the directory."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1, not {shard_size!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    shards = []
    for s, lo in enumerate(range(0, data.n, shard_size)):
        name = f"shard-{s:05d}.npz"
        part = data.slice(lo, min(lo + shard_size, data.n))
        save_npz(d / name, part)
        shards.append(dict(file=name, n=part.n))
    manifest = dict(format=STORE_FORMAT, version=STORE_VERSION, n_samples=data.n,
                    shard_size=shard_size, table_rows=[int(r) for r in data.table_rows],
                    n_dense=int(data.dense.shape[1]), shards=shards)
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return d


@dataclass(frozen=True)
class IOModel:
    """Modelled cost of one fetch from remote storage: ``latency_s`` + bytes / ``bandwidth``
    (bytes per second). Defaults: 500 us and 200 MB/s, a networked file system or object store
    seen by one worker."""
    latency_s: float = 500e-6
    bandwidth: float = 200e6

    def __post_init__(self):
        if not self.latency_s >= 0 or not self.bandwidth > 0:
            raise ValueError(f"IOModel needs latency_s >= 0 and bandwidth > 0, got "
                             f"{self.latency_s!r}, {self.bandwidth!r}")

    def seconds(self, n_bytes: int) -> float:
        return self.latency_s + n_bytes / self.bandwidth


@dataclass
class IOCounters:
    """What storage served: ``fetches`` (samples), ``bytes``, ``seconds`` (modelled)."""
    fetches: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, n_bytes: int, seconds: float):
        self.fetches += 1
        self.bytes += int(n_bytes)
        self.seconds += seconds

    def as_dict(self) -> dict:
        return dict(fetches=self.fetches, bytes=self.bytes, seconds=self.seconds)


class SampleStore:
    """Per-sample reads from a store directory (see the module docstring).

    Parameters
    ----------
    directory : path of the store (``manifest.json`` and the shards).
    io : :class:`IOModel` for the modelled fetch time.

    Members
    -------
    ``n``, ``table_rows``, ``n_dense``; ``fetch(i)`` (a counted read of sample i, returns
    ``(ClickData of 1 sample, bytes)``), ``peek(ids)`` (the samples without counting: data a
    cache already holds), ``sample_bytes(i)``, ``verify()`` (open every shard now),
    ``counters`` (:class:`IOCounters`).

    Raises
    ------
    ShardError
        on a bad manifest, a missing, truncated or wrong-version shard, a shard whose samples
        differ from the manifest, and a sample id outside ``0 .. n-1``; nothing is skipped.
    """

    def __init__(self, directory, io: IOModel = IOModel()):
        self.dir = Path(directory)
        mpath = self.dir / "manifest.json"
        try:
            m = json.loads(mpath.read_text())
        except FileNotFoundError:
            raise ShardError(f"{mpath}: no store manifest") from None
        except json.JSONDecodeError as e:
            raise ShardError(f"{mpath}: not valid JSON ({e})") from None
        if m.get("format") != STORE_FORMAT or m.get("version") != STORE_VERSION:
            raise ShardError(f"{mpath}: format {m.get('format')!r} version {m.get('version')!r}"
                             f", expected {STORE_FORMAT!r} version {STORE_VERSION}")
        self.manifest = m
        self.n = int(m["n_samples"])
        self.shard_size = int(m["shard_size"])
        self.table_rows = np.asarray(m["table_rows"], dtype=np.int64)
        self.n_dense = int(m["n_dense"])
        self.shards = m["shards"]
        if sum(int(s["n"]) for s in self.shards) != self.n:
            raise ShardError(f"{mpath}: shards hold {sum(int(s['n']) for s in self.shards)} "
                             f"samples, n_samples is {self.n}")
        self.io = io
        self.counters = IOCounters()
        self._loaded: dict[int, ClickData] = {}
        self._bytes: np.ndarray | None = None

    # -- shards ------------------------------------------------------------------------------
    def _shard(self, s: int) -> ClickData:
        if s in self._loaded:
            return self._loaded[s]
        info = self.shards[s]
        path = self.dir / info["file"]
        where = f"shard {s} ({path})"
        try:
            self._check_container(path, where)
            data = load_npz(path)
        except FileNotFoundError:
            raise ShardError(f"{where}: missing") from None
        except ClickLogFormatError as e:
            msg = str(e)
            raise ShardError(f"{where}: {msg.removeprefix(f'{path}: ')}") from None
        except (ValueError, OSError, EOFError) as e:
            raise ShardError(f"{where}: truncated or unreadable ({e})") from None
        if data.n != int(info["n"]):
            raise ShardError(f"{where}: holds {data.n} samples, the manifest says {info['n']}")
        if not np.array_equal(data.table_rows, self.table_rows):
            raise ShardError(f"{where}: table_rows {data.table_rows.tolist()}, the store has "
                             f"{self.table_rows.tolist()}")
        if data.dense.shape[1] != self.n_dense:
            raise ShardError(f"{where}: {data.dense.shape[1]} dense features, the store has "
                             f"{self.n_dense}")
        self._loaded[s] = data
        return data

    @staticmethod
    def _check_container(path: Path, where: str):
        """The npz container is whole (every member's CRC) and of click-log version 1; numpy
        would leak the open file on a truncated zip."""
        try:
            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
                if bad is not None:
                    raise ShardError(f"{where}: truncated or corrupt member {bad!r}")
                if "version.npy" in z.namelist():
                    with z.open("version.npy") as f:
                        v = np.lib.format.read_array(f, allow_pickle=False)
                    if v.shape != () or int(v) != NPZ_VERSION:
                        raise ShardError(f"{where}: wrong version {v.tolist()!r}, expected "
                                         f"{NPZ_VERSION}")
        except (zipfile.BadZipFile, EOFError) as e:
            raise ShardError(f"{where}: truncated or unreadable ({e})") from None

    def verify(self) -> "SampleStore":
        """Open and check every shard now (a bad shard raises before training starts)."""
        for s in range(len(self.shards)):
            self._shard(s)
        return self

    def _locate(self, i: int) -> tuple[int, int]:
        if not 0 <= int(i) < self.n:
            raise ShardError(f"sample {int(i)} outside 0..{self.n - 1} of the store {self.dir}")
        return int(i) // self.shard_size, int(i) % self.shard_size

    # -- reads -------------------------------------------------------------------------------
    def sample_bytes(self, i: int) -> int:
        """Bytes of sample i as stored: dense and label float32, per table one int64 offset
        and its bag's int64 indices."""
        s, j = self._locate(i)
        d = self._shard(s)
        nnz = sum(int(o[j + 1] - o[j]) for o in d.offsets)
        return 4 * (self.n_dense + 1) + 8 * (len(d.offsets) + nnz)

    def fetch(self, i: int) -> int:
        """Read sample i from storage: counts one fetch, its bytes and modelled time; returns
        the bytes."""
        n_bytes = self.sample_bytes(i)
        self.counters.add(n_bytes, self.io.seconds(n_bytes))
        return n_bytes

    def peek(self, ids: Sequence[int]) -> ClickData:
        """The samples ``ids`` as one ClickData (no I/O counted: the caller fetched or cached
        them)."""
        parts = {}
        order = []
        for i in ids:
            s, j = self._locate(i)
            parts.setdefault(s, []).append(j)
            order.append((s, len(parts[s]) - 1))
        pieces = {s: gather(self._shard(s), rows) for s, rows in parts.items()}
        if len(pieces) == 1:
            return next(iter(pieces.values()))
        # reassemble in request order
        flat = ClickData.concat(list(pieces.values()))
        base, pos = {}, 0
        for s, p in pieces.items():
            base[s] = pos
            pos += p.n
        return gather(flat, [base[s] + k for s, k in order])

    def all_data(self) -> ClickData:
        """Every sample in id order (no I/O counted; for evaluation and reference runs)."""
        return ClickData.concat([self._shard(s) for s in range(len(self.shards))])
