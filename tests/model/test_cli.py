"""The ``trainingcxl`` console script (trainingcxl/cli.py): every command answers --help, unknown
commands and bad options exit 2 with a message, the script is installed."""
import shutil
import subprocess
import sys

import pytest

from trainingcxl import cli


@pytest.mark.parametrize("cmd", sorted(cli.COMMANDS))
def test_every_command_has_help(cmd, capsys):
    assert cli.main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage" in out.lower() or cmd in out, out[:200]


def test_top_level_help_lists_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for cmd in cli.COMMANDS:
        assert cmd in out


def test_no_command_and_unknown_command_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["trian"]) == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["train", "--batches", "0"], ["train", "--rows", "a,b"],
                                  ["train", "--dim", "24"], ["train", "--crashes", "9",
                                                             "--batches", "5"],
                                  ["study", "--lags", "x"], ["crash", "--points", "-1"],
                                  ["train", "--data", "/nonexistent.npz"],
                                  ["fuzz", "--surface", "cxl", "--pmem", "cpp"],
                                  ["fuzz", "--surface", "cxl", "--profile"],
                                  ["crash", "--set", "log_slots=3"],
                                  ["crash", "--set", "log_size=x"],
                                  ["crash", "--set", "log_size=100"],
                                  ["crash", "--workload", "extnded"],
                                  ["crash", "--workload", '{"n_bag": 3}'],
                                  ["crash", "--workload", '{"init": "some"}'],
                                  ["crash", "--config", "fpga-ecp5", "--set", "log_size=5760",
                                   "--workload", "default"]])
def test_bad_options_exit_2_with_a_message(argv, capsys):
    assert cli.main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_data_generate_and_info(tmp_path, capsys):
    f = tmp_path / "d.npz"
    assert cli.main(["data", "generate", str(f), "--batches", "2", "--batch-size", "8"]) == 0
    assert cli.main(["data", "info", str(f)]) == 0
    assert "16 samples" in capsys.readouterr().out
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    assert cli.main(["data", "info", str(bad)]) == 1


def test_console_script_installed():
    exe = shutil.which("trainingcxl", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert exe, "trainingcxl not installed in the venv (pip install -e .)"
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "train" in r.stdout


def test_commands_are_the_documented_set():
    """The command list is part of the interface (README, docs): renaming or dropping one is a
    deliberate change, made here too."""
    assert list(cli.COMMANDS) == ["train", "study", "data", "compare", "crash", "test", "coverage",
                                  "bench", "verilog", "synth", "fuzz", "faults", "stress", "shade",
                                  "system", "lookup-demo"]
