"""Where a campaign's tasks run: in this process, one after the other (the default), or on a
Dask cluster (docs/campaigns.md).

    with open_executor(workers=None, scheduler=None) as ex:
        results = ex.map(task, items, weights=[...], desc="crash seed 1", unit="pt")

``task(item, progress=...)`` is called once per item and its results come back in the order of
``items``. ``progress(done)`` reports how many of the item's ``weight`` units are done so far;
one tqdm bar (on stderr) counts the units of every task, wherever it runs.

* ``workers=None, scheduler=None``: :class:`SerialExecutor`, in this process; ``distributed``
  is not imported.
* ``workers=N``: a ``distributed.LocalCluster`` of N worker processes with one thread each
  (a task is a whole simulator launch or training run, so a worker runs one at a time), closed
  when the ``with`` block ends.
* ``scheduler=ADDRESS``: ``distributed.Client(ADDRESS)`` joins a running cluster (one started
  by ``dask-jobqueue`` on Slurm/LSF/SGE/PBS, or by ``dask scheduler`` / ``dask worker``);
  :class:`ClusterError` if it cannot be reached within ``timeout`` seconds.

A worker lost mid-campaign (killed, out of memory, its machine gone) does not lose its tasks:
the scheduler runs them again on another worker (up to ``distributed.scheduler.allowed-failures``
worker deaths per task, 3 by default), and a task that raised is retried ``retries`` times
before the campaign fails. Tasks must therefore be idempotent: each writes only into its own
results directory, in a fresh attempt directory (:func:`fresh_task_dir`).

The command-line side is :func:`add_arguments` / :func:`check_arguments`, shared by
``trainingcxl crash``, ``study``, ``stress`` and ``bench``.
"""
from __future__ import annotations

import gc
import json
import shutil
import sys
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CONNECT_TIMEOUT_S", "QUIET_CONFIG", "ClusterError", "SerialExecutor", "DaskExecutor",
           "open_executor", "fresh_task_dir", "add_arguments", "check_arguments",
           "executor_from_args", "run_sim_task", "sum_counts"]

CONNECT_TIMEOUT_S = 30.0

# Dask settings for the local cluster (scheduler, nannies, workers) and the client. A task
# waits on a simulator process most of the time, and on a loaded machine every cycle the Dask
# processes take is a cycle the simulators lose: no statistical profiler sampling the task
# thread every 10 ms, no GIL monitor, event-loop health checks and resource samples at a
# slower pace. (A cluster joined with --scheduler keeps its own settings; docs/campaigns.md.)
QUIET_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.system-monitor.gil.enabled": False,
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.admin.tick.interval": "500ms",
    # the nanny's environment for its worker, which the simulators inherit: single-threaded
    # BLAS (one task per core), but not Dask's MALLOC_TRIM_THRESHOLD_=65536 (memory handed
    # back to the kernel eagerly), so a simulator's allocator behaves as in a serial run
    "distributed.nanny.pre-spawn-environ": {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1,
                                            "OPENBLAS_NUM_THREADS": 1},
}


class ClusterError(RuntimeError):
    """The cluster could not be started or reached, or it lost a task for good."""


LOG_BAR_INTERVAL_S = 10.0   # seconds between redraws of a bar written into a log


def _bar(total: int, desc: str, unit: str, enabled: bool):
    """The campaign's progress bar on stderr; redrawn ten times a second on a terminal, at
    most every :data:`LOG_BAR_INTERVAL_S` seconds into a file or pipe (a 10,000-point
    campaign's log then holds a few dozen bar lines, not tens of thousands)."""
    if not enabled:
        return None
    from tqdm import tqdm
    isatty = getattr(sys.stderr, "isatty", lambda: False)()
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.1 if isatty else LOG_BAR_INTERVAL_S)


def _advance(bar, n: int):
    """Set the bar to ``n`` units done; it redraws only as often as its interval allows."""
    if n != bar.n:
        bar.update(n - bar.n)


