"""The figures stay readable without colour vision: every kind of tree node, and every method in the depth chart,
has a shape of its own besides its colour.

How the kinds stay distinguishable: by shape. The tree draws the root as a filled circle, an accepted draft as a
diamond, a verified but rejected draft as an x, the bonus token (the target's own) as a star and a candidate the
rerank pruned as an open circle, and its legend shows each shape beside its name. The colours alone do not carry
it: simulated for a deuteranope, the accepted green and the rejected red are a few CIELAB units apart (about 5 for
Machado 2009 and Viénot 1999 at full severity), where about 2 is barely noticeable side by side and dots a few
pixels wide need far more. The depth chart does the same for its methods: EAGLE-2's blue and DDD's purple are
about as close for a deuteranope, so EAGLE-2 draws a thick stepped line, DDD circles and the cost rule diamonds,
and their accepted-token bars carry a fill pattern each.
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from components import load_race
from components.charts import METHOD_COLORS, depth_figure
from components.race import TREE_METHODS
from components.tree import COLORS, STATUS_NAMES, SYMBOLS, tree_figure

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "assets" / "examples").glob("*.json"))
KINDS = tuple(STATUS_NAMES)  # root, accepted, bonus, rejected, pruned
# CIELAB distance under which two small markers pass for the same colour: 2 is a just noticeable difference for
# large patches side by side, and markers 8-15 px across need several times that.
CONFUSABLE = 20.0


def node_traces(fig) -> dict[str, object]:
    return {t.meta: t for t in fig.data if t.meta in KINDS}


@pytest.fixture(scope="module")
def full_tree():
    """A recorded step whose tree shows every kind of node (candidates the rerank dropped included)."""
    for path in EXAMPLES:
        race = load_race(path)
        for method in TREE_METHODS:
            trace = race.get(method)
            for step in trace.steps if trace else []:
                fig = tree_figure(step, trace, show="shown")
                if set(node_traces(fig)) == set(KINDS):
                    return fig
    pytest.fail("no shipped example has a step with a root, accepted, rejected, pruned and bonus node")


def test_every_node_kind_has_its_own_marker_symbol(full_tree):
    traces = node_traces(full_tree)
    symbols = {kind: traces[kind].marker.symbol for kind in KINDS}
    assert symbols == SYMBOLS
    assert len(set(symbols.values())) == len(KINDS), symbols
    for kind, trace in traces.items():  # the legend names each shape
        assert trace.showlegend is not False and trace.name.startswith(STATUS_NAMES[kind])
        assert trace.marker.color == COLORS[kind]


def test_the_depth_charts_methods_differ_by_more_than_colour():
    race = load_race(next(p for p in EXAMPLES if p.stem == "maths"))
    fig = depth_figure(race)
    looks = {}
    for method in TREE_METHODS:
        depth = next(t for t in fig.data if t.meta == f"{method}-depth")
        bars = next(t for t in fig.data if t.meta == f"{method}-accepted")
        markers = depth.marker.symbol if "markers" in depth.mode else None
        looks[method] = ((markers, depth.line.shape, depth.line.width), bars.marker.pattern.shape)
    lines, patterns = [look[0] for look in looks.values()], [look[1] for look in looks.values()]
    assert len(set(lines)) == len(lines) and len(set(patterns)) == len(patterns), looks
    stop, go_on = (next(t for t in fig.data if t.meta == meta) for meta in ("stop", "go-on"))
    assert stop.marker.symbol != go_on.marker.symbol


# -- simulated colour vision ---------------------------------------------------------------------------------------

def srgb(hex_colour: str) -> list[int]:
    text = hex_colour.lstrip("#")
    return [int(text[i:i + 2], 16) for i in (0, 2, 4)]


def lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB (0-255) to CIELAB under D65: the space in which a distance reads as a perceived difference."""
    c = np.asarray(rgb, dtype=float) / 255
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def simulated_distances(colours: dict[str, str]) -> dict[tuple[str, str, str, str], float]:
    """CIELAB distance between each pair of `colours` as a dichromat sees them: (simulator, deficiency, a, b)."""
    simulate = pytest.importorskip("daltonlens.simulate")
    names = list(colours)
    image = np.array([[srgb(colours[n]) for n in names]], dtype=np.uint8)
    found = {}
    for simulator in (simulate.Simulator_Machado2009(), simulate.Simulator_Vienot1999()):
        for deficiency in (simulate.Deficiency.DEUTAN, simulate.Deficiency.PROTAN):
            seen = simulator.simulate_cvd(image, deficiency, severity=1.0)[0]
            for (i, a), (j, b) in combinations(enumerate(names), 2):
                distance = float(np.linalg.norm(lab(seen[i]) - lab(seen[j])))
                found[(type(simulator).__name__, deficiency.name, a, b)] = distance
    return found


def test_kinds_that_look_alike_to_a_dichromat_differ_in_shape(full_tree):
    traces = node_traces(full_tree)
    distances = simulated_distances({kind: traces[kind].marker.color for kind in KINDS})
    alike = {key: d for key, d in distances.items() if d < CONFUSABLE}
    for (_, _, a, b), distance in alike.items():
        assert traces[a].marker.symbol != traces[b].marker.symbol, (a, b, distance)
    accepted_rejected = {key[:2]: round(d, 1) for key, d in distances.items() if key[2:] == ("accepted", "rejected")}
    print("simulated CIELAB distance, accepted vs rejected:", accepted_rejected)
    assert len(accepted_rejected) == 4  # both simulators, deuteranopia and protanopia


def test_methods_that_look_alike_to_a_dichromat_differ_in_shape():
    fig = depth_figure(load_race(next(p for p in EXAMPLES if p.stem == "maths")))
    depth = {m: next(t for t in fig.data if t.meta == f"{m}-depth") for m in TREE_METHODS}
    distances = simulated_distances({m: METHOD_COLORS[m] for m in TREE_METHODS})
    for (_, _, a, b), distance in distances.items():
        if distance < CONFUSABLE:
            look = {m: (depth[m].mode, depth[m].marker.symbol, depth[m].line.shape) for m in (a, b)}
            assert look[a] != look[b], (a, b, distance)
