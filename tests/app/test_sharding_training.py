"""Issue 56: Sharding's training toggle counts training memory (the weights' shard, their gradients
and Adam's two states), says so under the chart, and its suggestion is a spec that trains."""

from __future__ import annotations

from app_helpers import errors, shown, start

from partitioner import parse_bytes


def _largest(at) -> int:
    value = next(m for m in at.metric if m.label == "Largest device memory").value
    return parse_bytes(value.replace(" ", ""))


def test_training_with_adam_counts_its_memory_and_suggests_a_spec_that_fits_it():
    at = start()
    at.number_input(key="dev_headroom").set_value(0.0)
    at.text_input(key="dev_memory").set_value("7 MiB").run()
    at.number_input(key="dev_count").set_value(2).run()
    at.switch_page("views/sharding.py").run()
    assert not at.exception and not errors(at)
    inference = _largest(at)
    assert any(shown(c.value).startswith("Memory of inference") for c in at.caption)
    at.toggle(key="sh_training").set_value(True).run()
    assert not at.exception and not errors(at)
    assert at.toggle(key="sh_training").label == "Training with Adam"
    trained = _largest(at)
    assert trained > 2 * inference, (trained, inference)  # fp32 Adam: 4 copies of the weights, beside activations
    assert any(shown(c.value).startswith("Memory of training with Adam") for c in at.caption)
    at.button(key="sh_suggest").click().run()  # 7 MiB: no spec trains the sample on two
    assert not at.exception
    said = errors(at)
    assert said and said[0].startswith("No suggestion that trains with Adam"), said
    at.text_input(key="dev_memory").set_value("14 MiB").run()
    at.button(key="sh_suggest").click().run()
    assert not at.exception and not errors(at)
    assert any("Every device fits, with the gradients and Adam's two states." in s.value for s in at.success)
    assert _largest(at) <= parse_bytes("14MiB")  # in training, with its gradients and state
