"""The device palette stays distinct for colour-blind readers: its first nine colours (the most
plans use) are Paul Tol's "light" scheme, and no two of them come closer than a clearly visible
difference under a simulation of deuteranopia or protanopia (Machado, Oliveira and Fernandes
2009, severity 1), measured as CIE76 colour difference in CIELAB."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from partitioner.draw.dot import PALETTE, TOL_LIGHT

SIMULATIONS = {
    "normal": np.eye(3),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
}
VISIBLE = 10.0  # CIE76 distance: two fills side by side read as different colours


def _linear(colour: str) -> np.ndarray:
    c = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(rgb: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    f = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(f > 216 / 24389, np.cbrt(f), (24389 / 27 * f + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def closest(colours: tuple[str, ...], simulation: np.ndarray) -> float:
    labs = [_lab(np.clip(simulation @ _linear(c), 0, 1)) for c in colours]
    return min(float(np.linalg.norm(a - b)) for a, b in itertools.combinations(labs, 2))


def test_the_palette_opens_with_tol_light():
    assert PALETTE[:9] == TOL_LIGHT
    assert TOL_LIGHT == (
        "#77aadd",
        "#ee8866",
        "#eedd88",
        "#ffaabb",
        "#99ddff",
        "#44bb99",
        "#bbcc33",
        "#aaaa00",
        "#dddddd",
    )
    assert len(set(PALETTE)) == len(PALETTE) == 16


@pytest.mark.parametrize("vision", sorted(SIMULATIONS))
def test_the_first_nine_devices_stay_distinct(vision):
    assert closest(PALETTE[:9], SIMULATIONS[vision]) >= VISIBLE


def test_the_check_tells_a_confusable_pair():
    # pink and grey, the pair the earlier ColorBrewer pastels lost under deuteranopia
    assert closest(("#fccde5", "#d9d9d9"), SIMULATIONS["deuteranopia"]) < VISIBLE
