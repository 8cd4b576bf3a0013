"""The disk cache of traces: a hit is the same graph without tracing, a changed key is a miss, the
module comes back on first use, and the command line shares it."""

from __future__ import annotations

import json

import pytest
import torch

import partitioner
import sample_models
from cli import inputs as cli_inputs
from partitioner.tracing import cache


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV, str(tmp_path / "traces"))
    return tmp_path / "traces"


def _builder(spec: str, overrides: dict, calls: list[str]):
    def build() -> partitioner.Graph:
        calls.append(spec)
        loaded = sample_models.load(spec, overrides)
        return sample_models.trace_loaded(spec, overrides, loaded, sample_models.label(spec, overrides))

    return build


def _same(a: partitioner.Graph, b: partitioner.Graph) -> None:
    assert a.nodes == b.nodes and a.name == b.name
    assert a.fingerprint() == b.fingerprint()
    assert a.parameter_bytes == b.parameter_bytes and a.total_size_bytes == b.total_size_bytes
    assert a.tied_parameters == b.tied_parameters and a.repeated_weights == b.repeated_weights
    assert a.unpriced_ops == b.unpriced_ops and a.model_info == b.model_info


def test_a_hit_is_the_traced_graph_and_its_module_comes_back_on_first_use(folder):
    overrides = {"n_layer": 3}
    key = cache.model_key("mlp", overrides)
    calls: list[str] = []
    fresh = cache.cached_trace(key, _builder("mlp", overrides, calls))
    assert calls == ["mlp"] and len(list(folder.glob("*.json"))) == 1
    hit = cache.cached_trace(key, _builder("mlp", overrides, calls))
    assert calls == ["mlp"], "a hit must not trace"
    assert isinstance(hit, cache.CachedGraph) and not cache.module_loaded(hit)
    _same(hit, fresh)
    torch.testing.assert_close(hit.example_inputs, fresh.example_inputs)
    # A split needs the module: it is traced again once, and the split equals the model.
    plan = partitioner.partition(hit, partitioner.parse_devices("3x512KiB"), "size_based")
    split = partitioner.split(plan, hit)
    assert calls == ["mlp", "mlp"] and cache.module_loaded(hit)
    torch.testing.assert_close(split(*hit.example_inputs), fresh.graph_module(*hit.example_inputs))
    assert plan.to_dict() == partitioner.partition(fresh, partitioner.parse_devices("3x512KiB"), "size_based").to_dict()


def test_sessions_reading_a_hits_module_at_once_trace_it_once_and_all_get_it(folder):
    """The app's sessions are threads of one process: several reading a cached graph's module at
    the same moment (two reruns of one page, two people) wait for one trace and all get its module."""
    import threading
    import time

    key = cache.model_key("mlp", {})
    calls: list[str] = []
    cache.cached_trace(key, _builder("mlp", {}, calls))
    build = _builder("mlp", {}, calls)

    def slow() -> partitioner.Graph:
        time.sleep(0.2)  # the other readers arrive while it traces
        return build()

    hit = cache.cached_trace(key, slow)
    assert isinstance(hit, cache.CachedGraph)
    got: list[object] = []
    failed: list[BaseException] = []

    def read() -> None:
        try:
            got.append(hit.graph_module)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    assert calls == ["mlp", "mlp"] and len(got) == 4 and all(m is got[0] and m is not None for m in got)


def test_every_part_of_the_key_makes_its_own_entry(folder, monkeypatch):
    calls: list[str] = []
    cache.cached_trace(cache.model_key("mlp", {}), _builder("mlp", {}, calls))
    cache.cached_trace(cache.model_key("mlp", {"n_layer": 2}), _builder("mlp", {"n_layer": 2}, calls))
    assert len(calls) == 2
    key = cache.model_key("mlp", {})
    assert set(key) >= {"spec", "overrides", "python", "torch", "transformers", "source"}
    now = cache.versions()
    monkeypatch.setattr(cache, "versions", lambda: {**now, "torch": "0.0"})
    cache.cached_trace(cache.model_key("mlp", {}), _builder("mlp", {}, calls))
    assert len(calls) == 3, "another torch version must trace again"
    monkeypatch.undo()
    monkeypatch.setenv(cache.ENV, str(folder))
    cache.cached_trace(cache.model_key("mlp", {}), _builder("mlp", {}, calls))
    assert len(calls) == 3, "the first entry is still served"


