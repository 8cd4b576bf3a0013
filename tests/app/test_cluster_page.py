"""The Plan a cluster page under AppTest on the default sample model: the three answers, the
Pareto chart, the best layouts, an opened layout and its configs; a change of accelerator plans
again; inference; a setting the planner refuses is said in words."""

from __future__ import annotations

import json

import pytest
from app_helpers import charts, errors, shown, start
from streamlit.testing.v1 import AppTest

from explorer.state import HF_MODEL
from partitioner import cluster


def _page() -> AppTest:
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at)
    return at


def _figures(at: AppTest) -> dict[str, dict]:
    """Each Plotly chart's figure by its title."""
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return {fig["layout"]["title"]["text"]: fig for fig in figures}


def _answers(at: AppTest, step: str = " a step;") -> list[str]:
    return [shown(c.value) for c in at.caption if step in shown(c.value)]


def test_the_page_answers_and_re_plans_on_another_accelerator():
    at = _page()
    assert [m.label for m in at.metric] == ["Fewest devices", "Fastest", "Cheapest"]
    assert all(m.value.split()[0].isdigit() and "device" in m.value for m in at.metric)
    before = _answers(at)
    assert len(before) == 3 and all("per million tokens" in a and "limited by" in a for a in before)
    assert len([c for c in at.caption if shown(c.value).startswith("1 trillion tokens: ")]) == 3  # time and cost
    assert charts(at)[1] == 4  # the Pareto chart, the scaling curve, memory and time
    figures = _figures(at)
    pareto = figures["Devices against step time (log scales)"]
    assert pareto["layout"]["xaxis"]["type"] == "log"
    assert pareto["layout"]["yaxis"]["title"]["text"] == "step time (s, log)"
    assert any(title.startswith("Memory per device") for title in figures)
    assert any(title.startswith("Time by cause") for title in figures)
    table = next(df.value for df in at.dataframe if "limit" in df.value.columns)
    assert {"mfu", "step_s", "limit", "devices"} <= set(table.columns) and table["step_s"].dtype.kind == "f"
    assert len(at.selectbox(key="cl_open").options) == len(table)
    labels = {b.proto.label for b in at.get("download_button")}
    assert labels == {
        "torchtitan up to 0.2 (TOML) config",
        "torchtitan 0.3 (arguments) config",
        "Megatron-LM (arguments) config",
        "DeepSpeed (JSON) config",
    }

    at.selectbox(key="cl_accelerator").set_value("l4-24gb").run()
    assert not at.exception and not errors(at)
    assert _answers(at) != before  # an L4 is slower than an H100
    after = _figures(at)["Devices against step time (log scales)"]
    assert after["data"][1]["y"] != pareto["data"][1]["y"]  # the fastest at each size moved
    assert at.number_input(key="cl_price_l4-24gb").value == cluster.ACCELERATORS["l4-24gb"].price_per_hour
    assert at.selectbox(key="cl_intra_l4-24gb").value == "pcie4"  # the accelerator's own link


def test_opening_another_layout_redraws_its_memory():
    at = _page()

    def memory_title() -> str:
        return next(t for t in _figures(at) if t.startswith("Memory per device"))

    box = at.selectbox(key="cl_open")
    first, other = box.options[0], box.options[-1]
    assert first.split(": ", 1)[1] in memory_title()
    box.set_value(other).run()
    assert not at.exception and other.split(": ", 1)[1] in memory_title()


def test_inference_answers_in_time_to_first_token():
    at = _page()
    at.selectbox(key="cl_kind").set_value("inference").run()
    assert not at.exception and not errors(at)
    assert len(_answers(at, "most of a token: ")) == 4  # the three answers and the knee
    assert any("tokens/s per sequence" in c.value for c in at.caption)
    assert "Devices against time to first token (log scales)" in _figures(at)


def test_a_refused_setting_is_said_in_words():
    at = _page()
    at.selectbox(key="cl_accelerator").set_value("l4-24gb").run()
    at.number_input(key="cl_headroom").set_value(30.0).run()  # more than the L4's 24 GiB
    assert not at.exception
    assert any("Cannot plan this cluster" in e and "headroom" in e for e in errors(at))
    assert not at.metric


def _searched(at: AppTest) -> int:
    summary = next(shown(c.value) for c in at.caption if "layouts in" in shown(c.value))
    return int(summary.split("searched ")[1].split(" layouts")[0].replace(",", ""))


