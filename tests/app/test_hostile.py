"""Hostile and odd input in the app: plan files of the wrong shape, Hugging Face config fields out
of range, a 0 B device and names that are Markdown. Each is a message naming the input (never
"This is a bug"), and no name reaches the page as markup."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from app_helpers import errors, review, shown, start, summary

import partitioner
import sample_models
from explorer.builders.config import DEFAULT_MODEL
from explorer.sidebar import HF_MODEL

FIXTURES = Path(__file__).resolve().parents[1] / "plan" / "fixtures"
IMAGE = "![m](http://127.0.0.1:9/beacon-model.png)"
LINK = "[click](http://127.0.0.1:9/beacon-link)"
# Markdown that renders: an image or a link whose brackets and parenthesis are not escaped.
MARKUP = re.compile(r"(?<!\\)!?(?<!\\)\[[^\]]*(?<!\\)\]\((?<!\\)|<img|<a ")


@pytest.fixture(scope="module")
def plan_json() -> dict:
    module, example = sample_models.build(DEFAULT_MODEL)
    graph = partitioner.trace(module, example, name=DEFAULT_MODEL)
    count, memory = sample_models.default_devices(DEFAULT_MODEL)
    plan = partitioner.partition(graph, partitioner.parse_devices(f"{count}x{memory}B"), mode="cost_aware")
    return json.loads(plan.to_json())


def page_text(at) -> list[str]:
    """The Markdown source of every message, caption and Markdown block on the page."""
    out = []
    for kind in ("error", "warning", "info", "success", "markdown", "caption"):
        out += [str(e.value) for e in getattr(at, kind)]
    return out


def load(at, name: str, data: bytes):
    at.file_uploader(key="plan_upload").upload(name, data, "application/json")
    at.run()
    assert not at.exception, at.exception
    return at


def test_plan_files_of_the_wrong_shape_are_messages_naming_the_rule(plan_json):
    at = review(start())
    v1 = json.loads((FIXTURES / "plan_v1_transformer_kl.json").read_text())
    bad = {
        "options.json": {**v1, "options": 3},
        "edge.json": {**plan_json, "edges": [{**plan_json["edges"][0], "dst": 40}]},
        "negative.json": {
            **plan_json,
            "partitions": [{**plan_json["partitions"][0], "id": -1}, *plan_json["partitions"][1:]],
        },
    }
    expected = {
        "options.json": "options must be an object or null in a schema-1 plan (got 3)",
        "edge.json": "edges[0].dst names partition 40, which the plan does not have",
        "negative.json": "partitions[0].id must be a whole number from 0",
    }
    for name, data in bad.items():
        load(at, name, json.dumps(data).encode())
        said = " ".join(errors(at))
        assert expected[name] in said, said
        assert "bug" not in said
    load(at, "bom.json", ("\ufeff" + json.dumps(plan_json)).encode("utf-8"))
    assert any("Loaded file bom.json" in s.value.replace("\\", "") for s in at.success), page_text(at)


def test_names_from_a_plan_file_are_not_markup(plan_json):
    at = review(start())
    data = json.loads(json.dumps(plan_json))
    data["model"] = IMAGE
    data["partitions"][0]["node_names"][0] = LINK  # a name the model lacks, in place of one it has
    data["devices"][0]["name"] = "<img src=http://127.0.0.1:9/beacon-device.png>"
    data["provenance"]["solver"] = IMAGE
    load(at, IMAGE + ".json", json.dumps(data).encode())
    texts = page_text(at)
    assert any("beacon-link" in shown(t) for t in texts)  # the node is named in the warning...
    assert not [t for t in texts if MARKUP.search(t)], [t for t in texts if MARKUP.search(t)]  # ...as text


def test_a_device_of_no_memory_is_a_message():
    at = start()
    at.text_input(key="dev_memory").set_value("0B").run()
    assert not at.exception
    assert any("memory must be more than 0 B (got '0B')" in e for e in errors(at)), errors(at)


HF_CASES = [
    ("gpt2", "n_layer=1 n_head=0", "n_head must be at least 1 (got 0)"),
    ("gpt2", "n_layer=1 n_embd=0", "n_embd must be at least 1 (got 0)"),
    ("gpt2", "n_layer=1 vocab_size=0", "vocab_size must be at least 1 (got 0)"),
    ("gpt2", "n_layer=abc", "'n_layer' expected int, got str (value: 'abc')"),
    ("llama", "num_hidden_layers=1 num_attention_heads=0", "num_attention_heads must be at least 1 (got 0)"),
    ("vit", "num_hidden_layers=1 patch_size=0", "patch_size must be at least 1 (got 0)"),
    (
        "llama",
        'num_hidden_layers=1 rope_parameters={"rope_type":"![x](http://127.0.0.1:9/b.png)"}',
        "rope_type must be one of",
    ),
    (
        "llama",
        'num_hidden_layers=1 quantization_config={"quant_method":"bitsandbytes"}',
        "no config field 'quantization_config'",
    ),
]


@pytest.mark.slow
def test_hugging_face_fields_out_of_range_are_messages_not_bugs():
    pytest.importorskip("transformers")
    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    for name, sets, message in HF_CASES:
        at.text_input(key="hf_name").set_value(name)
        at.text_input(key="hf_set").set_value(sets)
        at.button(key="hf_build").click().run()  # the fields are one form: sent together
        assert not at.exception, (sets, at.exception)
        said = " ".join(errors(at))
        assert message in said and "bug" not in said, (sets, said)
        assert not [t for t in page_text(at) if MARKUP.search(t)], sets
    # A dict-valued field the model takes keys the app's caches (it used to be unhashable).
    at.text_input(key="hf_name").set_value("llama")
    at.text_input(key="hf_set").set_value(
        "num_hidden_layers=1 hidden_size=32 intermediate_size=64 "
        "num_attention_heads=2 num_key_value_heads=1 vocab_size=64 "
        'rope_parameters={"rope_type":"linear","factor":2.0}'
    )
    at.button(key="hf_build").click().run()
    assert not at.exception and not errors(at), errors(at)
    assert summary(at)["model"].startswith("hf:llama(")