def test_the_source_hash_follows_the_package_source(folder, monkeypatch, tmp_path):
    before = cache._source_hash()
    assert before == cache.model_key("mlp", {})["source"]
    package = tmp_path / "pkg" / "partitioner"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg"))
    monkeypatch.setattr(cache, "SOURCE_PACKAGES", ("partitioner",))
    spec = type("Spec", (), {"submodule_search_locations": [str(package)]})
    monkeypatch.setattr(cache.importlib.util, "find_spec", lambda name: spec)
    cache._source_hash.cache_clear()
    one = cache._source_hash()
    (package / "__init__.py").write_text("x = 2\n")
    cache._source_hash.cache_clear()
    assert cache._source_hash() != one
    monkeypatch.undo()
    cache._source_hash.cache_clear()
    assert cache._source_hash() == before


def test_a_damaged_or_foreign_entry_is_a_miss_and_written_again(folder):
    calls: list[str] = []
    key = cache.model_key("mlp", {})
    cache.cached_trace(key, _builder("mlp", {}, calls))
    (entry,) = folder.glob("*.json")
    entry.write_text("{not json")
    assert not isinstance(cache.cached_trace(key, _builder("mlp", {}, calls)), cache.CachedGraph)
    data = json.loads(entry.read_text())
    data["graph"]["nodes"][1][7] += 1  # bytes edited by hand: the fingerprint no longer matches
    entry.write_text(json.dumps(data))
    assert not isinstance(cache.cached_trace(key, _builder("mlp", {}, calls)), cache.CachedGraph)
    assert len(calls) == 3
    assert isinstance(cache.cached_trace(key, _builder("mlp", {}, calls)), cache.CachedGraph)


def test_factories_are_never_cached_and_off_turns_it_off(folder, monkeypatch):
    assert cache.model_key("examples.my_models:build", {}) is None
    assert cache.model_key("hf:gpt2", {"n_layer": 2}) is not None
    monkeypatch.setenv(cache.ENV, "off")
    assert cache.cache_dir() is None
    calls: list[str] = []
    cache.cached_trace(cache.model_key("mlp", {}), _builder("mlp", {}, calls))
    cache.cached_trace(cache.model_key("mlp", {}), _builder("mlp", {}, calls))
    assert len(calls) == 2 and not folder.exists()


def test_the_oldest_entries_go(folder, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)
    calls: list[str] = []
    for n in (1, 2, 3):
        cache.cached_trace(cache.model_key("mlp", {"n_layer": n}), _builder("mlp", {"n_layer": n}, calls))
    assert len(list(folder.glob("*.json"))) == 2 and len(list(folder.glob("*.pt"))) == 2


@pytest.mark.slow
def test_the_command_line_reads_the_cache_and_builds_an_hf_module_only_when_asked(folder, monkeypatch):
    sets = ["n_layer=2", "n_embd=64", "n_head=4", "vocab_size=1000"]
    first = cli_inputs.load_model("hf:gpt2", sets)
    built = []
    real_load = sample_models.load
    monkeypatch.setattr(sample_models, "load", lambda *a, **k: built.append(a) or real_load(*a, **k))
    again = cli_inputs.load_model("hf:gpt2", sets)
    assert isinstance(again.graph, cache.CachedGraph) and built == []
    _same(first.graph, again.graph)
    assert again.module.num_parameters() == first.module.num_parameters() and len(built) == 1
    # An exported graph (keyword inputs) comes back runnable too.
    torch.testing.assert_close(
        again.graph.graph_module(*again.graph.example_inputs), first.graph.graph_module(*first.graph.example_inputs)
    )
