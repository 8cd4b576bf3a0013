"""The Plan a cluster page under AppTest, and its pure figure builders."""

from __future__ import annotations

from app_helpers import charts, errors, start

from explorer.builders import cluster_figures
from partitioner import cluster


def test_the_page_answers_and_re_plans_on_another_accelerator():
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at)
    titles = [m.label for m in at.metric]
    assert titles[:3] == ["Fewest devices", "Fastest", "Cheapest"]
    assert charts(at)[1] >= 3  # the Pareto chart, memory and time of the opened layout
    def answers() -> list[str]:
        return [c.value for c in at.caption if " a step;" in c.value]

    before = answers()
    assert len(before) == 3
    at.selectbox(key="cl_accelerator").set_value("l4-24gb").run()
    assert not at.exception
    assert answers() != before  # an L4 is slower than an H100
    assert {b.proto.label for b in at.get("download_button")} >= {"torchtitan config", "deepspeed config"}


def _found() -> cluster.ClusterPlan:
    p = cluster.ModelProfile(name="toy", tokens0=1, seq0=1, weight_bytes=2 * 10**9, param_count=10**9,
                             element_bytes=2, layers=8, hidden_bytes_per_token=4096.0, kv_bytes_per_token=0.0,
                             act_bytes_per_token=1e5, flops_per_token=2e9, attention_flops_per_token=0.0,
                             node_weight_bytes=(2 * 10**9,), node_act_bytes=(1e5,), node_flops=(2e9,),
                             node_attention=(False,))
    return cluster.search(p, cluster.Workload(global_batch=32, seq_len=1024), cluster.cluster("a100-40gb"),
                          cluster.device_counts(8, 4))


def test_figures_have_titles_and_axes_with_units():
    found = _found()
    pareto = cluster_figures.pareto_figure(found)
    assert "log" in pareto.layout.title.text and pareto.layout.yaxis.title.text == "step time (s)"
    assert pareto.layout.xaxis.type == "log" and len(pareto.data) == 2
    best = found.fastest
    memory = cluster_figures.memory_figure(best, 40 * 2**30)
    assert memory.layout.yaxis.title.text == "memory (GiB)"
    assert sum(bar.y[0] for bar in memory.data) * 2**30 == sum(best.memory.values())
    assert cluster_figures.time_figure(best).layout.yaxis.title.text == "time per step (s)"
    table = cluster_figures.layouts_table(found.best(5), 1e12)
    assert list(table["devices"]) == [r.devices for r in found.best(5)] and (table["train_days"] > 0).all()
