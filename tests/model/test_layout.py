"""The layout keeps its rooms: docs/architecture.md's map names folders that exist and every
package folder of cosim/ and trainingcxl/; cosim/ holds no cocotb test and no command line."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _map_folders() -> set:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    return {m.rstrip("/") for m in re.findall(r"^\| `([\w/]+/)` \|", section, re.M)}


def test_map_folders_exist():
    folders = _map_folders()
    assert {"hw", "sw_model", "cosim", "trainingcxl", "tests/cosim"} <= folders, folders
    missing = sorted(f for f in folders if not (ROOT / f).is_dir())
    assert not missing, f"docs/architecture.md names folders that do not exist: {missing}"


def test_every_cosim_and_trainingcxl_package_is_on_the_map():
    folders = _map_folders()
    for top in ("cosim", "trainingcxl"):
        for init in (ROOT / top).glob("*/__init__.py"):
            rel = init.parent.relative_to(ROOT).as_posix()
            assert rel in folders, f"{rel} is not on docs/architecture.md's map"


def test_cosim_has_no_tests_and_no_command_line():
    bad = []
    for f in (ROOT / "cosim").rglob("*.py"):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"@cocotb\.test|def main\(|__main__", line):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)
