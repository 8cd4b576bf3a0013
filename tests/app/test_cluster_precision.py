"""Plan a cluster plans a model in the precision it was traced in unless the user picks another:
an fp32 sample in fp32, a bf16 checkpoint in bf16 mixed precision, so the same model means the
same bytes on Explore and here; another model starts at its own precision again."""

from __future__ import annotations

from app_helpers import errors, start

from explorer.cluster_inputs import precision_for
from partitioner import units


def test_the_precision_a_traced_element_size_starts_at():
    assert precision_for(4) == "fp32"
    assert precision_for(2) == "bf16 (mixed)"
    assert precision_for(1) == "fp8 (mixed)"
    assert precision_for(8) == units.PRECISIONS[0].label  # fp64: no such training precision, the default


def test_the_page_starts_at_the_models_precision_and_keeps_the_users_pick():
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception and not errors(at)
    box = at.selectbox(key="cl_precision")
    assert box.value == "fp32"  # the sample transformer is traced in fp32
    box.set_value("bf16 (mixed)").run()
    assert not at.exception and at.selectbox(key="cl_precision").value == "bf16 (mixed)"
    at.run()  # a rerun of the same model keeps the pick
    assert at.selectbox(key="cl_precision").value == "bf16 (mixed)"


def test_host_memory_a_node_is_a_field_that_reaches_the_search():
    from explorer.cluster_inputs import hardware_cluster

    at = start()
    at.switch_page("views/cluster.py").run()
    assert at.number_input(key="cl_host_gib").value == 2048.0  # a DGX H100's 2 TiB
    at.number_input(key="cl_host_gib").set_value(512.0).run()
    assert not at.exception and not errors(at)
    hw = dict(accelerator="h100-80gb", per_node=8, intra="nvlink4", inter="infiniband-ndr", headroom_gib=4.0, price=3.0)
    assert hardware_cluster({**hw, "host_gib": 512.0}).host_memory_bytes == 512 * 2**30
    assert hardware_cluster(hw).host_memory_bytes == 2 * 2**40  # the field's default when a caller has none
