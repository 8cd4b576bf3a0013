"""The serving knee (partitioner.cluster.knee): the answer past which tokens a second a user gain
little for much more cost; worked cases, then properties over random answers, then real layouts."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sample_models
from partitioner import cluster
from partitioner.cluster.knee import KNEE_ELASTICITY, price_speed_front, serving_knee


def _answer(cost: float, speed: float, tp: int = 1, fits: bool = True) -> cluster.LayoutResult:
    return cluster.LayoutResult(
        cluster.Layout(tp=tp),
        fits,
        {},
        0.1,
        {},
        "weights",
        0.1,
        speed,
        cost,
        extra={"tokens_per_s_per_sequence": speed},
    )


def test_no_answer_no_knee():
    assert serving_knee([]) is None
    assert serving_knee([_answer(1.0, 10.0, fits=False)]) is None
    training = cluster.LayoutResult(cluster.Layout(), True, {}, 1.0, {}, "compute", 0.4, 1e5, 1.0)
    assert serving_knee([training]) is None


def test_the_extreme_that_costs_27_times_for_10_percent_is_not_the_knee():
    """Issue 52: the fastest answer cost 27x the cheapest for 10 % more tokens a second a user."""
    cheap, knee, extreme = _answer(32.0, 100.0, 1), _answer(36.0, 180.0, 2), _answer(872.0, 198.0, 8)
    assert serving_knee([extreme, cheap, knee]) is knee
    assert serving_knee([cheap, extreme]) is cheap  # 27x for 98 %: elasticity 0.21


def test_a_step_that_costs_no_more_is_taken_and_a_dip_does_not_stop_the_walk():
    a, free = _answer(10.0, 50.0, 1), _answer(10.0, 60.0, 2)
    assert serving_knee([a, free]) is free
    # a -> b buys little (elasticity 0.14) but a -> c buys much (0.9): the walk goes to c.
    a, b, c = _answer(10.0, 50.0, 1), _answer(20.0, 55.0, 2), _answer(25.0, 114.0, 4)
    assert serving_knee([a, b, c]) is c
    assert price_speed_front([b, a, c, _answer(30.0, 100.0, 8)]) == [a, b, c]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.5, 1000.0), st.floats(1.0, 500.0), st.booleans()), min_size=1, max_size=25))
def test_the_knee_is_on_the_front_and_nothing_past_it_is_worth_its_price(rows):
    answers = [_answer(c, s, fits=f) for c, s, f in rows]
    knee = serving_knee(answers)
    front = price_speed_front(answers)
    if not front:
        assert knee is None
        return
    assert knee in front
    for r in front[front.index(knee) + 1 :]:
        price = r.cost_per_million_tokens / knee.cost_per_million_tokens
        assert price > 1.0 and math.log(_speed(r) / _speed(knee)) < KNEE_ELASTICITY * math.log(price)
    shuffled = answers[:]
    random.Random(len(rows)).shuffle(shuffled)
    assert serving_knee(shuffled) is knee or _same(serving_knee(shuffled), knee)


def _speed(r: cluster.LayoutResult) -> float:
    return r.extra["tokens_per_s_per_sequence"]


def _same(a, b) -> bool:
    return a is not None and (a.cost_per_million_tokens, _speed(a)) == (b.cost_per_million_tokens, _speed(b))


@pytest.fixture(scope="module")
def llama():
    spec, overrides = "hf:llama-3-8b", {"dtype": "bf16"}  # its 32 layers traced as a block repeated
    return cluster.profile(sample_models.trace_loaded(spec, overrides, sample_models.load(spec, overrides), spec))


def test_llama_8b_served_to_64_users_knees_before_the_largest_layout(llama):
    """Llama-3-8B, 64 users of 2,048 + 256 tokens on H100 nodes: one replica a device up to tp8
    replicas over up to 8 nodes. The knee is not the fastest answer, and costs a fraction of it."""
    w = cluster.Workload("inference", 64, 2048, generate_tokens=256)
    c = cluster.cluster("h100-80gb")
    results = [
        cluster.evaluate(llama, w, c, cluster.Layout(dp=dp, tp=tp), None)
        for tp in (1, 2, 4, 8)
        for dp in (1, 2, 4, 8, 16, 32, 64)
    ]
    knee = serving_knee(results)
    fastest = max((r for r in results if r.fits), key=_speed)
    assert knee is not None and knee is not fastest
    assert knee.cost_per_million_tokens < fastest.cost_per_million_tokens / 3
