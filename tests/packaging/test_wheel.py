"""The project installs from a wheel and works outside the source tree.

A copy of the project's sources is built into a wheel offline (``pip wheel --no-deps
--no-build-isolation --no-index``, setuptools from this environment), the wheel is installed
into a fresh virtual environment, and ``trainingcxl verilog`` and a two-batch ``trainingcxl
train`` run from an unrelated temporary directory. The Verilog's ports manifest must match its
module header (the check of ``hw.gen``'s output lives here rather than in tests/unit, so the
default device is elaborated once for both).

The fresh environment is created ``--without-pip`` and is not given the system or this
environment's site directory: it gets a ``.pth`` line naming this environment's site-packages,
so the pinned third-party packages are found (nothing downloads), while a path line does not run
that directory's own ``.pth`` files, so this checkout's editable install stays invisible. The
wheel itself is installed into the fresh environment's own site-packages, which comes first:
every project module, and the register map's package data, must come from the wheel. The test
checks that (the imported files are under the fresh environment) before the commands run.

Cost: building and installing the wheel takes seconds; ``trainingcxl verilog`` elaborates the
device (about 20 s); the train run simulates two batches on the Verilator build of
``DeviceConfig()`` with the C++ PMEM model (the train job's default). That build is made (or
found) by this process first, through the same content-addressed cache the installed copy uses
(its key names the Verilog, the C++ model's source, the tool versions and cocotb's library
directory, all shared), so it is the one the crash smoke uses, paid once per machine, not by the
installed command.
"""
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from cosim import build as cb
from hw.config import DeviceConfig

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "hw", "sw_model", "cosim", "trainingcxl")


def _run(cmd, *, cwd, env, timeout):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python, trainingcxl script, env) of a fresh environment holding only the wheel."""
    cb.device_build(DeviceConfig())   # the shared simulator build (docstring)
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        p = ROOT / name
        (shutil.copytree(p, src / name, ignore=ignore) if p.is_dir()
         else shutil.copy2(p, src / name))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", dist, src], cwd=tmp, env=env, timeout=300)
    (whl,) = dist.glob("trainingcxl-*.whl")

    venv = tmp / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip",
          venv], cwd=tmp, env=env, timeout=120)
    py = venv / "bin" / "python"
    fresh_site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                      "['purelib'])"], capture_output=True, text=True,
                                     check=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["purelib"])
    assert ours in map(Path, site.getsitepackages()), ours
    (fresh_site / "project_deps.pth").write_text(f"{ours}\n")
    _run([py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", whl], cwd=tmp, env=env,
         timeout=300)
    return py, venv / "bin" / "trainingcxl", env, fresh_site


@pytest.mark.cosim
def test_wheel_install_runs_verilog_and_train(installed, tmp_path):
    py, script, env, fresh_site = installed
    work = tmp_path / "elsewhere"
    work.mkdir()
    # every project package and the register map come from the wheel, not this checkout
    r = _run([py, "-c", "import json, hw.csr.regmap as r, hw, sw_model, cosim, trainingcxl; "
              "print(json.dumps([m.__file__ for m in (hw, sw_model, cosim, trainingcxl)]"
              " + [str(r.RDL_PATH), str(len(r.regmap_document()['registers']))]))"],
             cwd=work, env=env, timeout=120)
    *files, rdl, n_regs = json.loads(r.stdout)
    for f in files + [rdl]:
        assert Path(f).is_relative_to(fresh_site), f"{f} not from the wheel ({fresh_site})"
    assert int(n_regs) > 10

    r = _run([script, "verilog", "--out", "v"], cwd=work, env=env, timeout=600)
    text = (work / "v" / "trainingcxl_device.v").read_text()
    assert "module trainingcxl_device" in text, r.stdout
    _check_ports_manifest(text, json.loads((work / "v" / "trainingcxl_device.ports.json")
                                           .read_text()))

    r = _run([script, "train", "--batches", "2", "--crashes", "0", "--eval-batches", "1",
              "--mlp-cycles", "50", "--quiet", "--out", "report"], cwd=work, env=env,
             timeout=1800)
    rep = json.loads((work / "report" / "summary.json").read_text())
    assert rep["twin_equal"] and rep["batches"] == 2 and not rep["crashes"], rep
    assert (work / "report" / "report.md").stat().st_size > 0
    # run directories and reports landed under the working directory, not in the source tree
    assert not (fresh_site / "build").exists()


def _check_ports_manifest(text, man):
    """The manifest of ``trainingcxl verilog`` (hw.gen) describes the default configuration,
    and every port it lists is in the module's port list and declared with its width and
    direction."""
    assert man["top"] == "trainingcxl_device" and man["config"]["media_data_bits"] == 512
    header = text[text.index("module trainingcxl_device"):]
    header = header[:header.index(");")]           # the port list; declarations follow it
    for p in man["ports"]:
        d = "input" if p["dir"] == "in" else "output"
        w = "" if p["width"] == 1 else rf"\[{p['width'] - 1}:0\] "
        assert re.search(rf"[(,\s]{re.escape(p['name'])}(?:[,\s]|$)", header), p
        assert re.search(rf"{d} (wire )?{w}{re.escape(p['name'])}\b", text), p
    assert {p["name"] for p in man["ports"]} >= {"clk", "rst", "s_axil__awaddr", "irq",
                                                "m2s_req__valid", "m_axi__rdata"}
