"""The sw_model mutation runner (trainingcxl.mutate.model): a known-killable mutant of a tiny
fixture package is reported killed and a known-equivalent one survived (or equivalent once
listed), the sample is reproducible from its seed, and bad arguments are refused."""
import json
import textwrap

import pytest

from trainingcxl.mutate import model as mm

# ``label`` is never read, so its mutants (the string changed, the assignment to None) are
# equivalent; ``x * 2`` -> ``x / 2`` and ``2`` -> ``3`` change the result the test checks.
CALC = '''\
def double(x):
    label = "double"
    return x * 2
'''

TEST_CALC = '''\
from tinycalc.calc import double


def test_double():
    assert double(3) == 6
'''


@pytest.fixture
def tiny_project(tmp_path):
    root = tmp_path / "proj"
    (root / "tinycalc").mkdir(parents=True)
    (root / "tinycalc" / "__init__.py").write_text("")
    (root / "tinycalc" / "calc.py").write_text(CALC)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(TEST_CALC)
    (root / "pyproject.toml").write_text(textwrap.dedent('''\
        [tool.pytest.ini_options]
        filterwarnings = ["error"]
        '''))
    return mm.Target(project=root, package="tinycalc", tests=["tests"])




def test_runner_kills_the_arithmetic_mutant_and_keeps_the_unused_label_mutants(tiny_project, tmp_path):
    out = tmp_path / "out"
    report = mm.campaign(tiny_project, sample=None, seed=5, workers=1, out=out, progress=False)
    assert report == json.loads((out / "model.json").read_text())
    verdicts = report["verdicts"]
    assert report["mutants_total"] == report["mutants_run"] == len(verdicts) >= 4
    work = out / "tinycalc-work"
    diffs = {n: mm.mutant_diff(work, n, "tinycalc/calc.py") for n in verdicts}
    divide = [n for n, d in diffs.items() if "+    return x / 2" in d]
    relabel = [n for n, d in diffs.items() if '+    label = "XXdoubleXX"' in d]
    assert len(divide) == 1 and len(relabel) == 1, diffs
    assert verdicts[divide[0]] == "killed"
    assert verdicts[relabel[0]] == "survived"
    survivor = next(e for e in report["not_killed"] if e["mutant"] == relabel[0])
    assert survivor["file"] == "tinycalc/calc.py" and survivor["line"] == 2
    assert report["per_file"]["total"]["killed"] + report["per_file"]["total"]["survived"] \
        == len(verdicts)

    # listing the survivor as equivalent (with a fragment of its mutated line) moves it out of
    # the score's denominator; a fragment that no longer matches leaves it a survivor
    work_codes = report["exit_codes"]
    file_of = {n: "tinycalc/calc.py" for n in verdicts}
    again = mm.judge(tiny_project, work, file_of, work_codes,
                     {relabel[0]: ('"XXdoubleXX"', "label is never read"),
                      divide[0]: ("x / 2", "not a survivor: ignored")})
    assert again["verdicts"][relabel[0]] == "equivalent"
    assert again["verdicts"][divide[0]] == "killed"
    assert again["per_file"]["total"]["equivalent"] == 1
    stale = mm.judge(tiny_project, work, file_of, work_codes, {relabel[0]: ("nowhere", "stale")})
    assert stale["verdicts"][relabel[0]] == "survived"


def test_sample_is_reproducible_from_the_seed():
    names = [f"m{i}" for i in range(100)]
    a = mm.draw_sample(names, 10, seed=7)
    assert a == mm.draw_sample(list(reversed(names)), 10, seed=7)
    assert a != mm.draw_sample(names, 10, seed=8)
    assert len(set(a)) == 10 and set(a) <= set(names)
    assert mm.draw_sample(names, None, seed=7) == sorted(names)
    assert mm.draw_sample(names, 1000, seed=7) == sorted(names)


@pytest.mark.parametrize("argv, message", [
    (["--sample", "0"], "--sample must be a positive number"),
    (["--workers", "0"], "--workers must be at least 1"),
    (["--seed", "-1"], "--seed must be non-negative"),
    (["--sample", "x"], "invalid int value"),
])
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        mm.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
