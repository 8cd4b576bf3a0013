"""Every example in the README runs as written: the command-line block top to bottom (in a fresh
folder holding only the set-up's .venv and the example factory), and the library snippet."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _block(after: str, language: str) -> str:
    section = README[README.index(after) :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert match, f"no {language} block after {after!r}"
    return match.group(1)


@pytest.mark.slow
def test_command_line_examples_run_in_order(tmp_path):
    script = _block("## Command line", "bash")
    assert ".venv/bin/partition-explorer" in script and "my_models:build" in script
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["mode"] == "cost_aware" and len(plan["partitions"]) > 1
    big = json.loads((tmp_path / "big_plan.json").read_text())
    assert big["model"] == "transformer(n_layer=8)" and len(big["partitions"]) > 1  # as its comment says
    assert "node(s) moved between partitions" in done.stdout and "no differences" not in done.stdout
    assert (tmp_path / "plan.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert json.loads((tmp_path / "split.json").read_text())["split_spec"]
    assert "forced: the model fits one device" in done.stdout  # the factory's plan says how it spread


@pytest.mark.slow
def test_library_snippet_runs():
    code = _block("## The library", "python")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_optimal_snippet_runs():
    code = _block("### Cost models", "python")
    assert 'mode="optimal"' in code
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CP-SAT searched" in done.stdout
    assert "of the best possible" in done.stdout or "optimal: no plan can beat" in done.stdout


@pytest.mark.slow
def test_hugging_face_examples_run(tmp_path):
    _run_block("## Hugging Face models", tmp_path)
    plan = json.loads((tmp_path / "llama_plan.json").read_text())
    assert plan["model"] == "hf:llama-3-8b(dtype=bf16)" and len(plan["partitions"]) >= 2
    device_map = json.loads((tmp_path / "device_map.json").read_text())["device_map"]
    assert set(device_map.values()) == {0, 1} and any(k.startswith("model.layers.") for k in device_map)


def _run_block(after: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The section's bash block, in a fresh folder holding only the set-up's .venv."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _block(after, "bash")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_real_run_example_runs(tmp_path):
    done = _run_block("## Running a plan for real", tmp_path)
    assert "outputs equal the model" in done.stdout and "calibrated on this machine" in done.stdout


@pytest.mark.slow
def test_pipeline_examples_run(tmp_path):
    done = _run_block("## Pipelines", tmp_path)
    pipe = json.loads((tmp_path / "pipe.json").read_text())
    assert pipe["kind"] == "pipeline" and len(pipe["stages"]) == 4 and pipe["training"] == "adam"
    assert "outputs equal the model in one process; gradients equal the model's" in done.stdout
    assert json.loads((tmp_path / "pipe_split.json").read_text())["num_stages"] == 2


@pytest.mark.slow
def test_training_memory_examples_run(tmp_path):
    done = _run_block("## Training memory", tmp_path)
    assert "recomputed:" in done.stdout
    results = json.loads((tmp_path / "remat.json").read_text())["results"]
    assert [r["budget"] for r in results] == [i / 10 for i in range(11)] and all(r["gradients_equal"] for r in results)


@pytest.mark.slow
def test_sharding_examples_run(tmp_path):
    done = _run_block("## Sharding", tmp_path)
    assert "as predicted" in done.stdout and "outputs equal the model" in done.stdout
    report = json.loads((tmp_path / "shard.json").read_text())
    assert (
        report["spec"]["blocks.0.mlp.c_fc.bias"] == "2"
        and report["styles"]["blocks.0.mlp.c_proj"]["style"] == "rowwise"
    )


def _run_bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a README bash block in ``tmp_path`` with this interpreter's venv as ``.venv``."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_cluster_run_example_runs(tmp_path):
    done = _run_bash(_block("`--run LAYOUT` runs", "bash"), tmp_path)
    assert "gradients equal: yes" in done.stdout and "equals one process's" in done.stdout


@pytest.mark.slow
def test_cluster_examples_run(tmp_path):
    done = _run_bash(_block("## Planning a cluster", "bash"), tmp_path)
    assert done.stdout.count("fewest devices:") == 3 and "cheapest:" in done.stdout
    assert "dp2 tp2 pp2 1f1b mb2 zero1 on 8 x a100-40gb" in done.stdout  # the opened layout
    assert "all-reduce of the hidden state" in done.stdout and "send of the hidden state" in done.stdout
    import tomllib

    titan = tomllib.loads((tmp_path / "titan.toml").read_text())
    assert titan["parallelism"]["tensor_parallel_degree"] >= 1


def _written(script: str) -> list[str]:
    """The files a bash block writes (``--out F``, ``--...-out F``, ``> F``), in order."""
    return re.findall(r"(?:--(?:[a-z-]+-)?out|>)\s+([\w./-]+\.\w+)", script)


def test_readme_examples_never_overwrite_an_earlier_examples_file():
    """Run in order in one clone, a later example must not replace a file an earlier one made (and
    that the text may still speak of)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    seen: dict[str, int] = {}
    for i, block in enumerate(blocks):
        for name in _written(block):
            assert seen.setdefault(name, i) == i, f"{name} is written by README bash blocks {seen[name]} and {i}"
    assert "split.json" in seen and "plan.json" in seen


def test_readme_command_line_examples_each_say_what_they_show():
    lines = [line for line in _block("## Command line", "bash").splitlines() if line.strip()]
    for before, line in zip([""] + lines, lines):
        if line.startswith(".venv/"):
            assert before.startswith("#") or before.startswith(".venv/"), line  # a comment opens each group
    assert lines[0].startswith("#")


def test_readme_examples_write_only_git_ignored_files():
    """Run from the repository root, the examples leave nothing git would see: every file a bash
    block writes is ignored (.gitignore), so `git status` stays clean."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    written = sorted({name for block in blocks for name in _written(block)})
    assert "plan.json" in written and "titan.toml" in written
    done = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True)
    ignored = set(done.stdout.split())
    assert ignored == set(written), f"README examples write files git would track: {sorted(set(written) - ignored)}"


def test_no_machine_profile_is_tracked():
    """A profile measured on one machine (profiles/local.json under a cache folder) prices another
    machine wrongly: none is in the repository."""
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    local = [p for p in done.stdout.splitlines() if p.endswith("profiles/local.json")]
    assert not local, f"a machine's profile is committed: {local}; git rm it"
