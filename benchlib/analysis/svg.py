"""A chart's SVG as vl-convert draws it, lean (``lean_svg``): the same pixels in a third of the
bytes. ``charts.render`` writes every SVG through it."""
from __future__ import annotations

import re

NO_DRAWING = ("class", "pointer-events", "role")
"""SVG attributes of vl-convert's charts that change nothing drawn; ``lean_svg`` drops them, every
``aria-*`` (a chart is shown as an ``<img>``, whose alt text is what a screen reader reads) and
``opacity="1"``."""
INHERITED = {"fill": None, "fill-opacity": None, "font-family": None, "font-size": None, "font-style": None,
             "font-weight": None, "stroke": None, "stroke-dasharray": None, "stroke-linecap": None,
             "stroke-linejoin": None, "stroke-miterlimit": None, "stroke-opacity": None, "stroke-width": "1",
             "text-anchor": None}
"""SVG attributes an element inherits from its group, with their initial value where Vega relies on it."""
_SVG = "{http://www.w3.org/2000/svg}"


def lean_svg(text: str) -> str:
    """A chart's SVG with the same pixels in a third of the bytes: without ``NO_DRAWING``, without
    elements that draw nothing (transparent, hidden, an empty text or group, Vega's zero-size
    backgrounds) or zero coordinates, a text placed at x, y rather than translated, a run of lines
    (ticks, grid) as one path, an inherited attribute that all of a group's children share set once
    on the group and not repeated where inherited, and groups without attributes unwrapped. Every
    SVG this module renders is lean, so a committed study's charts drawn again are the same bytes."""
    import xml.etree.ElementTree as ET
    for prefix, uri in (("", "http://www.w3.org/2000/svg"), ("xlink", "http://www.w3.org/1999/xlink")):
        ET.register_namespace(prefix, uri)
    root = ET.fromstring(text)
    for el in root.iter(_SVG + "text"):  # a text placed by a translation alone: at x, y
        if (m := _TRANSLATE.fullmatch(el.get("transform", ""))) and not ({"x", "y"} & set(el.attrib)):
            del el.attrib["transform"]
            el.set("x", m[1]), el.set("y", m[2])
    for el in root.iter():
        zero = ("x", "y", "x1", "y1", "x2", "y2") if el.tag[len(_SVG):] in ("line", "rect", "text", "path") else ()
        for k in [k for k, v in el.attrib.items() if k in NO_DRAWING or k.startswith("aria-") or (k, v) == ("opacity", "1")
                  or (k in zero and v == "0") or (k, v) == ("transform", "translate(0,0)")]:
            del el.attrib[k]
    lean, before = ET.tostring(root, encoding="unicode"), None
    while lean != before:  # each step can make another possible: until none changes anything
        _prune(root)
        _lines_as_paths(root)
        _hoist(root)
        _drop_inherited(root, dict(INHERITED))
        _unwrap(root)
        for el in root.iter(_SVG + "path"):
            el.set("d", _relative(el.get("d", "")))
        for el in root.iter():  # in one order, however they came to be there
            el.attrib = dict(sorted(el.attrib.items()))
        lean, before = ET.tostring(root, encoding="unicode"), lean
    return lean


_TRANSLATE = re.compile(r"translate\((-?[\d.]+),(-?[\d.]+)\)")
_POLYLINE = re.compile(r"M(-?\d+(?:\.\d)?),(-?\d+(?:\.\d)?)((?:L-?\d+(?:\.\d)?,-?\d+(?:\.\d)?){2,})(Z?)")


def _tenths(v: str) -> int:
    whole, _, tenth = v.lstrip("-").partition(".")
    return (-1 if v.startswith("-") else 1) * (int(whole) * 10 + int(tenth or 0))


def _tenths_text(t: int) -> str:
    sign, (whole, tenth) = "-" if t < 0 else "", divmod(abs(t), 10)
    return sign + (str(whole) if whole or not tenth else "") + (f".{tenth}" if tenth else "")


