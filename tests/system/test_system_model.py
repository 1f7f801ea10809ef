"""System model (trainingcxl.system): cycle formulas against recorded RTL measurements, time and
energy accounting, the near-data link-byte advantage, workload descriptions. Pure Python, no
simulator: the RTL figures come from trainingcxl/system/data/rtl_cycles.json, recorded with the
command stored in it (python -m trainingcxl.system.measure)."""
import json
import math
import pathlib

import numpy as np
import pytest

from trainingcxl.system import analysis, cli, cycles, model
from trainingcxl.system.params import CLOCKS, PARAMS, defaults
from trainingcxl.system.workload import (BUILTIN, WorkloadError, builtin, expected_distinct,
                                         from_dict, load)

TOL = 0.05


@pytest.fixture(scope="module")
def doc():
    d = cycles.load_data()
    print(f"RTL measurements: {d['command']!r} ({d['date']}, git {d['git_commit'][:10]})")
    return d


def _role(doc, role):
    return [p for p in doc["points"] if p["role"] == role]


# ---- cycle formulas against the RTL ---------------------------------------------------------
def test_recorded_measurements_are_complete_and_matched_the_golden_model(doc):
    assert doc["command"].startswith("python -m trainingcxl.system.measure")
    assert doc["ok"] is True, doc.get("error")
    assert len(_role(doc, "fit")) >= 10 and len(_role(doc, "held_out")) >= 5
    for p in doc["points"]:
        assert all(r["match"] for r in p["runs"]), (p["point"], [r["mismatch"] for r in p["runs"]])
        assert p["snapshot"]["match"], p["snapshot"]["mismatch"]


def test_held_out_points_are_not_fit_points(doc):
    key = ("latency", "dim", "n_bags", "pooling", "dist", "rows", "snap_bytes")
    fit = {tuple(p[k] for k in key) for p in _role(doc, "fit")}
    assert not any(tuple(p[k] for k in key) in fit
                   for p in cycles._points(doc, cycles.VALIDATION_ROLES))


# Held-out predictions that miss the 5 % target, each with the bound it is held to so a change
# shows: (point, command): bound. None at present; docs/system.md lists any.
KNOWN_MISSES = {}


@pytest.mark.parametrize("command", cycles.COMMANDS)
def test_formula_predicts_held_out_rtl_cycles_within_5_percent(doc, command):
    f = cycles.fit(_role(doc, "fit"))
    rows = [r for r in cycles.validate(doc, f) if r["command"] == command]
    bad = [(r["point"], r["measured"], round(r["predicted"]), f"{r['error']:+.1%}")
           for r in rows if abs(r["error"]) > KNOWN_MISSES.get((r["point"], command), TOL)]
    assert rows and not bad, f"{command}: (point, RTL, predicted, error) {bad}"


def test_known_misses_still_miss(doc):
    """A listed miss that now meets 5 % must be removed from KNOWN_MISSES (and the docs)."""
    rows = {(r["point"], r["command"]): r for r in cycles.validate(doc)}
    for key in KNOWN_MISSES:
        assert abs(rows[key]["error"]) > TOL, (key, rows[key]["error"])


def test_formulas_reproduce_their_fit_points_within_5_percent(doc):
    rows = cycles.validate(doc, role="fit")
    bad = [(r["point"], r["command"], f"{r['error']:+.1%}") for r in rows if abs(r["error"]) > TOL]
    assert not bad, bad


def test_fit_is_deterministic_and_needs_enough_points(doc):
    assert cycles.fit(_role(doc, "fit")) == cycles.default_formulas()
    with pytest.raises(ValueError, match="at least 6"):
        cycles.fit(_role(doc, "fit")[:3])


def test_cli_validate_exits_1_exactly_when_a_held_out_point_misses_5_percent(doc, capsys):
    worst = max(abs(r["error"]) for r in cycles.validate(doc))
    assert cli.main(["--validate"]) == (1 if worst > TOL else 0)
    assert f"{worst:.1%}" in capsys.readouterr().out


def _replay_row_reads(idx, window):
    """Items whose row does not occur among the previous ``window`` items (the UPDATE's row
    stage joins those and reads the rest)."""
    last, reads = {}, 0
    for k, row in enumerate(idx.tolist()):
        reads += row not in last or k - last[row] > window
        last[row] = k
    return reads


@pytest.mark.parametrize("n,rows,dist,dim,latency", [
    (1000, 1 << 18, "zipf", 64, 100), (3000, 4096, "uniform", 16, 30),
    (400, 1 << 20, "zipf", 128, 250), (5000, 50_000, "zipf", 32, 12)])