def _min_cut_shares(graph, inputs, budgets, timeout_s=None, progress=None):
    """A stand-in for ``partitioner.remat.sweep`` (seconds a budget on the sample: its joint trace
    and min-cut are tested in tests/remat and tests/cluster/test_min_cut_layouts.py): min-cut at
    budget b keeps (20 + 60 b) % of the activations and recomputes (40 - 40 b) % of the forward."""
    from partitioner.remat import RematResult

    assert graph.graph_module is not None and inputs and timeout_s  # the page's trace, in a worker
    progress(f"min-cut at budget {budgets[-1]:g}: {len(budgets)} of {len(budgets)} done")  # the status box's
    prof = cluster.profile(graph)
    acts, flops = prof.act_bytes_per_token * prof.tokens0, prof.flops_per_token * prof.tokens0
    return [RematResult(b, (), (), int((0.2 + 0.6 * b) * acts), 0, int((0.4 - 0.4 * b) * flops), 0.0) for b in budgets]


@pytest.mark.parametrize(
    "measured",
    [pytest.param("stand-in"), pytest.param("functorch", marks=pytest.mark.slow)],  # the real one: 30 s
)
def test_measured_min_cut_budgets_join_the_search(measured, monkeypatch: pytest.MonkeyPatch):
    if measured == "stand-in":
        monkeypatch.setattr("partitioner.remat.sweep", _min_cut_shares)
    at = _page()
    before = _searched(at)
    at.button(key="cl_min_cut_run").click().run(timeout=300)
    assert not at.exception and not errors(at)
    assert any("min-cut-0 keeps" in shown(c.value) and "min-cut-0.75 keeps" in shown(c.value) for c in at.caption)
    # Four budgets beside none, selective (the sample keeps eager attention's scores) and full:
    # seven choices where there were three, each measured choice searched (3N + L layouts before,
    # 7N + L after: L the layers-K choices the search adds where no other fits, the same both times).
    after = _searched(at)
    assert after > before and (after - before) % 4 == 0 and 3 * after <= 7 * before


def test_an_opened_pipeline_layout_shows_its_ranks_collectives_and_stage_dag():
    at = _page()
    # Written: with activations as autograd keeps them the best layouts of the sample need no stages.
    at.text_input(key="cl_write").set_value("dp4 tp2 pp2 1f1b mb2").run()
    assert not at.exception and not errors(at)
    pp = 2
    ranks = next(f for t, f in _figures(at).items() if t.startswith("Training memory on each pipeline rank"))
    activations = next(trace for trace in ranks["data"] if trace["name"] == "activations")
    assert activations["x"] == [f"rank {k}" for k in range(pp)]
    assert activations["y"][0] >= max(activations["y"])  # the first rank holds the most microbatches
    table = next(df.value for df in at.dataframe if "collective" in df.value.columns)
    assert "send of the hidden state and its gradient" in set(table["collective"])
    assert any(group.startswith("pp: 2 ranks") for group in table["group"])
    assert charts(at)[0] == 0  # the stage DAG only on request
    at.toggle(key="cl_stage_dag").set_value(True).run()
    assert not at.exception and not errors(at)
    assert any(f"stages on {pp} pipeline ranks" in shown(c.value) for c in at.caption)
    assert charts(at)[0] == 1  # the stage DAG, in the graph viewer


def test_a_layout_too_large_for_this_machine_runs_reduced_and_says_so():
    at = _page()  # the sample decoder at 512 sequences: dp far above this machine's processes
    box = at.selectbox(key="cl_open")
    box.set_value(next(o for o in box.options if " tp1 " not in o)).run()
    assert not at.exception
    reduced = [shown(c.value) for c in at.caption if shown(c.value).startswith("Runs ")]
    assert reduced and "data parallelism and microbatches reduced to fit" in reduced[0]
    at.text_input(key="cl_write").set_value("dp2 tp2 pp2 interleaved_1f1b mb1").run()
    assert not at.exception  # a schedule the composed run does not take: said before any process starts
    assert any(
        "Cannot run this layout here: pipeline stages run here with one stage a rank, gpipe or 1f1b" in shown(i.value)
        for i in at.info
    )


