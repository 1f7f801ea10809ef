"""Campaign guards of ``trainingcxl.mutate.hw``: no draw from uncommitted hw unless asked
(and then recorded), the draw's RTLIL saved with the campaign, and proofs of an old campaign
only against the netlist its cell names came from."""
import gzip
import hashlib
import json
import subprocess

import pytest

from trainingcxl.mutate import hw


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_hw_changes_lists_uncommitted_files_under_hw_only(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "a.py").write_text("x = 1\n")
    (tmp_path / "notes.md").write_text("n\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
    assert hw.hw_changes(tmp_path) == []
    (tmp_path / "hw" / "a.py").write_text("x = 2\n")
    (tmp_path / "hw" / "new.py").write_text("y = 1\n")
    (tmp_path / "notes.md").write_text("changed\n")
    assert sorted(hw.hw_changes(tmp_path)) == [" M hw/a.py", "?? hw/new.py"]


class _Drawn(Exception):
    pass


def _no_draw(*args, **kwargs):
    raise _Drawn


def test_runner_refuses_to_draw_from_dirty_hw_unless_allowed(tmp_path, monkeypatch, capsys):
    """A dirty hw/ stops the draw with exit 2 and the files named; ``--allow-dirty-hw``
    lets it through (the draw is replaced here by one that stops the run)."""
    monkeypatch.setattr(hw, "hw_changes", lambda root=None: [" M hw/dcoh/tracker.py"])
    monkeypatch.setattr(hw, "draw", _no_draw)
    argv = ["--targets", "csr", "--mutants", "1", "--out", str(tmp_path / "c"), "--no-progress"]
    for extra in ([], ["--resume"], ["--report-only"]):
        assert hw.main(argv + extra) == 2
        err = capsys.readouterr().err
        assert "hw/dcoh/tracker.py" in err and "--allow-dirty-hw" in err
    assert not (tmp_path / "c").exists()
    with pytest.raises(_Drawn):
        hw.main(argv + ["--allow-dirty-hw"])


def test_campaign_record_saves_the_rtlil_and_says_whether_hw_was_dirty(tmp_path):
    text = "module \\trainingcxl_csr\nend\n"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    rec = hw.campaign_record(tmp_path, {"csr": (text, key)}, [" M hw/csr/regblock.py"])
    assert rec["hw_dirty"] is True and rec["hw_changes"] == [" M hw/csr/regblock.py"]
    assert rec["rtlil"] == {"csr": {"top": "trainingcxl_csr", "key": key,
                                    "file": "rtlil/csr.il.gz"}}
    assert gzip.open(tmp_path / "rtlil" / "csr.il.gz", "rt").read() == text
    assert len(rec["commit"]) == 40
    assert hw.campaign_record(tmp_path, {"csr": (text, key)}, [])["hw_dirty"] is False


def _today_is(text):
    def today(t):
        return text, hashlib.sha256(text.encode()).hexdigest()[:16]
    return today


def _never(t):
    raise AssertionError("today's RTLIL must not be used when the campaign saved its own")


def test_campaign_rtlil_is_the_saved_one_else_todays_only_when_the_key_matches(tmp_path):
    drawn, now = "module \\trainingcxl_csr\nend\n", "module \\trainingcxl_csr\n  wire \\x\nend\n"
    (d_text, d_key), n_key = _today_is(drawn)("csr"), _today_is(now)("csr")[1]
    rec = hw.campaign_record(tmp_path, {"csr": (d_text, d_key)}, [])
    assert hw.campaign_rtlil(rec, tmp_path, ["csr"], today=_never) == {"csr": (d_text, d_key)}
    # an old campaign: no RTLIL saved; the key recorded in the list file decides
    (tmp_path / "mutants.json").write_text(json.dumps(
        {"designs": {d_key: {"top": "trainingcxl_csr", "mutants": []}}}))
    assert hw.campaign_rtlil({}, tmp_path, ["csr"], today=_today_is(drawn)) == {
        "csr": (d_text, d_key)}
    with pytest.raises(hw.CampaignError, match=f"saved no RTLIL of target csr.*{n_key}.*{d_key}"):
        hw.campaign_rtlil({}, tmp_path, ["csr"], today=_today_is(now))
    with pytest.raises(hw.CampaignError, match="none recorded"):
        hw.campaign_rtlil({}, tmp_path / "elsewhere", ["csr"], today=_today_is(now))
    with gzip.open(tmp_path / "rtlil" / "csr.il.gz", "wt") as f:     # edited after the draw
        f.write(now)
    with pytest.raises(hw.CampaignError, match="changed since the draw"):
        hw.campaign_rtlil(rec, tmp_path, ["csr"], today=_never)


def test_prove_only_refuses_a_campaign_without_rtlil_drawn_from_other_hw(tmp_path, capsys):
    """End to end: a report whose survivor was drawn from a design key today's CSR block
    does not have, and no RTLIL saved: ``--prove-only`` stops with exit 2 before any proof."""
    m = {"id": 1, "target": "csr", "block": "CSR", "src": "hw/csr/regblock.py:1",
         "outcome": "survived", "mode": "inv",
         "cmd": "-mode inv -module trainingcxl_csr -cell $1 -port A -portbit 0"}
    (tmp_path / "hw.json").write_text(json.dumps(
        {"seed": 1, "targets": ["csr"], "builds": {}, "mutants": [m]}))
    (tmp_path / "mutants.json").write_text(json.dumps(
        {"designs": {"0" * 16: {"top": "trainingcxl_csr", "mutants": [[1, m["cmd"]]]}}}))
    assert hw.main(["--out", str(tmp_path), "--prove-only", "--prove-timeout", "5"]) == 2
    err = capsys.readouterr().err
    assert "saved no RTLIL of target csr" in err and "0" * 16 in err
    assert "proof" not in json.loads((tmp_path / "hw.json").read_text())["mutants"][0]
