"""Every example of the documentation runs as written: the README and every page under docs/.
The examples with something to check are run by a test of their own (the command-line block top
to bottom, in a fresh folder holding only the set-up's .venv and the example factory; the library
snippets; each technique's commands); every other bash or python block of any page, a page added
later included, is run by ``test_other_examples_run`` (a page's bash blocks in order in one fresh
folder, its python blocks from the repository root), so no example goes untested."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_helpers import run_bash

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md"] + sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
BLOCK = re.compile(r"^```(bash|python)\n(.*?)^```", re.S | re.M)

# The blocks a test of their own runs: (page, the text the block follows, language).
CLAIMED = {
    ("docs/cli.md", "# Command line", "bash"),
    ("docs/library.md", "# The library", "python"),
    ("docs/library.md", "## Cost models", "python"),
    ("docs/hugging-face.md", "# Hugging Face models", "bash"),
    ("docs/running.md", "# Running a plan for real", "bash"),
    ("docs/pipelines.md", "# Pipelines", "bash"),
    ("docs/training-memory.md", "# Training memory", "bash"),
    ("docs/sharding.md", "# Sharding", "bash"),
    ("docs/cluster.md", "# Planning a cluster", "bash"),
    ("docs/cluster.md", "`--run LAYOUT` runs", "bash"),
}


def _text(page: str) -> str:
    return (ROOT / page).read_text()


def _find(page: str, after: str, language: str) -> re.Match:
    text = _text(page)
    assert after in text, f"{page} has no {after!r}"
    match = BLOCK.search(text, text.index(after))
    while match and match.group(1) != language:
        match = BLOCK.search(text, match.end())
    assert match, f"no {language} block after {after!r} in {page}"
    return match


def _block(page: str, after: str, language: str) -> str:
    return _find(page, after, language).group(2)


def _all_blocks() -> list[tuple[str, int, str, str]]:
    """Every bash and python block of every page: (page, offset, language, code), in page order."""
    return [(page, m.start(), m.group(1), m.group(2)) for page in PAGES for m in BLOCK.finditer(_text(page))]


def _unclaimed() -> dict[str, list[tuple[str, str]]]:
    claimed = {(page, _find(page, after, language).start()) for page, after, language in CLAIMED}
    found: dict[str, list[tuple[str, str]]] = {}
    for page, start, language, code in _all_blocks():
        if (page, start) not in claimed:
            found.setdefault(page, []).append((language, code))
    return found


def test_the_readme_first_screen_says_what_it_is_for_shows_the_app_and_gives_the_two_commands():
    """The first screen (its first 20 lines): the purpose, the picture kept in the repository, and
    the two commands CI runs (.ci/run runs the test one verbatim)."""
    head = "\n".join(_text("README.md").splitlines()[:20])
    assert "before you buy, book or deploy" in head
    picture = re.search(r"!\[[^\]]+\]\((docs/img/[\w.-]+\.png)\)", head)
    assert picture and (ROOT / picture.group(1)).stat().st_size > 20_000
    start = "bash scripts/setup.sh && .venv/bin/streamlit run explorer/app.py"
    test = 'bash scripts/setup.sh --test && .venv/bin/python -m pytest -q -m "not slow" -n auto'
    assert f"    {start}\n" in head and f"    {test}\n" in head
    assert test in (ROOT / ".ci" / "run").read_text()
    assert len(_text("README.md").splitlines()) < 80  # the reference lives in docs/


def test_every_docs_page_is_linked_from_the_readme_and_every_link_resolves():
    readme = _text("README.md")
    for page in PAGES[1:]:
        assert f"({page})" in readme, f"the README does not link {page}"
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+\.(?:md|png))\)", _text(page)):
            assert (ROOT / page).parent.joinpath(target).resolve().exists(), f"{page} links a missing {target}"


def test_every_claimed_example_exists_and_other_blocks_are_run_generically():
    """Each test's block is where it says (``_find`` fails naming the page otherwise), and the blocks no
    test claims are exactly what ``test_other_examples_run`` runs (today: the GPU and review pages')."""
    unclaimed = _unclaimed()
    assert sum(len(blocks) for blocks in unclaimed.values()) + len(CLAIMED) == len(_all_blocks())
    assert "docs/gpu.md" in unclaimed and "@graphs" in unclaimed["docs/gpu.md"][0][1]


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(_unclaimed()))
def test_other_examples_run(page, tmp_path):
    """The page's blocks no other test runs: bash in order in one fresh folder holding the set-up's
    .venv and the example factory, python from the repository root."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    for language, code in _unclaimed()[page]:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "bash" else [sys.executable, "-c", code]
        done = subprocess.run(
            command,
            cwd=tmp_path if language == "bash" else ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": ""} if language == "bash" else None,
        )
        assert done.returncode == 0, f"{page}:\n{code}\n" + done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_command_line_examples_run_in_order(tmp_path):
    script = _block("docs/cli.md", "# Command line", "bash")
    assert ".venv/bin/partition-explorer" in script and "my_models:build" in script
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    done = run_bash(script, tmp_path)
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
    code = _block("docs/library.md", "# The library", "python")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_optimal_snippet_runs():
    code = _block("docs/library.md", "## Cost models", "python")
    assert 'mode="optimal"' in code
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CP-SAT searched" in done.stdout
    assert "of the best possible" in done.stdout or "optimal: no plan can beat" in done.stdout


@pytest.mark.slow
def test_hugging_face_examples_run(tmp_path):
    _run_block("docs/hugging-face.md", "# Hugging Face models", tmp_path)
    plan = json.loads((tmp_path / "llama_plan.json").read_text())
    assert plan["model"] == "hf:llama-3-8b(dtype=bf16)" and len(plan["partitions"]) >= 2
    device_map = json.loads((tmp_path / "device_map.json").read_text())["device_map"]
    assert set(device_map.values()) == {0, 1} and any(k.startswith("model.layers.") for k in device_map)


def _run_block(page: str, after: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The section's bash block, in a fresh folder holding only the set-up's .venv."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", _block(page, after, "bash")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_real_run_example_runs(tmp_path):
    done = _run_block("docs/running.md", "# Running a plan for real", tmp_path)
    assert "outputs equal the model" in done.stdout and "calibrated on this machine" in done.stdout


@pytest.mark.slow
def test_pipeline_examples_run(tmp_path):
    done = _run_block("docs/pipelines.md", "# Pipelines", tmp_path)
    pipe = json.loads((tmp_path / "pipe.json").read_text())
    assert pipe["kind"] == "pipeline" and len(pipe["stages"]) == 4 and pipe["training"] == "adam"
    assert "outputs equal the model in one process; gradients equal the model's" in done.stdout
    assert json.loads((tmp_path / "pipe_split.json").read_text())["num_stages"] == 2


@pytest.mark.slow
def test_training_memory_examples_run(tmp_path):
    done = _run_block("docs/training-memory.md", "# Training memory", tmp_path)
    assert "recomputed:" in done.stdout
    results = json.loads((tmp_path / "remat.json").read_text())["results"]
    assert [r["budget"] for r in results] == [i / 10 for i in range(11)] and all(r["gradients_equal"] for r in results)


@pytest.mark.slow
def test_sharding_examples_run(tmp_path):
    done = _run_block("docs/sharding.md", "# Sharding", tmp_path)
    assert "as predicted" in done.stdout and "outputs equal the model" in done.stdout
    report = json.loads((tmp_path / "shard.json").read_text())
    assert (
        report["spec"]["blocks.0.mlp.c_fc.bias"] == "2"
        and report["styles"]["blocks.0.mlp.c_proj"]["style"] == "rowwise"
    )


@pytest.mark.slow
def test_cluster_run_example_runs(tmp_path):
    done = run_bash(_block("docs/cluster.md", "`--run LAYOUT` runs", "bash"), tmp_path)
    assert "gradients equal: yes" in done.stdout and "equals one process's" in done.stdout


@pytest.mark.slow
def test_cluster_examples_run(tmp_path):
    done = run_bash(_block("docs/cluster.md", "# Planning a cluster", "bash"), tmp_path)
    assert done.stdout.count("fewest devices:") == 3 and "cheapest:" in done.stdout
    assert "dp2 tp2 pp2 1f1b mb2 zero1 on 8 x a100-40gb" in done.stdout  # the opened layout
    assert "all-reduce of the hidden state" in done.stdout and "send of the hidden state" in done.stdout
    import tomllib

    # The TOML is the layout the last command printed as fastest, in Llama-3-8B's bf16 at its batch.
    label = re.findall(r"^fastest: \d+ devices, (.+?): step", done.stdout, re.M)[-1]
    words = {k: int(v) for k, v in re.findall(r"\b(dp|tp|pp|shard)(\d+)\b", label)}
    titan = tomllib.loads((tmp_path / "titan.toml").read_text())
    par = titan["parallelism"]
    assert par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == words["dp"], (label, par)
    assert par["data_parallel_shard_degree"] == words.get("shard", par["data_parallel_shard_degree"]), (label, par)
    assert (par["tensor_parallel_degree"], par["pipeline_parallel_degree"]) == (words["tp"], words["pp"]), label
    assert titan["training"]["mixed_precision_param"] == "bfloat16"  # --dtype bf16


def _written(script: str) -> list[str]:
    """The files a bash block writes (``--out F``, ``--...-out F``, ``--export F``, ``> F``), in order."""
    return re.findall(r"(?:--(?:[a-z-]+-)?out|--export|>)\s+([\w./-]+\.\w+)", script)


def test_examples_never_overwrite_an_earlier_examples_file():
    """Run in order in one clone, a later example must not replace a file an earlier one made (and
    that the text may still speak of)."""
    blocks = [
        (f"{page} bash block {i}", code) for i, (page, _, lang, code) in enumerate(_all_blocks()) if lang == "bash"
    ]
    seen: dict[str, str] = {}
    for where, block in blocks:
        for name in _written(block):
            assert seen.setdefault(name, where) == where, f"{name} is written by {seen[name]} and by {where}"
    assert "split.json" in seen and "plan.json" in seen


def test_command_line_examples_each_say_what_they_show():
    lines = [line for line in _block("docs/cli.md", "# Command line", "bash").splitlines() if line.strip()]
    for before, line in zip([""] + lines, lines):
        if line.startswith(".venv/"):
            assert before.startswith("#") or before.startswith(".venv/"), line  # a comment opens each group
    assert lines[0].startswith("#")


def test_examples_write_only_git_ignored_files():
    """Run from the repository root, the examples leave nothing git would see: every file a bash
    block writes is ignored (.gitignore), so `git status` stays clean."""
    blocks = [code for _, _, lang, code in _all_blocks() if lang == "bash"]
    written = sorted({name for block in blocks for name in _written(block)})
    assert "plan.json" in written and "titan.toml" in written
    done = subprocess.run(["git", "check-ignore", "--no-index", *written], cwd=ROOT, capture_output=True, text=True)
    ignored = set(done.stdout.split())
    assert ignored == set(written), f"the examples write files git would track: {sorted(set(written) - ignored)}"


def test_no_machine_profile_is_tracked():
    """A profile measured on one machine (profiles/local.json under a cache folder) prices another
    machine wrongly: none is in the repository."""
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    local = [p for p in done.stdout.splitlines() if p.endswith("profiles/local.json")]
    assert not local, f"a machine's profile is committed: {local}; git rm it"
