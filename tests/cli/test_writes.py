"""Where the command line writes: never over one of the command's own input files (exit 2, both
paths named), atomically (a failed write leaves the old file whole), and nothing at all for a plan
that breaks a rule (``export`` and ``render`` run ``check``'s validation first: exit 1)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
from cli_helpers import MODEL

from cli import inputs
from cli.inputs import CLIError, write_output
from cli.main import main


@pytest.fixture(scope="module")
def plan_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", *MODEL, "--devices", "4x28KiB", "--out", str(path)]) == 0
    return path.read_text()


@pytest.fixture
def plan_file(tmp_path: Path, plan_text: str) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(plan_text)
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["render", "{plan}", "--out", "{plan}"],
        ["render", "{plan}", "--format", "dot", "--out", "{dir}/../{dirname}/plan.json"],  # another spelling
        ["export", "{plan}", "--kind", "fx-aot", "--out", "{plan}"],
        ["check", "{plan}", *MODEL, "--node-latency", "{plan}"],  # reads only: no output, no refusal here
    ],
)
def test_an_output_over_an_input_is_refused_and_the_input_kept(argv, plan_file, capsys):
    text = plan_file.read_text()
    argv = [a.format(plan=plan_file, dir=plan_file.parent, dirname=plan_file.parent.name) for a in argv]
    code = main(argv)
    err = capsys.readouterr().err
    assert plan_file.read_text() == text
    if argv[0] == "check":
        assert code == 2 and "same file" not in err  # a bad node-latency file, not an overwrite
        return
    assert code == 2, err
    assert "is the same file as the input PLAN" in err and "write to another file" in err
    assert err.count(plan_file.name) >= 2  # both paths named


def test_two_outputs_on_one_file_are_refused(tmp_path, capsys):
    out = tmp_path / "both.json"
    assert main(["plan", *MODEL, "--out", str(out), "--export", "fx-aot", "--export-out", str(out)]) == 2
    assert "--export-out" in capsys.readouterr().err and not out.exists()


def test_export_and_render_refuse_a_plan_check_refuses(plan_file, tmp_path, capsys):
    raw = json.loads(plan_file.read_text())
    raw["partitions"][0]["device_ids"] = []  # a partition with no device
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    out = tmp_path / "out.json"
    assert main(["check", str(bad), *MODEL]) == 1  # the reference: check's verdict
    for argv in (
        ["export", str(bad), "--kind", "fx-aot", "--out", str(out)],
        ["export", str(bad), *MODEL, "--kind", "fx-aot", "--out", str(out)],
        ["render", str(bad), "--format", "dot", "--out", str(out)],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "partition 0 has no device" in err and "Nothing was written" in err
        assert not out.exists()


def test_export_with_the_model_refuses_a_plan_missing_a_node(plan_file, tmp_path, capsys):
    raw = json.loads(plan_file.read_text())
    dropped = raw["partitions"][0]["node_names"].pop(0)
    bad = tmp_path / "missing.json"
    bad.write_text(json.dumps(raw))
    out = tmp_path / "aot.json"
    assert main(["export", str(bad), *MODEL, "--kind", "fx-aot", "--out", str(out)]) == 1
    assert dropped in capsys.readouterr().err and not out.exists()
    assert main(["export", str(plan_file), *MODEL, "--kind", "fx-aot", "--out", str(out)]) == 0  # the valid plan
    assert json.loads(out.read_text())["node_to_partition"]


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("the old plan\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(inputs.os, "fsync", full)
    with pytest.raises(CLIError, match="No space left on device; nothing was changed there"):
        write_output(str(target), "x" * 100_000, "plan")
    assert target.read_text() == "the old plan\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umasks(tmp_path):
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o640)
    write_output(str(old), '{"a": 1}', "plan")
    assert old.read_text() == '{"a": 1}\n' and stat.S_IMODE(old.stat().st_mode) == 0o640
    new = tmp_path / "new.svg"
    write_output(str(new), b"<svg/>", "drawing")
    umask = os.umask(0)
    os.umask(umask)
    assert new.read_bytes() == b"<svg/>" and stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask
    write_output(os.devnull, "to a device, in place", "plan")  # not replaced by a regular file
    assert not Path(os.devnull).is_file()
