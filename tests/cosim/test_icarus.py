"""Second simulator: Icarus Verilog and Verilator record identical boundary traces.

The device (default configuration, the same Verilog for both simulators, so the Verilator build
is shared with test_gather.py) runs ``cosim.trace_tests`` with the same seed on each simulator;
every transaction on cmd/cpl and the AXI media port, with its cycle, must be identical line for
line. Two simulators with different scheduling and 2-state vs 4-state semantics agreeing on
every handshake rules out testbench races and X-dependent RTL behaviour on this workload.

Skipped when Icarus (``iverilog``, ``vvp``) is not installed, unless ``TCXL_REQUIRE_ICARUS=1``
(``make test-icarus``), which turns the skip into a failure. The trace-sensitivity test needs
only Verilator and always runs.
"""
import os
import time

import pytest

from cosim import build as cb
from cosim.trace import first_difference
from hw.config import DeviceConfig
from hw.lookup_slice import SLICE_NAME, LookupSlice

CFG = DeviceConfig()
TRACE_CHANNELS = ("cmd", "cpl", "ar", "r", "aw", "w", "b")


def _require_icarus():
    reason = cb.icarus_missing()
    if reason is None:
        return
    if os.environ.get("TCXL_REQUIRE_ICARUS", "").strip() == "1":
        pytest.fail(f"TCXL_REQUIRE_ICARUS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """``traces(sim, seed) -> list of trace lines``, each (sim, seed) simulated once per module."""
    verilog = cb.generate_verilog(LookupSlice(CFG), name=SLICE_NAME)
    cache = {}

    def get(sim, seed):
        if (sim, seed) not in cache:
            t0 = time.monotonic()
            b = cb.build(verilog, sim=sim, top=SLICE_NAME)
            t1 = time.monotonic()
            out = tmp_path_factory.mktemp(f"trace-{sim}-{seed}")
            cb.run(b, "cosim.trace_tests", seed=seed, test_dir=out,
                   extra_env={"TCXL_CONFIG": CFG.to_json(),
                              "TCXL_TRACE_OUT": out / "trace.jsonl"})
            t2 = time.monotonic()
            print(f"{sim}: build {t1 - t0:.1f} s, trace run {t2 - t1:.1f} s ({out})")
            cache[sim, seed] = (out / "trace.jsonl").read_text().splitlines()
        return cache[sim, seed]

    return get


def _channels(lines):
    return {ch for ch in TRACE_CHANNELS if any(f'"ch": "{ch}"' in line for line in lines)}


@pytest.mark.cosim
def test_icarus_trace_equals_verilator(traces, seed):
    """Same seed, same Verilog: Icarus (-g2005) and Verilator traces are identical."""
    _require_icarus()
    ver = traces("verilator", seed)
    ica = traces("icarus", seed)
    assert _channels(ver) == set(TRACE_CHANNELS), "the workload left a channel untouched"
    diff = first_difference(ver, ica, context=3, names=("verilator", "icarus"))
    assert diff is None, f"Verilator and Icarus disagree (seed {seed}):\n{diff}"


@pytest.mark.cosim
def test_trace_follows_stimulus(traces, seed):
    """The comparison is not vacuous: another seed gives other transactions, and one changed
    field in a copy is reported at its own line with context."""
    base = traces("verilator", seed)
    other = traces("verilator", seed + 1)
    body = [line for line in base if '"cycle"' in line]
    assert len(body) > 100, f"trace too short to mean anything ({len(body)} transactions)"
    assert body != [line for line in other if '"cycle"' in line], \
        f"seeds {seed} and {seed + 1} produced the same transactions"

    i = next(k for k in range(len(base) // 2, len(base)) if '"ch": "r"' in base[k])
    perturbed = list(base)
    perturbed[i] = perturbed[i].replace('"rresp": 0', '"rresp": 2')
    assert perturbed[i] != base[i]
    report = first_difference(base, perturbed, context=3)
    assert report is not None and f"traces differ at line {i + 1} " in report, report
    assert f">{i + 1:6d}: {base[i]}" in report and f"{i - 2:6d}: {base[i - 3]}" in report
    assert first_difference(base, base[:-1]) is not None    # a missing last line counts
    assert first_difference(base, list(base)) is None