def _weights(items: list, weights) -> list[int]:
    if weights is None:
        return [1] * len(items)
    weights = [int(w) for w in weights]
    if len(weights) != len(items) or any(w < 0 for w in weights):
        raise ValueError(f"weights must be one int >= 0 per item ({len(items)} items), "
                         f"got {weights!r}")
    return weights


class SerialExecutor:
    """Runs every task in this process, in order (the default of every campaign command).

    Attributes
    ----------
    workers : int
        Always 1.
    description : str
        ``"in-process (serial)"``, for log lines.
    """

    workers = 1
    description = "in-process (serial)"

    def map(self, task, items, *, weights=None, desc: str = "", unit: str = "it",
            progress: bool = True) -> list:
        """``[task(item, progress=...) for item in items]`` with one progress bar.

        Parameters
        ----------
        task : callable
            ``task(item, progress=callback)``; ``callback(done)`` reports units done.
        items : iterable
            One task each.
        weights : list of int, optional
            Units of work per item (default 1 each); the bar's total is their sum.
        desc, unit : str
            The bar's label and unit.
        progress : bool
            Show the bar (stderr).
        """
        items = list(items)
        weights = _weights(items, weights)
        bar = _bar(sum(weights), desc, unit, progress)
        out = []
        base = 0
        try:
            for item, w in zip(items, weights):
                def report(done, _base=base, _w=w):
                    if bar is not None:
                        _advance(bar, _base + min(max(int(done), 0), _w))
                out.append(task(item, progress=report))
                base += w
                report(w)
        finally:
            if bar is not None:
                bar.close()
        return out


class _EventProgress:
    """The ``progress`` callback of a task on a Dask worker: an event on the run's topic,
    which the client's :class:`DaskExecutor` adds to its bar."""

    def __init__(self, topic: str, index: int):
        self.topic = topic
        self.index = index

    def __call__(self, done) -> None:
        from distributed import get_worker
        try:
            worker = get_worker()
        except ValueError:          # called outside a worker (a test calling the task directly)
            return
        worker.log_event(self.topic, {"i": self.index, "done": int(done)})