@pytest.mark.slow
def test_run_this_layout_runs_a_pipeline_and_compares_it_with_the_prediction():
    at = start()
    at.selectbox(key="model").set_value("mlp").run()
    at.switch_page("views/cluster.py").run()
    # a pipelined layout that runs here (one stage a rank, 1f1b), written in (the answers on an H100 favour
    # data parallelism and zero-bubble pipelines for a model this small)
    piped = "dp1 tp1 pp2 1f1b mb2"
    at.text_input(key="cl_write").set_value(piped).run()
    at.button(key="cl_run").click().run(timeout=600)
    assert not at.exception and not errors(at)
    assert any("Outputs equal one process's and gradients equal" in shown(s.value) for s in at.success)
    figure = next(
        f
        for t, f in _figures(at).items()
        if t.startswith("One training step on this machine, predicted against measured")
    )
    assert {trace["x"][0] for trace in figure["data"]} == {"predicted", "measured"}
    table = next(df.value for df in at.dataframe if "mesh" in df.value.columns)
    pp = int(piped.split(" pp")[1].split()[0])
    assert list(table["mesh"]) == [f"pp={k} dp=0 tp=0" for k in range(pp)]


def test_a_written_layout_opens_fitting_or_not_and_a_typo_is_named():
    at = _page()
    at.text_input(key="cl_write").set_value("dp2 tp2 pp2 1f1b mb2 zero1").run()
    assert not at.exception and not errors(at)
    assert any("dp2 tp2 pp2 1f1b mb2 zero1" in t for t in _figures(at) if t.startswith("Memory per device"))
    at.selectbox(key="cl_accelerator").set_value("l4-24gb")  # one run (one search) for the three
    at.number_input(key="cl_seq").set_value(32768)
    at.text_input(key="cl_write").set_value("dp1 tp1 mb512").run()  # 512 sequences of 32k at once on one L4
    assert not at.exception
    assert any("does not fit" in shown(w.value) for w in at.warning)
    at.text_input(key="cl_write").set_value("dp2 tq2").run()
    assert any("Cannot open dp2 tq2" in e and "a layout is words like" in e for e in errors(at))
    assert any(t.startswith("Memory per device") for t in _figures(at))  # the chosen layout still open


@pytest.mark.slow
def test_run_this_layout_on_a_small_hugging_face_model_by_its_own_plan():
    pytest.importorskip("transformers")
    at = start()
    at.selectbox(key="model").set_value(HF_MODEL).run()
    at.text_input(key="hf_name").set_value("llama")
    at.text_input(key="hf_set").set_value(
        "num_hidden_layers=2 hidden_size=64 intermediate_size=128 "
        "num_attention_heads=4 num_key_value_heads=2 vocab_size=256"
    )
    at.number_input(key="hf_batch").set_value(4)
    at.button(key="hf_build").click().run()
    assert not at.exception and not errors(at)
    at.switch_page("views/cluster.py").run()
    at.text_input(key="cl_write").set_value("dp2 tp2 mb1 zero3").run()
    at.button(key="cl_run").click().run(timeout=600)
    assert not at.exception and not errors(at)
    assert any("Outputs equal one process's and gradients equal" in shown(s.value) for s in at.success)
    assert any("the model's own plan: attention by heads" in shown(c.value) for c in at.caption)
    table = next(df.value for df in at.dataframe if "mesh" in df.value.columns)
    assert list(table["mesh"]) == ["dp=0 tp=0", "dp=0 tp=1", "dp=1 tp=0", "dp=1 tp=1"]


def test_an_answer_at_the_searchs_edge_is_said_and_the_scaling_curve_is_drawn():
    at = _page()
    at.number_input(key="cl_max_nodes").set_value(1).run()  # 1 to 8 devices: the sample's answers reach 8
    assert not at.exception and not errors(at)
    edge = [shown(w.value) for w in at.warning if "the largest size searched" in shown(w.value)]
    assert edge and "8 devices" in edge[0] and "Up to nodes" in edge[0]
    curve = next(f for t, f in _figures(at).items() if t.startswith("Step time and cost against devices"))
    steps, costs = curve["data"][0], curve["data"][1]
    assert steps["x"] == costs["x"] and steps["x"] == sorted(steps["x"]) and costs["yaxis"] == "y2"
    at.number_input(key="cl_max_nodes").set_value(64).run()
    edge = [shown(w.value) for w in at.warning if "the largest size searched" in shown(w.value)]
    assert all("512 devices" in e for e in edge)  # the edge moved with the search
    curve = next(f for t, f in _figures(at).items() if t.startswith("Step time and cost against devices"))
    steps, costs = curve["data"][0]["y"], curve["data"][1]["y"]
    stalls = [
        n
        for n, s0, s1, c0, c1 in zip(curve["data"][0]["x"], steps, steps[1:], costs, costs[1:])
        if s1 > 0.9 * s0 or c1 > 1.5 * c0
    ]
    said = [shown(c.value) for c in at.caption if "stops paying" in shown(c.value)]
    assert bool(said) == bool(stalls) and (not said or f"From {stalls[0]:,} devices on" in said[0])