def _relative(d: str) -> str:
    """A polyline's path (a line or an area: absolute moves to a tenth of a pixel) with each
    point after the first relative to the one before, exactly: the same points in fewer bytes."""
    if (m := _POLYLINE.fullmatch(d)) is None:
        return d
    points = [(_tenths(m[1]), _tenths(m[2]))] + [(_tenths(x), _tenths(y)) for x, y in
                                                  re.findall(r"L(-?[\d.]+),(-?[\d.]+)", m[3])]
    steps = [_tenths_text(v) for (x0, y0), (x1, y1) in zip(points, points[1:]) for v in (x1 - x0, y1 - y0)]
    return f"M{m[1]},{m[2]}l" + "".join(("" if k == 0 or v.startswith("-") else ",") + v
                                        for k, v in enumerate(steps)) + m[4]


def _lines_as_paths(el) -> None:
    """Each run of sibling lines that differ only in where they are (an axis's ticks, a grid)
    drawn as one path of as many segments."""
    def segment(line) -> str | None:
        m = _TRANSLATE.fullmatch(line.get("transform", "translate(0,0)"))
        if line.tag != _SVG + "line" or m is None or {"x1", "y1"} & set(line.attrib):
            return None
        dx, dy = line.get("x2", "0"), line.get("y2", "0")
        return f"M{m[1]},{m[2]}" + (f"h{dx}" if dy == "0" else f"v{dy}" if dx == "0" else f"l{dx},{dy}")

    def rest(line) -> dict:
        return {k: v for k, v in line.attrib.items() if k not in ("transform", "x2", "y2")}
    i = 0
    while i < len(el):
        j = i
        while j < len(el) and segment(el[j]) is not None and rest(el[j]) == rest(el[i]):
            j += 1
        if j - i > 1:
            path = el.makeelement(_SVG + "path", {"d": "".join(segment(line) for line in el[i:j]), **rest(el[i])})
            el[i:j] = [path]
        else:
            _lines_as_paths(el[i])
        i += 1


def _draws_nothing(el) -> bool:
    tag = el.tag[len(_SVG):]
    if el.get("opacity") == "0" or el.get("display") == "none" or (tag == "g" and not len(el) and not el.get("id")):
        return True
    if tag == "text":
        return not (el.text or "").strip() and not len(el)
    return tag == "path" and el.get("d") == "M0,0h0v0h0Z" and not (el.get("fill") or el.get("stroke"))


def _prune(el) -> None:
    for child in list(el):
        _prune(child)
        if _draws_nothing(child):
            el.remove(child)


def _hoist(el) -> None:
    """Each ``INHERITED`` attribute that every child of a group sets to one value, set once on the group."""
    for child in el:
        _hoist(child)
    if el.tag[len(_SVG):] not in ("g", "svg") or len(el) < 2:
        return
    for k in INHERITED:
        values = {c.get(k) for c in el}
        if len(values) == 1 and None not in values and el.get(k) in (None, *values):
            el.set(k, values.pop())
            for c in el:
                del c.attrib[k]


def _drop_inherited(el, inherited: dict) -> None:
    for k in [k for k, v in el.attrib.items() if k in INHERITED and inherited.get(k) == v]:
        del el.attrib[k]
    inherited = {**inherited, **{k: v for k, v in el.attrib.items() if k in INHERITED}}
    for child in el:
        _drop_inherited(child, inherited)


def _unwrap(el) -> None:
    """Each group without attributes replaced by its children (it changes nothing they draw), and
    a group of one child with inherited attributes alone by its child holding them."""
    i = 0
    while i < len(el):
        child = el[i]
        _unwrap(child)
        if child.tag == _SVG + "g" and len(child) == 1 and set(child.attrib) <= set(INHERITED):
            child[0].attrib = {**child.attrib, **child[0].attrib}
            child.attrib.clear()
        if child.tag == _SVG + "g" and not child.attrib and not (child.text or "").strip():
            el[i:i + 1] = list(child)
            i += len(child)
        else:
            i += 1
