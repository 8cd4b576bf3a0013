"""*Review a job* on the Plan a cluster page under AppTest: a pasted launch line is read with every
setting's source, reviewed on the sidebar's model, and its unknown fields and malformed values are
said in words (escaped), never a traceback."""

from __future__ import annotations

from app_helpers import shown, start
from streamlit.testing.v1 import AppTest

LINE = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py --seq-length 128 --micro-batch-size 1 "
    "--global-batch-size 64 --bf16 --use-distributed-optimizer --tensor-model-paralel-size 2 --lr 3e-4"
)


def _page() -> AppTest:
    at = start()
    at.switch_page("views/cluster.py").run()
    assert not at.exception
    return at


def test_a_pasted_megatron_line_is_reviewed_on_the_sidebars_model():
    at = _page()
    at.text_area(key="rv_text").set_value(LINE).run()
    assert not at.exception
    table = next(df.value for df in at.dataframe if "from" in df.value.columns)
    rows = dict(zip(table["setting"], table["from"]))
    assert rows["dp"].startswith("8 GPUs (torchrun --nnodes 1 x --nproc_per_node 8)")
    assert rows["zero"].startswith("--use-distributed-optimizer")
    warnings = [shown(w.value) for w in at.warning]
    assert any("tensor-model-paralel-size (did you mean --tensor-model-parallel-size?)" in w for w in warnings)
    verdicts = [shown(s.value) for s in at.success] + [shown(e.value) for e in at.error]
    assert any("dp8 tp1 pp1 mb1 zero1 on 8 x h100-80gb: fits" in v for v in verdicts)
    assert any("step " in shown(m.value) and "MFU" in shown(m.value) for m in at.markdown)


def test_a_malformed_job_is_said_in_words():
    at = _page()
    at.text_area(key="rv_text").set_value("[parallelism]\ntensor_parallel_degree = '<b>eight</b>'\n").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("tensor_parallel_degree must be a whole number" in shown(e) for e in errors)
    assert all("<b>" not in e for e in errors)  # escaped: shown as written, not as markup
