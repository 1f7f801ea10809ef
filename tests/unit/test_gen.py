"""`python -m hw.gen` writes the Verilog and a ports manifest that matches the Verilog."""
import json
import re

import pytest

from hw import gen


def test_gen_writes_verilog_and_manifest(tmp_path):
    """Every manifest port appears in the module header with its width and direction."""
    assert gen.main(["--out", str(tmp_path)]) == 0
    text = (tmp_path / "trainingcxl_device.v").read_text()
    man = json.loads((tmp_path / "trainingcxl_device.ports.json").read_text())
    assert man["top"] == "trainingcxl_device" and man["config"]["media_data_bits"] == 512
    header = text[text.index("module trainingcxl_device"):]
    header = header[:header.index(");")]
    for p in man["ports"]:
        d = "input" if p["dir"] == "in" else "output"
        w = "" if p["width"] == 1 else rf"\[{p['width'] - 1}:0\] "
        assert re.search(rf"{d} (wire )?{w}{re.escape(p['name'])}\b", text), p
    assert {p["name"] for p in man["ports"]} >= {"clk", "rst", "s_axil__awaddr", "irq", "m2s_req__valid",
                                                "m_axi__rdata"}


def test_gen_rejects_unknown_config(tmp_path, capsys):
    """An unknown --config is a clear usage error naming the known ones."""
    with pytest.raises(SystemExit) as e:
        gen.main(["--config", "nope", "--out", str(tmp_path)])
    assert e.value.code == 2 and "known: default" in capsys.readouterr().err
