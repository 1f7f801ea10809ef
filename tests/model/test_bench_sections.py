"""`trainingcxl bench`'s sections as cluster tasks (trainingcxl/bench/run.py): a captured
section holds everything it printed, its subprocesses' output included, so sections that ran at
the same time on workers print one after the other, and nothing of them reaches the terminal
while they run."""
import subprocess
import sys
import types

from trainingcxl.bench.run import BenchSection, run_section

CHILD = ("import sys; print('child out', flush=True); "
         "print('child err', file=sys.stderr, flush=True)")


def test_captured_section_holds_its_subprocess_output_in_order(monkeypatch, capfd):
    mod = types.ModuleType("trainingcxl.bench.fake_section")

    def main(argv):
        print("python", *argv)
        subprocess.run([sys.executable, "-c", CHILD], check=True)
        print("python err", file=sys.stderr)
        return 3

    mod.main = main
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    got = run_section(BenchSection("fake_section", ("a", "b"), capture=True))
    assert got["rc"] == 3
    assert got["output"].splitlines() == ["python a b", "child out", "child err", "python err"]
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    print("after")                              # the process's own output is back
    assert capfd.readouterr().out == "after\n"