def test_expected_update_row_reads_match_sampling(seed, n, rows, dist, dim, latency):
    from sw_model.workload import zipf_indices
    rng = np.random.default_rng(seed)
    w = cycles.update_window(dim, latency)
    draws = [_replay_row_reads(rng.integers(0, rows, n) if dist == "uniform" else
                               zipf_indices(rng, n, rows, 1.05, shuffle=True), w)
             for _ in range(20)]
    want = cycles.update_row_reads(lookups=n, dim=dim, latency=latency, rows=rows, dist=dist)
    assert abs(want / np.mean(draws) - 1) < 0.02, (want, np.mean(draws), w)


def test_update_port_term_is_the_reads_for_uniform_rows_and_less_for_repeats():
    """rho = 1 (every item reads its row): n*d plus every gradient line after the first bag's
    and every index line read while rows stream; fewer row reads lose fewer cycles."""
    B, n, d = 64, 4096, 4
    S = (n // 16 - cycles.READ_AHEAD)
    assert math.isclose(cycles.update_body(B, n, 16 * d, 100, n), n * d + (B - 1) * d + S)
    losses = [cycles.update_body(B, n, 16 * d, 100, r) - n * d for r in (n, 0.8 * n, 0.5 * n, 0)]
    assert losses == sorted(losses, reverse=True) and losses[-1] == 0


# ---- expected distinct rows -----------------------------------------------------------------
@pytest.mark.parametrize("n,rows,dist", [(1000, 512, "uniform"), (4096, 1 << 20, "uniform"),
                                         (1024, 1 << 18, "zipf"), (20000, 300_000, "zipf")])
def test_expected_distinct_matches_sampling(seed, n, rows, dist):
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        draws = [len(np.unique(rng.integers(0, rows, n))) for _ in range(20)]
    else:
        p = np.arange(1, rows + 1, dtype=float) ** -1.05
        p /= p.sum()
        draws = [len(np.unique(rng.choice(rows, n, p=p))) for _ in range(20)]
    want = expected_distinct(n, rows, dist, 1.05)
    assert abs(want / np.mean(draws) - 1) < 0.02, (want, np.mean(draws))


# ---- accounting -----------------------------------------------------------------------------
@pytest.mark.parametrize("clock", sorted(CLOCKS))
@pytest.mark.parametrize("wname", sorted(BUILTIN))
def test_time_and_energy_accounting_sums(clock, wname):
    """Totals are the sums of their parts, every part is >= 0, and each energy component equals
    power x time (or energy per bit x bits) recomputed here from the step's busy times and
    bytes."""
    p = defaults(clock)
    w = builtin(wname)
    for s in model.SYSTEMS:
        r = model.step(w, s, p)
        T = r.total_time
        assert all(v >= 0 for v in r.time.values()), (s, r.time)
        assert math.isclose(T, sum(r.time.values()))
        assert math.isclose(r.total_energy, sum(r.energy.values()))
        assert math.isclose(r.energy["cpu"], p["cpu_active_w"] * r.busy["cpu"]
                            + p["cpu_idle_w"] * (T - r.busy["cpu"]))
        assert math.isclose(r.energy["gpu"], p["gpu_active_w"] * r.time["mlp"]
                            + p["gpu_idle_w"] * (T - r.time["mlp"]))
        media = r.media_read / p["pmem_read_bw"] + r.media_write / p["pmem_write_bw"]
        assert math.isclose(r.energy["pmem"], p["pmem_dimm_power_w"] * p["pmem_dimms"] * media)
        assert math.isclose(r.energy["links"],
                            (r.link_bytes + r.pcie_bytes) * 8 * p["link_pj_bit"] * 1e-12)
        assert r.busy["cpu"] <= T + 1e-15 and r.time["mlp"] <= T
        if s == "trainingcxl":
            dev = sum(r.time[k] for k in ("lookup", "log_drain", "update", "commit", "snapshot"))
            assert math.isclose(r.energy["device"], p["device_logic_w"] * dev
                                + p["device_idle_w"] * (T - dev))
            assert r.busy["cpu"] == 0.0


def test_compare_ratios_are_the_ratios_of_the_totals():
    w = builtin("rmc3")
    c = model.compare(w)
    tc = c["results"]["trainingcxl"]
    for b in model.BASELINES:
        assert math.isclose(c["speedup"][b], c["results"][b].total_time / tc.total_time)
        assert math.isclose(c["energy_saving"][b],
                            1 - tc.total_energy / c["results"][b].total_energy)


def test_device_time_never_beats_the_media_or_the_port():
    """The device's LOOKUP time is at least its RTL cycles at the clock and at least the media
    time of the row reads (whole 256-B XPLines)."""
    f = cycles.default_formulas()
    for clock in CLOCKS:
        p = defaults(clock)
        for wn in BUILTIN:
            w = builtin(wn)
            r = model.step(w, "trainingcxl", p)
            L = max(1, round(p["pmem_read_latency_ns"] * 1e-9 * p["clock_hz"]))
            cyc = sum(f.lookup(n_bags=w.batch, lookups=t.lookups(w.batch), dim=t.dim,
                               distinct=t.distinct(w.batch), latency=L) for t in w.tables)
            reads = sum(t.lookups(w.batch) * 256 * math.ceil(t.row_bytes / 256)
                        for t in w.tables)
            assert r.time["lookup"] >= cyc / p["clock_hz"]
            assert r.time["lookup"] >= reads / p["pmem_read_bw"]


# ---- near-data link bytes -------------------------------------------------------------------
@pytest.mark.parametrize("dim", [16, 32, 64, 128])
@pytest.mark.parametrize("batch", [1, 64, 4096])
@pytest.mark.parametrize("rows,dist", [(100, "uniform"), (10**7, "uniform"), (10**7, "zipf"),
                                       (512, "zipf")])
def test_more_pooling_never_lowers_the_near_data_link_advantage(dim, batch, rows, dist):
    w = from_dict({"batch": batch, "mlp_bottom": [13, dim], "mlp_top": [8, 1],
                   "tables": [{"rows": rows, "dim": dim, "pooling": 1, "dist": dist}]})
    prev = -math.inf
    for pooling in [0.5, 1, 1.5, 2, 3, 4, 8, 16, 32, 64, 100, 1000]:
        t = w.with_(pooling=pooling).tables[0]
        adv = (model.link_bytes_table(t, batch, near_data=False)
               - model.link_bytes_table(t, batch, near_data=True))
        assert adv >= prev, (pooling, adv, prev)
        prev = adv


def test_near_data_loses_link_bytes_at_pooling_one():
    """The issue's observation: bags of about one row move more link bytes near-data."""
    w = builtin("criteo-tb")
    t = w.tables[0]
    assert (model.link_bytes_table(t, w.batch, near_data=True)
            > model.link_bytes_table(t, w.batch, near_data=False))


def test_sensitivity_and_studies_run_on_a_small_workload():
    w = builtin("rmc3")
    p = defaults("asic")
    base, rows = analysis.tornado(w, p)
    assert base > 0 and {r["param"] for r in rows} == {n for n, q in PARAMS.items()
                                                       if q.sensitivity}
    cross = analysis.crossover(w, p, "pooling", [1, 4, 16])
    assert [r["pooling"] for r in cross] == [1, 4, 16]
    dev = analysis.scaling_devices(w, p, counts=(1, 2))
    assert dev[1]["time"] <= dev[0]["time"] * 1.01


def test_docs_list_every_parameter_with_its_value():
    from trainingcxl.system.report import param_table
    docs = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "system.md").read_text()
    missing = [line for line in param_table().splitlines() if line not in docs]
    assert not missing, missing


