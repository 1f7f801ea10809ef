"""Stimulus recordings (cosim.trace.stimulus) and their C++ replay (verilator_speed --load):
manifest checks and the generated port code. The replay itself is checked cycle by cycle
against the recording by the benchmark (every output of every cycle)."""
import json

import pytest

from cosim.trace.stimulus import FORMAT, StimulusError, load_manifest
from trainingcxl.bench.verilator_speed import _port_words, replay_cpp, write_init

PORTS_IN = [{"name": "rst", "width": 1, "words": 1},
            {"name": "m_axi__rdata", "width": 128, "words": 4},
            {"name": "s_axil__awaddr", "width": 40, "words": 2}]
PORTS_OUT = [{"name": "irq", "width": 1, "words": 1},
             {"name": "s2m_drs__payload", "width": 99, "words": 4}]


def _write(tmp_path, n, in_words=7, out_words=5, **over):
    """A recording of ``n`` cycles whose manifest fields ``over`` replace."""
    man = {"format": FORMAT, "version": 1, "top": "trainingcxl_device", "config": {},
           "inputs": PORTS_IN, "outputs": PORTS_OUT, "cycles": n, "init": [0] * 7}
    man.update(over)
    (tmp_path / "stimulus.json").write_text(json.dumps(man))
    (tmp_path / "inputs.bin").write_bytes(bytes(4 * in_words * n))
    (tmp_path / "outputs.bin").write_bytes(bytes(4 * out_words * n))
    return man


def test_manifest_accepts_consistent_recording(tmp_path):
    _write(tmp_path, 3)
    assert load_manifest(tmp_path)["cycles"] == 3


@pytest.mark.parametrize("bad, match", [
    (dict(format="other"), "format 'other'"),
    (dict(version=2), "version 2"),
    (dict(cycles=4), "inputs.bin: 84 bytes, expected 112"),
])
def test_manifest_errors_name_the_problem(tmp_path, bad, match):
    _write(tmp_path, 3, **bad)
    with pytest.raises(StimulusError, match=match):
        load_manifest(tmp_path)


def test_missing_recording_is_a_clear_error(tmp_path):
    with pytest.raises(StimulusError, match="not a stimulus recording"):
        load_manifest(tmp_path / "nothing")


def test_port_words_follow_verilator_types():
    code, words = _port_words(PORTS_IN, "w", "in")
    assert words == 7
    assert "top->rst = w[0];" in code
    assert "top->m_axi___05Frdata[i] = w[1 + i];" in code           # VlWide, 4 words
    assert "top->s_axil___05Fawaddr = ((uint64_t)w[5] | ((uint64_t)w[6] << 32));" in code
    code, words = _port_words(PORTS_OUT, "w", "out")
    assert words == 5
    assert "if ((uint64_t)top->irq != (uint64_t)w[0]) return 0;" in code
    assert "if (top->s2m_drs___05Fpayload[i] != w[1 + i]) return 1;" in code


def test_replay_main_reads_the_files_and_applies_init(tmp_path):
    man = {"inputs": PORTS_IN, "outputs": PORTS_OUT, "init": [1, 2, 3, 4, 5, 6, 2**32 - 1]}
    cpp = replay_cpp(man)
    assert replay_cpp(dict(man, init=[0] * 7)) == cpp        # one build for every recording
    assert '"/init.bin", 7' in cpp and "apply(top, init.data());" in cpp
    write_init(tmp_path, man)
    assert (tmp_path / "init.bin").read_bytes() == b"".join(
        x.to_bytes(4, "little") for x in man["init"])
    assert '"/inputs.bin", (size_t)cycles * 7' in cpp
    assert '"/outputs.bin", (size_t)cycles * 5' in cpp
    assert 'out_names[] = {"irq", "s2m_drs__payload"}' in cpp
