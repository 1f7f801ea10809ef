"""`python -m hw.gen` argument handling. Its output (the Verilog and a ports manifest that matches
the Verilog's module header) is checked by tests/packaging/test_wheel.py, which runs it as
``trainingcxl verilog`` from an installed wheel: one elaboration of the default device (25-40 s)
serves both checks."""
import pytest

from hw import gen


def test_gen_rejects_unknown_config(tmp_path, capsys):
    """An unknown --config is a clear usage error naming the known ones."""
    with pytest.raises(SystemExit) as e:
        gen.main(["--config", "nope", "--out", str(tmp_path)])
    assert e.value.code == 2 and "known: default" in capsys.readouterr().err
