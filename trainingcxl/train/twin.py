"""The main job's golden-model twin: :class:`TwinChecker`, in this process or in its own
(:class:`TwinProcess`).

The twin is a :class:`sw_model.embedding_device.ModelDevice` started from the same tables as
the RTL, with the host's own record of its run (its tables at every COMMIT). The RTL adapter
(:class:`trainingcxl.train.rtl_device.RtlDevice`) hands it every primitive it ran on the RTL
and what the RTL answered; the checker applies the primitive to the model and compares:

* ``write_staging(chunks)``: the host's staging writes (applied, nothing to compare);
* ``check_read(addr, n, got, where)``: the bytes the host read;
* ``check_submit(descs, got, where)``: every completion record, all fields but ``cycles``;
* ``set_mlp_lag_csr(k)``; ``note_update(rows)``, ``note_commit()``: the host's record;
* ``check_recovery(...)``: a recovery judged from the host's run (:func:`recovery_problems`),
  then the model restarted from the RTL's crash image and its (C, MLP_SLOT, MLP_EPOCH)
  compared;
* ``compare_memory(what, rtl)``: the whole memory outside staging.

Any difference raises :class:`TwinMismatch`.

:class:`TwinProcess` runs the same checker in a child process (``python -m
trainingcxl.train.twin``, numpy and sw_model only), so the model's work runs on another core
while the simulator runs on, instead of between the simulator's turns. The primitives are sent
without waiting; a difference found by the child is raised by the next call after the child
reported it, naming the batch and phase it was found in, and at the latest by the next
``check_recovery``/``compare_memory``/``close``, which wait for the child to have checked
everything sent before them. The run's verdict is the same: every check happens, in order.
"""
from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

from hw.encodings import CPL_FIELDS
from sw_model.memory import LineSnapshot, differing_lines

__all__ = ["TwinChecker", "TwinMismatch", "TwinProcess", "TWIN_MODES", "make_twin",
           "recovery_problems"]

TWIN_MODES = ("process", "inline")
LINE = 64


class TwinMismatch(AssertionError):
    """The RTL and the golden-model twin disagree."""


def recovery_problems(*, c: int, committed: int, commit_in_flight: bool, tables,
                      tables_committed, tables_open, slot: int, epoch: int,
                      slot_payload: bytes | None, blobs: dict, lag: int | None) -> list[str]:
    """What is wrong with a recovery, judged only from the host's own run.

    ``c``, ``tables`` (int32 arrays), ``slot``/``epoch`` (MLP_SLOT, MLP_EPOCH) and
    ``slot_payload`` (the chosen slot's stored payload) are what the recovered device shows.
    The rest comes from the golden-model twin's run before the failure: ``committed`` (its
    last committed batch), ``commit_in_flight`` (the power failed during the COMMIT of batch
    ``committed + 1``), ``tables_committed`` (its tables at ``committed``), ``tables_open``
    (its tables with the open batch's UPDATEs applied: what COMMIT ``committed + 1`` commits),
    ``blobs`` (``{epoch: [payloads the host snapshotted at that epoch]}``), ``lag`` (MLP_LAG
    k, or None). Returns the problems found (empty: legal)."""
    out = []
    legal = {committed, committed + 1} if commit_in_flight else {committed}
    if c not in legal:
        return [f"COMMITTED = {c}, the host's run allows {sorted(legal)}"]
    want = tables_committed if c == committed else tables_open
    for t, (w, g) in enumerate(zip(want, tables)):
        if not np.array_equal(w, g):
            r, e = (int(v[0]) for v in np.nonzero(w != g))
            out.append(f"table {t} row {r} element {e}: {int(g[r, e])}, the host's run "
                       f"has {int(w[r, e])} at batch {c}")
    if slot not in (0, 1, 2):
        out.append(f"MLP_SLOT = {slot}")
    elif slot:
        if not epoch <= c:
            out.append(f"MLP_EPOCH {epoch} > COMMITTED {c}")
        if slot_payload is None or slot_payload not in blobs.get(epoch, []):
            out.append(f"MLP slot {slot} does not hold a payload the host snapshotted at "
                       f"epoch {epoch}")
    if lag is not None and c - lag > 0 and (slot == 0 or epoch < c - lag):
        out.append(f"MLP (slot {slot}, epoch {epoch}) older than C - k = {c - lag}")
    return out


