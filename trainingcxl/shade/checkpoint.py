"""The data path's checkpoints ("sidecars"): the sampler's and caches' state saved with each
MLP snapshot, so a run resumes deterministically after a power failure (docs/shade.md).

A sidecar is one npz file (a zip, stored uncompressed with fixed timestamps so equal states
give equal bytes) holding ``meta.json`` -- format, version, the data path's configuration,
scalars, the score table's scalars and every cache policy's state as JSON -- and the arrays
``weights.npy``, ``freq.npy`` (score table) and ``plan.npy`` (the epoch's plan, if any),
read with ``allow_pickle=False``. Nothing is unpickled. A missing, corrupt or truncated
file, another format or version, or a state written by another configuration raises
:class:`SidecarError` naming the file.
"""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from .importance import ScoreTable
from .policies import policy_from_state

FORMAT = "trainingcxl-datapath-state"
VERSION = 1
_DATE = (1980, 1, 1, 0, 0, 0)


class SidecarError(ValueError):
    """A data-path checkpoint that cannot be used; the message names the file."""


def _member(z: zipfile.ZipFile, name: str, data: bytes):
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.compress_type = zipfile.ZIP_STORED
    z.writestr(info, data)


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def encode_state(scores: ScoreTable, caches: dict, plan, scalars: dict, config: dict) -> bytes:
    """The bytes of a sidecar file for this state."""
    meta = dict(format=FORMAT, version=VERSION, config=config, scalars=scalars,
                scores=dict(smoothing=scores.smoothing,
                            smoothing_factor=scores.smoothing_factor,
                            prev_loss=scores.prev_loss),
                caches={name: c.state_dict() for name, c in caches.items()})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        _member(z, "meta.json", json.dumps(meta, sort_keys=True).encode())
        _member(z, "weights.npy", _npy(scores.weights))
        _member(z, "freq.npy", _npy(scores.freq))
        if plan is not None:
            _member(z, "plan.npy", _npy(np.asarray(plan, dtype=np.int64)))
    return buf.getvalue()


def decode_state(blob: bytes, source: str, config: dict | None = None):
    """``(scores, caches, plan, scalars)`` of a sidecar's bytes; ``source`` names it in
    errors; ``config``: the configuration the state must have been written by."""
    def bad(why):
        return SidecarError(f"{source}: {why}")
    try:
        z = zipfile.ZipFile(io.BytesIO(blob))
        names = set(z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise bad(f"not a data-path checkpoint (corrupt or truncated npz: {e})") from None
    with z:
        for need in ("meta.json", "weights.npy", "freq.npy"):
            if need not in names:
                raise bad(f"not a data-path checkpoint (no {need})")
        try:
            meta = json.loads(z.read("meta.json"))
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise bad(f"corrupt meta.json ({e})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise bad(f"format {meta.get('format') if isinstance(meta, dict) else None!r}, "
                      f"expected {FORMAT!r}")
        if meta.get("version") != VERSION:
            raise bad(f"version {meta.get('version')!r}, this reader reads version {VERSION}")
        if config is not None and meta.get("config") != config:
            raise bad(f"written by another data-path configuration ({meta.get('config')}, "
                      f"this one is {config})")
        try:
            arrays = {}
            for name in ("weights", "freq", "plan"):
                if f"{name}.npy" in names:
                    with z.open(f"{name}.npy") as f:
                        arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
            sc = meta["scores"]
            w, fr = arrays["weights"], arrays["freq"]
            if w.ndim != 1 or fr.shape != w.shape:
                raise ValueError(f"score arrays of shapes {w.shape} and {fr.shape}")
            scores = ScoreTable(w.size)
            scores.weights = w.astype(np.float64)
            scores.freq = fr.astype(np.int64)
            scores.smoothing = float(sc["smoothing"])
            scores.smoothing_factor = float(sc["smoothing_factor"])
            scores.prev_loss = None if sc["prev_loss"] is None else float(sc["prev_loss"])
            caches = {name: policy_from_state(d) for name, d in meta["caches"].items()}
            s = meta["scalars"]
            scalars = dict(plan_epoch=int(s["plan_epoch"]), next_batch=int(s["next_batch"]),
                           loss_sum=float(s["loss_sum"]), loss_n=int(s["loss_n"]))
        except (KeyError, TypeError, ValueError, zipfile.BadZipFile, OSError) as e:
            raise bad(f"corrupt data-path checkpoint ({type(e).__name__}: {e})") from None
    return scores, caches, arrays.get("plan"), scalars


class SidecarStore:
    """Where the data path's checkpoints live, keyed by MLP epoch: host storage that survives a
    power failure (``directory``: one ``datapath-<epoch>.npz`` per epoch, written atomically;
    read back from the file, as after a failure), or a dict in memory for studies and tests.
    Keeps the newest ``keep``."""

    def __init__(self, directory=None, keep: int = 4):
        self.dir = Path(directory) if directory is not None else None
        self.keep = keep
        self._mem: dict[int, bytes] = {}
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)

    def path(self, epoch: int) -> Path | None:
        return self.dir / f"datapath-{epoch}.npz" if self.dir is not None else None

    def describe(self, epoch: int) -> str:
        """How errors name the checkpoint of ``epoch``."""
        p = self.path(epoch)
        return str(p) if p is not None else f"in-memory data-path checkpoint {epoch}"

    def put(self, epoch: int, blob: bytes):
        if self.dir is not None:
            tmp = self.dir / f".datapath-{epoch}.tmp"
            tmp.write_bytes(blob)
            os.replace(tmp, self.path(epoch))
            self._mem[epoch] = b""                 # only the key: the file is the copy
        else:
            self._mem[epoch] = blob
        for old in sorted(self._mem)[:-self.keep]:
            del self._mem[old]
            if self.dir is not None:
                self.path(old).unlink(missing_ok=True)

    def get(self, epoch: int) -> bytes:
        if self.dir is not None:
            p = self.path(epoch)
            try:
                return p.read_bytes()
            except FileNotFoundError:
                raise SidecarError(f"{p}: missing data-path checkpoint for MLP epoch "
                                   f"{epoch}") from None
        if epoch in self._mem:
            return self._mem[epoch]
        raise KeyError(f"no data-path checkpoint for MLP epoch {epoch} (have "
                       f"{sorted(self._mem)})")
