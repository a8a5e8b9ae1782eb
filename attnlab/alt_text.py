"""The alternative text of a matplotlib figure: what it shows, in words.

A screen reader reads a figure's ``alt`` text in place of the image (the book's figures
are ``<img>`` elements written by :func:`attnlab.responsive.figure_html`). The text says,
panel by panel, the title, which quantity is plotted against which and over what range,
and which curve is which (its legend label, colour, line style and marker, so that a
reader who sees the figure in greyscale or with a colour-vision deficiency can match
the words to the curves); :func:`describe` puts the point the figure makes in front.

The text reads ``Figure. <point>. What it shows: <title>. <panels>.``: the point, where
one was attached, always comes before :data:`SHOWS` (a test of the built book looks for it).
"""
from __future__ import annotations

import numpy as np

__all__ = ["SHOWS", "describe", "point", "alt_text"]

#: What separates the point of a figure from the description of what it draws.
SHOWS = "What it shows:"

_LINESTYLES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}
_MARKERS = {"o": "circles", "s": "squares", "^": "triangles", "v": "triangles", ">": "triangles",
            "D": "diamonds", "d": "diamonds", "x": "crosses", "+": "plus signs", "*": "stars", ".": "dots"}


def describe(fig, point: str) -> None:
    """Attach the point a figure makes; :func:`alt_text` says it first.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    point : str
        One or two sentences, e.g. ``"The semantic branch's training loss drops below
        the positional one at alpha_c = 1.24."``.
    """
    fig.attnlab_point = str(point)


def point(fig) -> str | None:
    """The point attached to ``fig`` by :func:`describe` (``None`` where none is), e.g. to
    print it under the figure, so that its numbers are in the text too."""
    return getattr(fig, "attnlab_point", None)


def _clean(text: str) -> str:
    return text.replace("$", "").replace("\\alpha", "α").replace("\\omega", "ω").replace("\\theta", "θ") \
        .replace("\\varepsilon", "ε").replace("\\epsilon", "ε").replace("\\sigma", "σ").replace("\\lambda", "λ") \
        .replace("\\mathrm", "").replace("{", "").replace("}", "").replace("\\", "")


def _line_words(handle, colours) -> str:
    """Colour, line style and marker of a legend handle, in words (empty where unknown)."""
    from matplotlib.colors import to_hex

    words = []
    get = lambda name: getattr(handle, name)() if hasattr(handle, name) else None  # noqa: E731
    colour = get("get_color")
    if colour is None and hasattr(handle, "get_facecolor"):
        colour = handle.get_facecolor()
    try:
        name = colours.get(to_hex(colour).lower()) if colour is not None else None
    except (ValueError, TypeError):
        name = None
    if name:
        words.append(name)
    # (a collection's handle, e.g. of error bars, gives lists here: not described)
    style = get("get_linestyle")
    if isinstance(style, str) and style in _LINESTYLES:
        words.append(f"{_LINESTYLES[style]} line")
    marker = get("get_marker")
    if isinstance(marker, str) and marker in _MARKERS:
        words.append(_MARKERS[marker])
    return ", ".join(words)


def _panel(ax, colours) -> str:
    title = _clean(ax.get_title() or "")
    y, x = _clean(ax.get_ylabel()), _clean(ax.get_xlabel())
    text = title
    if x or y:
        lo, hi = ax.dataLim.x0, ax.dataLim.x1
        if not (np.isfinite(lo) and np.isfinite(hi)) or lo > hi:
            lo, hi = ax.get_xlim()
        symbol = x.split("=")[0].split()[-1] if "=" in x else x
        what = " against ".join(t for t in (y, x) if t)
        text += f"{': ' if title else ''}{what}" + (f" ({symbol} from {lo:.3g} to {hi:.3g})" if x else "")
    legend = ax.get_legend()
    if legend is not None:
        entries = []
        for handle, label in zip(legend.legend_handles, legend.get_texts()):
            words = _line_words(handle, colours) if handle is not None else ""
            entries.append(_clean(label.get_text()) + (f" ({words})" if words else ""))
        if entries:
            text += ("; " if text else "") + "curves: " + ", ".join(entries)
    return text


def alt_text(fig, panels=None, colours=None) -> str:
    """What ``fig`` shows: its point (:func:`describe`), then :data:`SHOWS`, title and each panel.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    panels : list of list of Axes, optional
        Groups of axes that form one panel (the first of each is described); default
        every axes of the figure that has a label or a title.
    colours : dict of str to str, optional
        Hex colour (lower case, ``"#rrggbb"``) -> its name in words; a curve of another
        colour is described without one.

    Returns
    -------
    str
        Plain text, without TeX dollars.
    """
    parts = []
    if fig._suptitle is not None and fig._suptitle.get_text():
        parts.append(_clean(fig._suptitle.get_text()))
    groups = panels or [[ax] for ax in fig.axes]
    described = [_panel(group[0], colours or {}) for group in groups]
    described = [d for d in described if d]
    if len(described) > 1:
        described = [f"panel {k + 1}, {d}" for k, d in enumerate(described)]
    parts += described
    said = _clean(point(fig) or "").strip().rstrip(".")
    if not (said or parts):
        return "Figure"
    words = ["Figure."] + ([said + "."] if said else []) + ([f"{SHOWS} " + ". ".join(parts) + "."] if parts else [])
    return " ".join(words)