class DaskExecutor:
    """Runs tasks on a ``distributed`` cluster through ``client``.

    Parameters
    ----------
    client : distributed.Client
        Connected client; the executor does not close it.
    retries : int
        Times a task that raised is run again before the campaign fails (a lost worker is
        handled by the scheduler and does not count).
    description : str
        For log lines (``"local cluster, 2 workers"``).
    """

    def __init__(self, client, *, retries: int = 1, description: str = "Dask cluster"):
        self.client = client
        self.retries = retries
        self.description = description

    @property
    def workers(self) -> int:
        """Workers connected now (at least 1: an adaptive cluster may still be starting them)."""
        return max(1, len(self.client.scheduler_info(n_workers=-1).get("workers", {})))

    def map(self, task, items, *, weights=None, desc: str = "", unit: str = "it",
            progress: bool = True) -> list:
        """Same contract as :meth:`SerialExecutor.map`; the tasks run on the cluster's
        workers. The first task that fails for good cancels the others and its exception is
        raised here (:class:`ClusterError` when the scheduler gave it up after repeated worker
        deaths)."""
        from distributed import wait
        from distributed.client import FutureCancelledError

        items = list(items)
        weights = _weights(items, weights)
        bar = _bar(sum(weights), desc, unit, progress)
        topic = f"trainingcxl-progress-{uuid.uuid4().hex}"
        lock = threading.Lock()
        partial = {}                 # task index -> units reported by its current attempt

        def on_event(event):
            _, msg = event
            with lock:
                partial[msg["i"]] = min(max(msg["done"], 0), weights[msg["i"]])

        self.client.subscribe_topic(topic, on_event)
        run = uuid.uuid4().hex[:8]
        futures = [self.client.submit(task, item, progress=_EventProgress(topic, k),
                                      key=f"{(desc or 'task').split()[0]}-{run}-{k}",
                                      retries=self.retries, pure=False)
                   for k, item in enumerate(items)]
        index = {f.key: k for k, f in enumerate(futures)}
        finished = set()
        pending = set(futures)
        try:
            while pending:
                try:
                    done, pending = wait(pending, timeout=0.5, return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                for f in done:
                    if f.status != "finished":
                        exc = f.exception()
                        if type(exc).__name__ == "KilledWorker":
                            raise ClusterError(f"task {index[f.key]} of {desc!r} was lost with "
                                               f"its worker too many times: {exc}") from exc
                        raise exc
                    finished.add(index[f.key])
                if bar is not None:
                    with lock:
                        n = sum(weights[k] if k in finished else partial.get(k, 0)
                                for k in range(len(items)))
                    _advance(bar, n)
            return [f.result() for f in futures]
        except FutureCancelledError as e:
            raise ClusterError(f"a task of {desc!r} was cancelled by the cluster: {e}") from e
        finally:
            for f in futures:
                if not f.done():
                    f.cancel()
            self.client.unsubscribe_topic(topic)
            if bar is not None:
                bar.close()


@contextmanager
def open_executor(workers: int | None = None, scheduler: str | None = None, *,
                  timeout: float = CONNECT_TIMEOUT_S, retries: int = 1):
    """The executor of a campaign (see the module docstring); a context manager.

    Parameters
    ----------
    workers : int, optional
        Start a local cluster of this many worker processes (one thread each).
    scheduler : str, optional
        Address of a running scheduler to join instead (``tcp://host:8786``).
    timeout : float
        Seconds to wait for the scheduler (or the local cluster) to answer.
    retries : int
        See :class:`DaskExecutor`.

    Raises
    ------
    ValueError
        ``workers`` < 1, or both ``workers`` and ``scheduler`` given.
    ClusterError
        The local cluster did not start, or the scheduler did not answer within ``timeout``.
    """
    if workers is not None and scheduler is not None:
        raise ValueError("give either workers (a local cluster) or scheduler (an existing "
                         f"cluster), not both: workers={workers!r}, scheduler={scheduler!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if workers is None and scheduler is None:
        yield SerialExecutor()
        return

    import dask
    import distributed  # noqa: F401 - its config defaults must exist before config.set,
    # which would otherwise drop them again on exit

    with dask.config.set(QUIET_CONFIG):
        with _connect(workers, scheduler, timeout) as (client, what):
            yield DaskExecutor(client, retries=retries, description=what)


@contextmanager
def _connect(workers: int | None, scheduler: str | None, timeout: float):
    """A connected ``(client, description)``; the local cluster, if any, closed after."""
    import logging

    from distributed import Client, LocalCluster

    cluster, failure = None, None
    try:
        if workers is not None:
            # no dashboard; the scheduler's HTTP endpoints (health, metrics) on a free port, so
            # two campaigns on one machine do not collide on 8787
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR,
                                   scheduler_kwargs={"dashboard_address": ":0"})
            client = Client(cluster, timeout=timeout)
            what = f"local cluster, {workers} worker{'s' if workers > 1 else ''}"
        else:
            client = Client(scheduler, timeout=timeout)
            what = f"scheduler {scheduler}"
    except (OSError, TimeoutError, RuntimeError) as e:
        # OSError/TimeoutError: nobody answered at the address; RuntimeError: the local
        # cluster's processes did not start (for example a script without an
        # ``if __name__ == "__main__":`` guard, which spawned workers re-run)
        if scheduler is not None:
            failure = (f"could not reach the Dask scheduler at {scheduler!r} within "
                       f"{timeout:g} s ({type(e).__name__}: {e})")
        else:
            failure = (f"could not start a local cluster of {workers} workers "
                       f"({type(e).__name__}: {e})")
    except Exception as e:  # noqa: BLE001 - something answered, but not a Dask scheduler
        where = f"at {scheduler!r}" if scheduler is not None else "of the local cluster"
        failure = (f"the Dask handshake with the scheduler {where} failed "
                   f"({type(e).__name__}: {str(e)[:300]}); is it a Dask scheduler's "
                   "address (tcp://host:8786)?")
    if failure is not None:
        if cluster is not None:
            cluster.close()
        # The half-built Client is now garbage in a reference cycle. Its finalizer closes its
        # event-loop runner under the lock that the next Client's start holds, so collected at
        # an arbitrary point (inside that next Client(...)) it deadlocks the process: a test
        # run hung there for 15 minutes. Collect it here, where no such lock is held.
        gc.collect()
        raise ClusterError(failure)
    try:
        yield client, what
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def fresh_task_dir(path) -> Path:
    """A new, empty attempt directory ``path/attempt-<id>`` for a task whose results go under
    ``path``; whatever an earlier attempt left there is removed first.

    A task runs again when its worker was lost, and the simulator that worker had started may
    outlive it. Such an orphan appends to files under the old attempt directory; once that is
    gone its next write fails and it ends, instead of mixing its lines into the new attempt's.
    """
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    attempt = path / f"attempt-{uuid.uuid4().hex[:8]}"
    attempt.mkdir(parents=True)
    return attempt


def sum_counts(results: list[dict], *, skip=("seed",), histograms=()) -> dict:
    """Campaign blocks' results added up: every int field but ``skip``, and the
    ``{name: count}`` dicts named in ``histograms`` per name."""
    rep: dict = {}
    for r in results:
        for k, v in r.items():
            if isinstance(v, int) and not isinstance(v, bool) and k not in skip:
                rep[k] = rep.get(k, 0) + v
        for k in (k for k in histograms if k in r):
            h = rep.setdefault(k, {})
            for name, n in r[k].items():
                h[name] = h.get(name, 0) + n
    return rep


def run_sim_task(build, module: str, test: str, *, seed: int, params, out: Path,
                 what: str) -> dict:
    """One cocotb launch of a campaign task whose bench writes its result JSON to
    ``out / "result.json"`` (the ``out`` field of ``params``); returns that dict with
    ``run_error`` (the simulator's failure, or None), or ``{"seed", "missing": True,
    "run_error"}`` when the run wrote no result."""
    from cosim import build as cb
    err = None
    try:
        cb.run(build, module, test_filter=f"{test}$", seed=seed, params=params,
               test_dir=out / "run", quiet=True)
    except cb.CosimError as e:
        err = str(e)[-3000:]
    result = out / "result.json"
    if not result.exists():
        return {"seed": seed, "missing": True, "run_error": err or f"the {what} wrote no result"}
    r = json.loads(result.read_text())
    r["run_error"] = err
    return r


def add_arguments(parser) -> None:
    """``--workers N``, ``--scheduler ADDRESS`` (exclusive) and ``--scheduler-timeout S``."""
    g = parser.add_argument_group("cluster (docs/campaigns.md)")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--workers", type=int, default=None, metavar="N",
                   help="run the campaign's tasks on a local Dask cluster of N worker processes "
                        "(default: in this process, one after the other)")
    x.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run them on an existing Dask cluster (tcp://host:8786, for example "
                        "one started by dask-jobqueue on Slurm/LSF/SGE/PBS)")
    g.add_argument("--scheduler-timeout", type=float, default=CONNECT_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for the scheduler (default {CONNECT_TIMEOUT_S:g})")


def check_arguments(parser, args) -> None:
    """``parser.error`` (exit 2) on a bad ``--workers`` or ``--scheduler-timeout``."""
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.scheduler is not None and not args.scheduler.strip():
        parser.error("--scheduler needs an address (tcp://host:8786)")
    if args.scheduler_timeout <= 0:
        parser.error(f"--scheduler-timeout must be > 0, got {args.scheduler_timeout:g}")


def executor_from_args(args):
    """:func:`open_executor` for parsed :func:`add_arguments` options."""
    return open_executor(args.workers, args.scheduler, timeout=args.scheduler_timeout)


def run_with_executor(prog: str, args, job) -> int:
    """``job(executor)`` on the executor of the parsed options ``args``; a
    :class:`ClusterError` (no cluster, unreachable scheduler) is printed as ``trainingcxl
    <prog>: ...`` and gives exit status 2."""
    try:
        with executor_from_args(args) as ex:
            return job(ex)
    except ClusterError as e:
        print(f"trainingcxl {prog}: {e}", file=sys.stderr)
        return 2
