"""Media timing of the PMEM model (cosim/media.py): the bandwidth rule in integers, the presets
and their conversion to cycles, the argument checks. Pure Python, no simulator."""
import math
import random
from fractions import Fraction

import pytest

from cosim.media import (PRESETS, BandwidthServer, MediaTiming, bandwidth, media_timing)


def _reference_starts(arrivals, bw):
    """Service start edges (rounded up) of units (edge, bytes) served in order at ``bw`` bytes
    per cycle, in exact fractions (independent of BandwidthServer's ticks)."""
    free, out = Fraction(0), []
    for edge, b in arrivals:
        start = max(free, Fraction(edge))
        free = start + Fraction(b) / bw
        out.append(math.ceil(start))
    return out


def test_unlimited_server_is_the_old_timing():
    """bandwidth None: every unit starts on its own edge (the model's timing unchanged)."""
    s = BandwidthServer(None)
    assert [s.serve(e, 4096) for e in (0, 0, 5, 5, 9)] == [0, 0, 5, 5, 9]


@pytest.mark.parametrize("bw", ["64", "39.4", "13.9", "5/13", "1000", "1/3"])
def test_server_matches_exact_fractions(bw, seed):
    """Random arrivals (bursts, idle gaps, several units on one edge) start where the exact
    fraction reference says, for integral and fractional bandwidths."""
    rng = random.Random(seed)
    print(f"seed={seed}")
    f = bandwidth(bw)
    s = BandwidthServer(f)
    edge, arrivals = 0, []
    for _ in range(2000):
        edge += rng.choice([0, 0, 1, 1, 2, 50])
        arrivals.append((edge, rng.choice([8, 64, 64, 32])))
    got = [s.serve(e, b) for e, b in arrivals]
    assert got == _reference_starts(arrivals, f), f"seed {seed}"


def test_backlogged_throughput_is_the_bandwidth():
    """1000 lines of 64 B queued at once at 13.9 B/cycle: the last starts at
    ceil(999 * 64 / 13.9) = 4600 cycles after the first (and with clear() the server is
    idle again)."""
    s = BandwidthServer(Fraction(139, 10))
    starts = [s.serve(100, 64) for _ in range(1000)]
    assert starts[0] == 100 and starts[-1] - starts[0] == math.ceil(Fraction(999 * 640, 139))
    assert starts[-1] - starts[0] == 4600
    s.clear()
    assert s.serve(7, 64) == 7


def test_bandwidth_parsing():
    assert bandwidth(None) is None
    assert bandwidth(13.9) == Fraction(139, 10)       # decimal representation, not binary
    assert bandwidth("197/5") == Fraction(197, 5)
    assert bandwidth(64) == 64
    assert bandwidth(Fraction(1, 3000)) == Fraction(1, 3000).limit_denominator(1000)
    for bad in (0, -1, "x", "1/0", True):
        with pytest.raises((ValueError, TypeError)):
            bandwidth(bad)


@pytest.mark.parametrize("preset,clock,want", [
    ("optane", 1000, (305, 90, "197/5", "139/10")),
    ("optane", 100, (31, 9, "394", "139")),
    ("optane", 37.1, (12, 4, "394000/371", "139000/371")),
    ("dram", 1000, (81, 81, "704/5", "704/5")),
    ("ideal", 1000, (40, 40, None, None)),
])
def test_preset_conversion(preset, clock, want):
    """ns rounded up to whole cycles at the clock, GB/s over the clock as exact B/cycle."""
    t = media_timing(preset, clock_mhz=clock)
    assert (t.read_latency, t.write_latency, t.read_bandwidth, t.write_bandwidth) == want


def test_optane_has_the_character_the_issue_asks_for():
    """Optane reads about 3x DRAM latency, writes a fraction of read bandwidth."""
    o, d = media_timing("optane"), media_timing("dram")
    assert 3 <= o.read_latency / d.read_latency < 4
    assert Fraction(o.write_bandwidth) / Fraction(o.read_bandwidth) < Fraction(1, 2)


def test_presets_agree_with_the_system_model():
    """The presets' numbers are the system model's cited parameters (one source of truth for
    the papers' figures; a change on one side must be made on the other)."""
    from trainingcxl.system.params import defaults
    p = defaults()
    o, d = PRESETS["optane"], PRESETS["dram"]
    assert o.read_latency_ns == p["pmem_read_latency_ns"]
    assert o.write_latency_ns == p["pmem_persist_latency_ns"]
    assert o.read_gbps * 1e9 == p["pmem_read_bw"] and o.write_gbps * 1e9 == p["pmem_write_bw"]
    assert d.read_latency_ns == p["dram_latency_ns"] and d.read_gbps * 1e9 == p["dram_bw"]
    for pr in PRESETS.values():
        assert pr.sources, pr.name


def test_overrides_and_checks():
    t = media_timing("optane", read_latency=9, write_bandwidth="none")
    assert (t.read_latency, t.write_latency, t.write_bandwidth) == (9, 90, None)
    assert t.pmem_kwargs() == dict(read_latency=9, write_latency=90,
                                   read_bandwidth=Fraction(197, 5), write_bandwidth=None)
    assert "unlimited" in t.describe() and "optane" in t.describe()
    with pytest.raises(ValueError, match="preset"):
        media_timing("hdd")
    with pytest.raises(ValueError, match="clock_mhz"):
        media_timing("optane", clock_mhz=0)
    with pytest.raises(ValueError, match="read_latency"):
        MediaTiming(0, 1)
    with pytest.raises(ValueError, match="bandwidth"):
        MediaTiming(1, 1, read_bandwidth="0")


def test_train_command_media_options():
    """`trainingcxl train --media ...`: the preset reaches the run parameters, explicit options
    override it, bad values are option errors (exit 2), the default is the old timing."""
    from trainingcxl.train.job import _args
    assert _args([]).media_timing == MediaTiming(40, 40, preset="ideal", clock_mhz=1000.0)
    assert _args(["--latency", "12"]).media_timing.read_latency == 12
    o = _args(["--media", "optane"]).media_timing
    assert (o.read_latency, o.write_latency, o.read_bandwidth, o.write_bandwidth) == \
        (305, 90, "197/5", "139/10")
    o = _args(["--media", "optane", "--media-clock-mhz", "100", "--write-bw", "2/3",
               "--read-latency", "5"]).media_timing
    assert (o.read_latency, o.write_latency, o.read_bandwidth, o.write_bandwidth) == \
        (5, 9, "394", "2/3")
    for bad in (["--read-bw", "0"], ["--media", "hdd"], ["--media-clock-mhz", "-1"],
                ["--write-latency", "0"]):
        with pytest.raises(SystemExit) as e:
            _args(bad)
        assert e.value.code == 2, bad


def test_media_timing_travels_in_run_parameters(tmp_path):
    """TrainParams.media survives the JSON of cosim.params (the simulator reads it back)."""
    from cosim import params
    from cosim.tb.config import BenchConfig
    from sw_model.dlrm import DLRMConfig
    from trainingcxl.train.tb import TrainParams
    m = media_timing("optane", clock_mhz=100, write_bandwidth="2/3")
    p = TrainParams(bench=BenchConfig(), model=DLRMConfig(), batches=1, crashes=[], latency=40,
                    mlp_cycles=0, seed=1, out="o.json", media=m)
    back = params.load(TrainParams, params.write(p, tmp_path / "p.json"))
    assert back.media == m and back.media.pmem_kwargs()["write_bandwidth"] == Fraction(2, 3)
