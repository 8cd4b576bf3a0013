"""The server survives what one link or one upload asks of it: link values checked like widget
values, graph and plan sizes refused before work starts, no button that starts more processes
than the machine runs, and traces that cannot race each other."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from app_helpers import APP, TIMEOUT, errors, review, summary
from streamlit.testing.v1 import AppTest

import partitioner
from explorer import compute
from explorer.builders.config import ModelChoice
from partitioner.processes.launch import MAX_LOCAL_PROCESSES
from sample_models._common import MAX_GRAPH_OPS


def open_link(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(params)
    return at.run()


def url(at: AppTest) -> dict[str, str]:
    return {k: v[0] if isinstance(v, list) else v for k, v in dict(at.query_params).items()}


@pytest.mark.parametrize("key, text", [("knob_mlp_bias", "x"), ("transfer_gbps", "nan")])
def test_a_bad_link_value_is_ignored_with_a_message_and_leaves_the_url(key, text):
    at = open_link(model="mlp", **{key: text})
    assert not at.exception
    said = [w.value.replace("\\", "") for w in at.warning]
    assert any(f"{key}={text} in the link was ignored" in w for w in said), said
    assert url(at).get(key) != text and summary(at) is not None  # a plan, from the defaults
    assert summary(at)["model"] == "mlp"


def test_a_link_value_the_model_refuses_is_said_with_its_rule():
    at = open_link(model="mlp", knob_mlp_n_layer="-3")
    assert not at.exception
    assert any("n_layer must be > 0" in e for e in errors(at)), errors(at)


def test_an_out_of_range_link_number_is_not_applied_with_a_message():
    at = open_link(model="mlp", transfer_gbps="-5", dev_count="5000")
    assert not at.exception
    text = " ".join(w.value.replace("\\", "") for w in at.warning)
    assert "Number of devices must be from 1 to 1,024 (got 5,000): not applied; the answer is for 4" in text
    assert "Transfer rate between devices (GB/s) must be from 0 to" in text and "(got -5)" in text
    assert summary(at)["devices"] == 4


def test_a_link_past_the_graph_cap_is_refused_before_anything_is_built():
    at = open_link(
        model="mlp", knob_mlp_n_layer="20000", knob_mlp_hidden="1", knob_mlp_in_features="1", knob_mlp_out_features="1"
    )
    assert not at.exception
    message = " ".join(errors(at))
    assert f"up to {MAX_GRAPH_OPS:,} operations" in message and "lower n_layer" in message, message


def test_idle_devices_get_no_process_and_the_run_stays_under_the_machines_cap():
    at = open_link(model="mlp", dev_count="1024")
    assert not at.exception
    starts = next(c.value for c in at.caption if c.value.startswith("Starts"))
    busy = summary(at)["partitions"]
    assert starts.startswith(f"Starts {busy} processes") and "the 1021 idle devices get none" in starts
    assert not at.button(key="run_local").disabled


def test_the_run_button_is_disabled_with_the_reason_above_the_cap():
    layers = MAX_LOCAL_PROCESSES + 8  # one layer a device: more busy devices than the cap
    at = open_link(
        model="mlp",
        knob_mlp_n_layer=str(layers),
        knob_mlp_hidden="64",
        knob_mlp_in_features="64",
        knob_mlp_out_features="64",
        knob_mlp_batch_size="1",
        dev_count="64",
        dev_memory="20 KiB",
    )
    assert not at.exception
    assert summary(at)["partitions"] == layers
    button = at.button(key="run_local")
    assert button.disabled
    reason = " ".join(i.value for i in at.info)
    assert f"needs {layers} processes" in reason and f"at most {MAX_LOCAL_PROCESSES}" in reason


def test_a_plan_larger_than_the_model_is_refused_on_review():
    at = review(open_link(model="mlp"))
    graph = compute.trace(at.session_state["config"].model)
    plan = json.loads(compute.plan(at.session_state["config"]).plan.to_json())
    part = plan["partitions"][0]
    ops = len(graph.op_names)
    plan["partitions"] = [dict(part, id=i, node_names=[f"x{i}"]) for i in range(ops + 1)]  # one too many
    at.text_area(key="plan_paste").input(json.dumps(plan)).run()
    at.button(key="plan_paste_load").click().run()
    assert not at.exception
    message = " ".join(errors(at))
    assert f"at most {ops} partitions" in message and f"this one has {ops + 1}" in message, message


class _Fails(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: symbolic tracing fails part-way
            return x
        return -x


class _Race:
    """Six sample models traced from six threads at once (distinct seeds: no cache hit)."""

    def __init__(self, seed: int) -> None:
        self.failures: list[str] = []
        self.choices = [ModelChoice(m, (("seed", seed),)) for m in ("mlp", "cnn", "transformer", "dlrm", "unet", "moe")]

    def run(self) -> list[str]:
        barrier = threading.Barrier(len(self.choices))

        def one(choice: ModelChoice) -> None:
            barrier.wait()
            try:
                compute.trace(choice)
            except Exception as exc:  # recorded: the test shows them all
                self.failures.append(f"{choice.name}: {exc}")

        threads = [threading.Thread(target=one, args=(c,)) for c in self.choices]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.failures


@pytest.mark.slow
def test_traces_started_at_once_by_many_sessions_all_succeed():
    for seed in (101, 102):
        assert _Race(seed).run() == []
    # Without the lock the same race broke 20 of 24 traces when tracing was slower; since each op
    # is annotated once the window is narrow and the race shows only now and then, so it is not
    # asserted here.
    # And a trace after any failure still works, in this process: one the loader refuses, one
    # that fails inside torch.fx's trace.
    with pytest.raises(ValueError, match="n_layer must be > 0"):
        compute.trace(ModelChoice("mlp", (("n_layer", -1),)))
    with pytest.raises(partitioner.PartitionError):
        partitioner.trace(_Fails(), (torch.randn(1, 4),))
    model = torch.nn.Linear(4, 2)
    assert len(partitioner.trace(model, (torch.randn(1, 4),)).op_names) == 1
    assert _Race(104).run() == []