class TwinChecker:
    """The golden-model twin ``model`` (a ``ModelDevice``) and the host's record of its run;
    ``staging``: ``(base, size)`` of the staging region, left out of memory comparisons (the
    module docstring lists the calls; each raises :class:`TwinMismatch` on a difference)."""

    def __init__(self, model, staging: tuple[int, int]):
        self.model = model
        self.staging = staging
        self._tables_committed = model.read_tables_q()      # the host's tables at its COMMIT
        self._rows_since_commit = [[] for _ in range(model.layout.n_tables)]

    def write_staging(self, chunks):
        self.model.write_staging(chunks)

    def check_read(self, addr: int, n: int, got: bytes, where: str):
        want = self.model.read_mem(addr, n)
        if want != got:
            i = next(k for k in range(n) if want[k] != got[k])
            raise TwinMismatch(f"host read of {n} B at {addr:#x} ({where}): first difference "
                               f"at byte {i}: model {want[i]:#04x}, RTL {got[i]:#04x}")

    def check_submit(self, descs, got, where: str):
        want = self.model.submit(descs)
        for k, (w, g) in enumerate(zip(want, got)):
            bad = {f: (int(w[f]), int(g[f])) for f, _, _ in CPL_FIELDS
                   if f != "cycles" and int(w[f]) != int(g[f])}
            if bad:
                raise TwinMismatch(f"{where}: completion {k} differs (model, RTL): {bad}")

    def set_mlp_lag_csr(self, k: int):
        self.model.set_mlp_lag_csr(k)

    def note_update(self, rows):
        """The index arrays (one per table) of an UPDATE's bags."""
        for t, x in enumerate(rows):
            self._rows_since_commit[t].append(np.asarray(x, dtype=np.int64))

    def note_commit(self):
        """The host's tables at this COMMIT: only UPDATE writes table rows, so the rows of the
        UPDATE bags since the last COMMIT are copied from the twin (not the whole tables: they
        may hold millions of rows)."""
        for t, pending in enumerate(self._rows_since_commit):
            if not pending:
                continue
            tab = self._tables_committed[t]
            rows = np.unique(np.concatenate(pending))
            rows = rows[(rows >= 0) & (rows < tab.shape[0])]
            tab[rows] = self.model.read_rows_q(t, rows)
            pending.clear()

    def check_recovery(self, *, c: int, slot: int, epoch: int, tables, slot_payload,
                       commit_in_flight: bool, blobs: dict, lag, crash_image: LineSnapshot):
        """The RTL recovered to ``c``/``slot``/``epoch`` with ``tables`` from ``crash_image``:
        judged from the host's run, then the twin restarts from the same image and must
        agree."""
        m = self.model
        problems = recovery_problems(
            c=c, committed=m.dev.committed, commit_in_flight=commit_in_flight,
            tables=tables, tables_committed=self._tables_committed,
            tables_open=m.read_tables_q(), slot=slot, epoch=epoch, slot_payload=slot_payload,
            blobs=blobs, lag=lag)
        if problems:
            raise TwinMismatch("recovery differs from the host's own run: "
                               + "; ".join(problems[:4]))
        self._tables_committed = [np.array(t, dtype=np.int32) for t in tables]
        self._rows_since_commit = [[] for _ in tables]
        m.restart_from(crash_image.to_image(), copy=False)
        got = (c, slot, epoch)
        want = (m.dev.committed, m.dev.mlp_slot, m.dev.mlp_epoch)
        if got != want:
            raise TwinMismatch(f"recovery: RTL (C, MLP_SLOT, MLP_EPOCH) = {got}, model {want}")

    def compare_memory(self, what: str, rtl: LineSnapshot):
        """The RTL's memory ``rtl`` equal to the twin's outside staging."""
        s0, s1 = self.staging[0], self.staging[0] + self.staging[1]
        b = self.model.mem
        for la in differing_lines(rtl, b, skip=(s0, s1), limit=1):
            raise TwinMismatch(f"{what}: memory line {la:#x} differs: RTL "
                               f"{rtl.read_line(la).hex()[:32]}..., model "
                               f"{b.read(la, LINE).hex()[:32]}...")

    def close(self):
        pass

    kill = close        # (TwinProcess.kill ends its child without waiting for the checks)


def make_twin(mode: str, layout, tables, *, mlp_lag, seed: int):
    """The twin checker for ``mode`` (``TWIN_MODES``) over a ``ModelDevice(layout, tables,
    mlp_lag=mlp_lag, seed=seed)``: ``"inline"`` in this process (a difference raises at the
    call that found it), ``"process"`` in a child process (the model built there)."""
    if mode not in TWIN_MODES:
        raise ValueError(f"twin mode must be one of {TWIN_MODES}, got {mode!r}")
    spec = (layout, [np.asarray(t) for t in tables], mlp_lag, seed)
    if mode == "inline":
        return _checker(*spec)
    return TwinProcess(*spec)