# ---- workload descriptions ------------------------------------------------------------------
GOOD = {"name": "t", "batch": 64, "mlp_bottom": [13, 16], "mlp_top": [32, 1],
        "tables": [{"count": 2, "rows": 1000, "dim": 16, "pooling": 4}]}


def _bad(**kw):
    d = json.loads(json.dumps(GOOD))
    t = kw.pop("table", None)
    d.update(kw)
    if t is not None:
        d["tables"][0].update(t)
    return d


def _drop(key, table=False):
    d = json.loads(json.dumps(GOOD))
    del (d["tables"][0] if table else d)[key]
    return d


BAD = [
    (_bad(batch=0), "batch must be in 1..", "batch"),
    (_bad(batch=2.5), "batch must be an integer", "batch"),
    (_bad(batch="64"), "batch must be an integer", "batch"),
    (_bad(batch=True), "batch must be an integer", "batch"),
    (_bad(lag=0), "lag must be in 1..", "lag"),
    (_bad(name=""), "name must be a non-empty string", "name"),
    (_bad(colour=1), "unknown field 'colour'", "colour"),
    (_drop("batch"), "missing field 'batch'", "batch"),
    (_drop("tables"), "missing field 'tables'", "tables"),
    (_drop("mlp_bottom"), "missing field 'mlp_bottom'", "mlp_bottom"),
    (_drop("mlp_top"), "missing field 'mlp_top'", "mlp_top"),
    (_bad(mlp_bottom=[13]), "mlp_bottom must be a list of at least 2", "mlp_bottom"),
    (_bad(mlp_bottom=[13, 0]), "mlp_bottom[1] must be", "mlp_bottom"),
    (_bad(mlp_top=[]), "mlp_top must be a non-empty list", "mlp_top"),
    (_bad(mlp_top=[32, -1]), "mlp_top[1] must be", "mlp_top"),
    (_bad(tables=[]), "tables must be a non-empty list", "tables"),
    (_bad(tables={"rows": 1}), "tables must be a non-empty list", "tables"),
    (_bad(tables=[3]), "tables[0] must be a table", "tables[0]"),
    (_bad(table={"dim": 24}), "tables[0].dim must be one of (16, 32, 64, 128)", "dim"),
    (_bad(table={"dim": "16"}), "tables[0].dim must be an integer", "dim"),
    (_bad(table={"rows": 0}), "tables[0].rows must be in 1..", "rows"),
    (_bad(table={"pooling": 0}), "tables[0].pooling must be in (0", "pooling"),
    (_bad(table={"pooling": float("nan")}), "tables[0].pooling must be a finite number",
     "pooling"),
    (_bad(table={"count": 0}), "tables[0].count must be in 1..", "count"),
    (_bad(table={"dist": "normal"}), "tables[0].dist must be one of", "dist"),
    (_bad(table={"alpha": -1}), "tables[0].alpha must be in (0", "alpha"),
    (_bad(table={"size": 3}), "tables[0]: unknown field 'size'", "size"),
    (_drop("rows", table=True), "tables[0]: missing field 'rows'", "rows"),
    (_drop("dim", table=True), "tables[0]: missing field 'dim'", "dim"),
    (_drop("pooling", table=True), "tables[0]: missing field 'pooling'", "pooling"),
    (_bad(tables=[{"count": 4096, "rows": 1, "dim": 16, "pooling": 1}] * 2),
     "at most 4096 tables", "tables"),
    ([1, 2], "a workload must be a table/object", "workload"),
]