def test_serving_has_its_own_inputs_and_names_its_bottleneck_with_the_numbers():
    at = _page()
    at.selectbox(key="cl_kind").set_value("inference").run()
    assert not at.exception and not errors(at)
    assert at.number_input(key="cl_serve_batch").value == 1  # one sequence, not the training batch
    assert at.number_input(key="cl_prompt").label == "Prompt length (tokens)"
    assert at.session_state["cl_batch"] == 512 if "cl_batch" in at.session_state else True
    parts = [shown(c.value) for c in at.caption if shown(c.value).startswith("Each token")]
    assert len(parts) == 4 and all("reading the weights would take" in p and "arithmetic" in p for p in parts)
    answers = _answers(at, "most of a token: ")
    assert len(answers) == 4 and not [a for a in answers if " a time to first token" in a]
    # the bottleneck named is the largest part of the breakdown beside it (issue 56: it named the memory
    # bandwidth where its own breakdown explained 13 of 56 ms a token)
    for answer, breakdown in zip(answers, parts):
        largest = breakdown.split(": ", 1)[1].split(" ")[:3]  # the parts come largest first
        named = answer.split("most of a token: ")[1].split(";")[0]
        assert named.split(" ")[:2] == largest[:2] or named == largest[0], (answer, breakdown)


def test_a_written_layout_takes_the_new_options_and_prices_them():
    at = _page()
    at.text_input(key="cl_write").set_value("dp4 tp2 cp2 recompute-full no-sp").run()
    assert not at.exception and not errors(at)
    label = "dp4 tp2 pp1 cp2 mb1 recompute-full no-sp"
    memory = next(f for t, f in _figures(at).items() if t.startswith("Memory per device") and label in t)
    assert {trace["name"] for trace in memory["data"]} >= {"activations", "recomputed layer"}
    table = next(df.value for df in at.dataframe if "collective" in df.value.columns)
    assert any(group.startswith("cp: 2 ranks") for group in table["group"])
    assert any("(one-shot)" in name or "(tree)" in name or "(ring)" in name for name in table["collective"])
    at.text_input(key="cl_write").set_value("dp4 tp3").run()  # the sample's 4 heads and widths refuse tp3
    assert any("Cannot open dp4 tp3" in e and "must divide the attention heads" in e for e in errors(at))


def test_the_cluster_page_names_its_engine_and_what_its_times_assume():
    from app_helpers import APP, TIMEOUT, shown
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    at.switch_page("views/cluster.py").run()
    assert not at.exception, at.exception
    captions = " ".join(shown(c.value) for c in at.caption)
    assert "eager PyTorch" in captions and "kernel curves measured on NVIDIA H100" in captions
    eager = at.session_state["cl_engine"]
    at.radio(key="cl_engine").set_value("graphs").run()
    assert not at.exception and eager == "eager"
    assert "CUDA graphs" in " ".join(shown(c.value) for c in at.caption)
    at.selectbox(key="cl_accelerator").set_value("a100-80gb").run()
    assert "derived from the measured h100-80gb" in " ".join(shown(c.value) for c in at.caption)
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)  # the link carries it (Streamlit's binding)
    fresh.query_params.update({"cl_engine": "graphs", "cl_accelerator": "a100-80gb"})
    fresh.switch_page("views/cluster.py").run()
    assert [m.value for m in fresh.metric] == [m.value for m in at.metric]


def test_serving_is_priced_on_the_serving_engines_unless_eager_is_picked():
    """Inference defaults to CUDA graphs and fused kernels (what vLLM and SGLang run), said under
    the radio and in the answers; picking eager prices eager PyTorch, slower a token."""
    at = _page()
    at.selectbox(key="cl_kind").set_value("inference").run()
    assert not at.exception and not errors(at)
    assert at.session_state["cl_serve_engine"] == "graphs"
    graphs = " ".join(shown(c.value) for c in at.caption)
    assert "CUDA graphs" in graphs
    at.radio(key="cl_serve_engine").set_value("eager").run()
    assert not at.exception and not errors(at)
    eager = " ".join(shown(c.value) for c in at.caption)
    assert "engine: eager" in eager and graphs != eager
