"""Importing every sw_model module loads neither amaranth nor cocotb, nor any hw module but the
pure-Python shared encodings (hw.config, hw.encodings, hw.cxl_encodings, and the register map
loader hw.csr.regmap, which reads the generated JSON)."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sw_model_imports_no_amaranth_cocotb_or_other_hw_modules():
    # every module of the package, found on disk (a new module cannot be forgotten here)
    mods = sorted(p.stem for p in (ROOT / "sw_model").glob("*.py") if p.stem != "__init__")
    assert {"training", "dlrm", "clicklog", "embedding_device"} <= set(mods), mods
    code = ("import sys, importlib, sw_model\n"
            f"for m in {mods!r}: importlib.import_module('sw_model.' + m)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('amaranth', 'cocotb', 'hw')))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "['hw', 'hw.config', 'hw.csr', 'hw.csr.regmap', 'hw.cxl_encodings', 'hw.encodings']", r.stdout + r.stderr