@pytest.mark.parametrize("desc,message,field", BAD, ids=[f"{i}-{b[2]}" for i, b in
                                                         enumerate(BAD)])
def test_bad_workload_description_names_the_field(desc, message, field):
    with pytest.raises(WorkloadError) as e:
        from_dict(desc)
    assert message in str(e.value) and field in str(e.value), str(e.value)


def test_good_workload_loads_from_toml_and_json(tmp_path):
    (tmp_path / "w.json").write_text(json.dumps(GOOD))
    (tmp_path / "w.toml").write_text(
        'name = "t"\nbatch = 64\nmlp_bottom = [13, 16]\nmlp_top = [32, 1]\n'
        '[[tables]]\ncount = 2\nrows = 1000\ndim = 16\npooling = 4\n')
    a, b = load(tmp_path / "w.json"), load(tmp_path / "w.toml")
    assert a == b and len(a.tables) == 2 and a.tables[0].lookups(64) == 256


@pytest.mark.parametrize("name,text,message", [
    ("w.toml", "batch = ", "is not valid TOML"),
    ("w.json", "{batch: 1}", "is not valid JSON"),
    ("w.yaml", "batch: 1", "suffix must be .toml or .json"),
])
def test_bad_workload_file_gives_a_clear_error(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(WorkloadError, match=message):
        load(tmp_path / name)


def test_missing_workload_file_and_cli_exit_code(tmp_path, capsys):
    with pytest.raises(WorkloadError, match="does not exist"):
        load(tmp_path / "nope.toml")
    (tmp_path / "w.json").write_text(json.dumps(_bad(batch=0)))
    assert cli.main(["--workload", str(tmp_path / "w.json"), "--out", str(tmp_path)]) == 2
    assert "batch must be in 1.." in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def test_add_parser_registers_the_system_subcommand():
    import argparse
    ap = argparse.ArgumentParser(prog="trainingcxl")
    cli.add_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(["system", "--validate", "--clock", "fpga"])
    assert args.command == "system" and args.validate and args.clock == "fpga"
    assert args.func is cli.run
