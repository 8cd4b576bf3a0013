"""Names from a model or a plan file drawn as text: DOT quoting and HTML-like labels keep quotes,
braces, angle brackets, backslashes and DOT syntax inside their label. Checked by Graphviz itself:
the SVG it lays out has one box per node or partition, no link or image, and the names as text."""

from __future__ import annotations

import dataclasses
import re
import shutil
import xml.etree.ElementTree as ET

import pytest

import partitioner
from partitioner.draw.collapse import collapse, collapsed_to_dot
from partitioner.draw.dag import partition_to_dot, plan_to_dot, render_dot
from partitioner.draw.dot import MAX_NAME_CHARS
from partitioner.graph import Graph, Node

pytestmark = pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot binary")

HOSTILE = [
    'a"];evil[label="x',
    "b}{|<p>c",
    "<b>bold</b>",
    "<<TABLE><TR><TD>t</TD></TR></TABLE>>",
    "![m](http://127.0.0.1:9/dot.png)",
    "back\\slash\\l\\N",
    "line\nbreak",
    "amp&lt;&#60;",
]
SVG = "{http://www.w3.org/2000/svg}"


def hostile_graph() -> Graph:
    nodes = [Node(name="x", op="placeholder", target="x", output_bytes=4)]
    for i, name in enumerate(HOSTILE):
        nodes.append(
            Node(
                name=name,
                op="call_function",
                target=f"t{i}",
                inputs=(i,),
                output_bytes=16,
                module_path=f"blocks.{name}",
                shape=(2, 2),
                dtype="float32",
            )
        )
    nodes.append(Node(name="output", op="output", target="output", inputs=(len(HOSTILE),)))
    return Graph(nodes, name=HOSTILE[0])


def svg_of(dot: str) -> ET.Element:
    return ET.fromstring(render_dot(dot, "svg"))


def shown(root: ET.Element) -> str:
    return (
        " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
        + " "
        + " ".join(t.text or "" for t in root.iter(f"{SVG}title"))
    )


def assert_inert(root: ET.Element) -> None:
    """No image, script or link: Graphviz wraps tooltips in <a xlink:title>, never with an href."""
    tags = {el.tag.removeprefix(SVG) for el in root.iter()}
    assert not tags & {"image", "script", "foreignObject"}, tags
    for el in root.iter():
        assert not any(key.endswith("href") for key in el.attrib), el.attrib


@pytest.fixture(scope="module")
def hostile_plan() -> tuple[Graph, partitioner.Plan]:
    graph = hostile_graph()
    devices = [partitioner.Device(name, 10**6, i) for i, name in enumerate(HOSTILE[:4])]
    mapping = {name: i % 4 for i, name in enumerate(HOSTILE)}
    plan = partitioner.evaluate_plan(graph, devices, mapping, {i: [i] for i in range(4)})
    return graph, plan


def test_plan_dag_keeps_hostile_names_as_text(hostile_plan):
    graph, plan = hostile_plan
    root = svg_of(plan_to_dot(plan, graph, title=HOSTILE[1]))
    assert_inert(root)
    boxes = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node"]
    assert len([g for g in boxes if (g.get("id") or "").startswith("p")]) == 4
    text = shown(root)
    for name in HOSTILE[:4]:  # device names, in the legend and the boxes
        assert name.replace("\n", "") in text.replace("\n", "") or name in text


def test_node_view_and_folded_view_keep_hostile_names_as_text(hostile_plan):
    graph, plan = hostile_plan
    for pid in range(4):
        root = svg_of(partition_to_dot(plan, graph, pid))
        assert_inert(root)
        inside = [n for n in plan.partitions[pid].node_names]
        ids = [g.get("id") for g in root.iter(f"{SVG}g") if g.get("class") == "node"]
        assert len([i for i in ids if i and re.fullmatch(r"n\d+", i)]) == len(inside)  # no box split off
        text = shown(root)
        for name in inside:
            assert all(part in text for part in name.split("\n")), (name, text)
    folded = collapsed_to_dot(collapse(graph, plan), plan)
    root = svg_of(folded)
    assert_inert(root)
    assert "blocks" in shown(root)


def test_a_plan_files_long_names_are_drawn_cut(hostile_plan):
    graph, plan = hostile_plan
    long = "W" * 5000
    devices = tuple(dataclasses.replace(d, name=long) for d in plan.devices)
    root = svg_of(plan_to_dot(dataclasses.replace(plan, devices=devices, model=long), graph))
    text = shown(root)
    assert long not in text and "W" * (MAX_NAME_CHARS + 1) not in text
    assert f"{'W' * MAX_NAME_CHARS}... (5,000 characters)" in text  # the title, the legend and every box
    assert text.count("(5,000 characters)") >= 1 + len(plan.devices) + len(plan.partitions)