def _checker(layout, tables, mlp_lag, seed) -> TwinChecker:
    from sw_model.embedding_device import ModelDevice
    cfg = layout.cfg
    return TwinChecker(ModelDevice(layout, tables, mlp_lag=mlp_lag, seed=seed),
                       (cfg.staging_base, cfg.staging_size))


# ---- the checker in a child process -------------------------------------------------------------

_SYNC = ("_start", "check_recovery", "compare_memory", "close")   # calls that wait for the child


def _write_frame(fd: int, obj):
    buf = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(buf)) + buf)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes | None:
    parts = []
    while n:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        parts.append(b)
        n -= len(b)
    return b"".join(parts)


def _read_frame(fd: int):
    head = _read_exact(fd, 8)
    if head is None:
        raise EOFError
    body = _read_exact(fd, struct.unpack("<Q", head)[0])
    if body is None:
        raise EOFError
    return pickle.loads(body)


class TwinProcess:
    """:class:`TwinChecker` in a child process (module docstring): the same calls, the
    ``ModelDevice(layout, tables, mlp_lag=mlp_lag, seed=seed)`` built there. Close it with
    :meth:`close` (waits for every check); a child that dies raises ``RuntimeError`` with its
    traceback."""

    def __init__(self, layout, tables, mlp_lag, seed):
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen([sys.executable, "-m", "trainingcxl.train.twin"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      bufsize=0)
        self._w, self._r = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        self._closed = False
        self._call("_start", layout, tables, mlp_lag, seed)

    def _raise(self, msg):
        kind, text = msg
        if kind == "mismatch":
            raise TwinMismatch(text)
        if kind == "error":
            raise RuntimeError(f"the golden-model twin process failed:\n{text}")

    def _receive(self):
        try:
            msg = _read_frame(self._r)
        except EOFError:
            code = self._proc.wait()
            raise RuntimeError(f"the golden-model twin process ended (exit code {code}) "
                               "before answering") from None
        self._raise(msg)
        return msg[1]

    def _poll(self):
        """A difference the child reported already, raised here."""
        if select.select([self._r], [], [], 0)[0]:
            self._receive()

    def _call(self, name, *args, **kw):
        if self._closed:
            raise RuntimeError("the golden-model twin process is closed")
        self._poll()
        sync = name in _SYNC
        try:
            _write_frame(self._w, (name, args, kw, sync))
        except BrokenPipeError:
            self._receive()                 # the child's last word, then its exit
            raise
        if sync:
            return self._receive()

    def write_staging(self, chunks):
        self._call("write_staging", [(int(a), bytes(d)) for a, d in chunks])

    def check_read(self, addr, n, got, where):
        self._call("check_read", addr, n, bytes(got), where)

    def check_submit(self, descs, got, where):
        self._call("check_submit", [bytes(d) for d in descs],
                   [{k: int(v) for k, v in g.items()} for g in got], where)

    def set_mlp_lag_csr(self, k):
        self._call("set_mlp_lag_csr", int(k))

    def note_update(self, rows):
        self._call("note_update", [np.asarray(x, dtype=np.int64) for x in rows])

    def note_commit(self):
        self._call("note_commit")

    def check_recovery(self, **kw):
        self._call("check_recovery", **kw)

    def compare_memory(self, what, rtl):
        self._call("compare_memory", what, rtl)

    def close(self):
        """Wait for every check sent, end the child."""
        if self._closed:
            return
        try:
            self._call("close")
        finally:
            self._closed = True
            self._proc.stdin.close()
            self._proc.wait()
            self._proc.stdout.close()

    def kill(self):
        """End the child without waiting for its checks (a run that failed already)."""
        if not self._closed:
            self._closed = True
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()


def _serve(r: int, w: int):
    """The child's loop: calls from the parent applied to one :class:`TwinChecker`; the first
    failure is reported at once, later calls are read and dropped (the parent raises)."""
    checker, failed = None, None
    while True:
        try:
            name, args, kw, sync = _read_frame(r)
        except EOFError:
            return
        if failed is None:
            try:
                if name == "_start":
                    checker = _checker(*args, **kw)
                else:
                    getattr(checker, name)(*args, **kw)
            except TwinMismatch as e:
                failed = ("mismatch", str(e))
            except Exception:
                failed = ("error", traceback.format_exc())
            else:
                if sync:
                    _write_frame(w, ("ok", None))
            if failed is not None:
                _write_frame(w, failed)         # at once (and the answer to a waiting call)
        elif sync:
            _write_frame(w, failed)
        if name == "close":
            return


if __name__ == "__main__":
    out = os.dup(1)                   # the frames' channel; print() goes to stderr
    os.dup2(2, 1)
    _serve(0, out)
