"""Figures that stay legible on a phone: a narrow variant of every figure, served below 600 CSS px.

A figure drawn for a desktop page (say 10 in wide, three panels side by side) is scaled
down to a phone's 358-px text column: its 8-point labels end up 4 px high. After
:func:`phone_figures`, a notebook (the book's chapters call it first) displays each
matplotlib figure as ``text/html``: a ``<picture>`` whose ``<img>`` is the figure as drawn
and whose ``<source media="(max-width: 599px)">`` is a copy redrawn for a phone
(:func:`narrow_variant`: its panels stacked in one column, :data:`NARROW_WIDTH_IN` wide), so
that the browser picks the one that fits. The ``image/png`` representation stays, for the
front ends and exports that do not show HTML.

Every PNG of a figure that shows no values by colour is stored in a palette of at most 256
colours where that is smaller (:func:`compact_png`): such figures are about a third of their
size as matplotlib writes them, so that a page of them loads on a phone's connection and a
chapter stays a notebook that opens quickly. A figure with a colour map (an image, a colour bar, points
coloured by value) keeps all its colours: a palette would band its colour bar and merge
neighbouring values.

The ``<picture>`` carries ``data-min-font-px`` attributes: the smallest font of each variant,
in pixels of its PNG; a test multiplies them by the scale at which a page shows the image.
"""
from __future__ import annotations

import base64
import html
import pickle

import numpy as np

__all__ = ["NARROW_WIDTH_IN", "PHONE_MEDIA", "narrow_variant", "compact_png", "figure_html", "figure_png",
           "phone_figures"]

#: Width of the phone variant, inches (at the inline backend's 100 dpi, within the 343-CSS-px
#: text column of a 390-px phone, where it is shown unscaled).
NARROW_WIDTH_IN = 3.4
#: When the phone variant is shown.
PHONE_MEDIA = "(max-width: 599px)"
# height of one stacked panel, inches: kept between these
_PANEL_HEIGHT = (1.9, 3.0)


def _panels(fig):
    """Groups of axes placed by a grid (twins share their parent's cell), in reading order."""
    cells = {}
    for ax in fig.axes:
        spec = ax.get_subplotspec()
        if spec is None:  # colour bars and insets follow their parent
            continue
        key = (spec.rowspan.start, spec.colspan.start, spec.rowspan.stop, spec.colspan.stop)
        cells.setdefault(key, []).append(ax)
    return [cells[k] for k in sorted(cells)]


def narrow_variant(fig):
    """A copy of ``fig`` laid out for a phone, or ``None`` where ``fig`` is narrow already.

    The copy is :data:`NARROW_WIDTH_IN` wide; panels of a grid are stacked in one column in
    reading order (row by row), each keeping roughly its aspect ratio (one panel keeps its
    height); tick labels that a
    shared axis hid are shown again, titles and legend labels wrap.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        Not changed.

    Returns
    -------
    matplotlib.figure.Figure or None
        A new figure (not registered with pyplot), or ``None`` when ``fig`` is at most
        :data:`NARROW_WIDTH_IN` wide or cannot be laid out that narrow (its layout engine
        collapses the axes). Where only a wider copy can be laid out, the copy is that wide.
    """
    from matplotlib.gridspec import GridSpec

    width, height = fig.get_size_inches()
    if width <= NARROW_WIDTH_IN + 0.05:
        return None
    copy = pickle.loads(pickle.dumps(fig))
    # axes legends drawn outside their axes (beside or below them) go below the figure
    copy.draw_without_rendering()
    outside = [ax.get_legend() for ax in copy.axes if ax.get_legend() is not None
               and not ax.get_window_extent().expanded(1.05, 1.05).contains(*ax.get_legend().get_window_extent().p0)]
    panels = _panels(copy)
    ncols = max((p[0].get_subplotspec().get_gridspec().get_geometry()[1] for p in panels), default=1)
    nrows = max((p[0].get_subplotspec().get_gridspec().get_geometry()[0] for p in panels), default=1)
    if len(panels) > 1 and ncols > 1:
        panel_h = float(np.clip((height / nrows) * NARROW_WIDTH_IN / (width / ncols), *_PANEL_HEIGHT))
        extra = 0.5 + 0.25 * len(copy.legends)  # a figure legend and the title
        copy.set_size_inches(NARROW_WIDTH_IN, panel_h * len(panels) + extra)
        grid = GridSpec(len(panels), 1, figure=copy)
        for k, group in enumerate(panels):
            for ax in group:
                ax.set_subplotspec(grid[k, 0])
                ax.tick_params(labelbottom=True)
                if ax.yaxis.get_label_position() == "left":
                    ax.tick_params(labelleft=True)
    else:
        # (as tall as drawn: its legends and titles keep their height when the axes narrow)
        copy.set_size_inches(NARROW_WIDTH_IN, max(height, _PANEL_HEIGHT[0]))
    # titles wrap: the figure's to its width, an axes' to a little over half of it (a colour
    # bar beside the axes takes the rest)
    for text, fraction in [(copy._suptitle, 0.85)] + [(ax.title, 0.6) for ax in copy.axes]:
        if text is not None and text.get_text():
            text.set_text(_wrap(text.get_text(), text.get_fontsize(), fraction))
    # the tick labels of a horizontal colour bar slant, so that they do not overlap
    for ax in copy.axes:
        if ax.get_subplotspec() is None and ax.get_position().width > ax.get_position().height:
            ax.tick_params(axis="x", labelrotation=40)
    # legend labels wrap too (inside an axes, to a little over half its width); a figure's
    # legend is made anew in at most two columns
    for legend in [ax.get_legend() for ax in copy.axes if ax.get_legend() is not None]:
        if legend not in outside:
            for text in legend.get_texts():
                text.set_text(_wrap(text.get_text(), text.get_fontsize(), 0.6))
    for legend in list(copy.legends) + outside:
        _narrow_figure_legend(copy, legend)
    # what sticks out of the figure (a legend placed beside its axes, long tick labels) widens
    # the tight PNG: narrow the figure until the PNG fits
    # (no narrower than where constrained layout gives up: it warns that the axes collapsed)
    good = None
    for _ in range(4):
        if not _lays_out(copy):
            if good is None:
                return None
            copy.set_size_inches(*good)
            break
        good = tuple(copy.get_size_inches())
        tight = copy.get_tightbbox().width
        if tight <= NARROW_WIDTH_IN + 0.05:
            break
        copy.set_size_inches(max(good[0] * NARROW_WIDTH_IN / tight, 1.5), good[1])
    return copy


def _narrow_figure_legend(fig, legend) -> None:
    """Replace ``legend`` (a figure's, or an axes' drawn outside it) by a figure legend in at
    most two columns (one for long labels), labels wrapped, where the figure had it (below the
    figure for an axes' legend),
    at the same place (``Legend.set_ncols`` does not lay out a drawn legend again)."""
    from matplotlib.legend import Legend

    texts = legend.get_texts()
    labels = [_wrap(t.get_text(), t.get_fontsize()) for t in texts]
    outside = getattr(legend, "_outside_loc", None) if legend in fig.legends else "lower"
    codes = {code: name for name, code in Legend.codes.items()}
    loc = f"outside {outside} center" if outside in ("lower", "upper") else codes.get(legend._loc, "best")
    fontsize = texts[0].get_fontsize() if texts else None
    # the artists the legend was made from, found by label on the figure's axes: an errorbar's
    # (or a bar's) container, of which ``legend_handles`` keeps only the line, without the marker
    originals = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            originals.setdefault(label, handle)
    handles = [originals.get(t.get_text(), h) for t, h in zip(texts, legend.legend_handles)]
    legend.remove()
    # two columns of short labels fit side by side
    ncols = min(legend._ncols, 2 if max(map(_shown_length, labels), default=0) <= 18 else 1)
    fig.legend(handles, labels, loc=loc, ncols=ncols, fontsize=fontsize, frameon=legend.get_frame_on())


def _wrap(text: str, fontsize: float, fraction: float = 0.85) -> str:
    """``text`` in lines that fit ``fraction`` of :data:`NARROW_WIDTH_IN` at ``fontsize``
    points (0.6 em a character), never breaking inside ``$...$`` math."""
    import re

    width = max(int(fraction * NARROW_WIDTH_IN * 72 / (0.6 * fontsize)), 12)
    lines = []
    for paragraph in text.split("\n"):
        line = ""
        for token in re.findall(r"\$[^$]*\$|[^\s$]+", paragraph):
            shown = len(re.sub(r"\\[a-zA-Z]+|[{}$^_]", "x", token)) if token.startswith("$") else len(token)
            if line and _shown_length(line) + 1 + shown > width:
                lines.append(line)
                line = token
            else:
                line = f"{line} {token}" if line else token
        lines.append(line)
    return "\n".join(lines)


def _shown_length(line: str) -> int:
    """Characters of ``line`` as drawn, a math command (``\\alpha``) counting as one."""
    import re

    return len(re.sub(r"\\[a-zA-Z]+", "x", line.replace("$", "")))


def _lays_out(fig) -> bool:
    """Print ``fig`` as :func:`figure_html` does (a PNG, discarded); ``False`` where its
    layout engine collapsed the axes (it warns; a draw without printing may not)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _png(fig)
    return not any("collapsed" in str(w.message) for w in caught)


def _png(fig) -> bytes | None:
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight", base64=False)


def compact_png(png: bytes) -> bytes:
    """``png`` with its colours in a palette of at most 256, where that makes it smaller.

    A matplotlib figure of lines, markers and bands has a few colours of its own and the shades
    that anti-aliasing mixes between them and the background, a few hundred to a few thousand
    in all: Pillow's median cut (no dithering) keeps the figure's own colours and maps the mixed
    shades to near ones. On the book's 41 figures at most one pixel in 200 changes by more than
    8 of 255 levels in a channel and one in 1200 by more than 24 (edges of anti-aliased lines);
    a PNG of at most 256 colours is kept exactly. The file is 36 per cent of matplotlib's on
    average. Not for a figure with a colour map (:func:`figure_html` leaves those alone): the
    palette bands a colour bar.

    Parameters
    ----------
    png : bytes
        A PNG file. One with transparency (an alpha channel with a pixel below opaque, or a
        tRNS chunk) or in a mode other than 8-bit RGB(A), grey (with alpha) or palette is
        returned as it is.

    Returns
    -------
    bytes
        The palette PNG, or ``png`` unchanged where that is not smaller.
    """
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png))
    if image.mode not in ("RGB", "RGBA", "L", "LA", "P") or "transparency" in image.info:
        return png  # 16-bit or other modes; transparency given by a tRNS chunk
    if image.mode in ("RGBA", "LA") and image.getchannel("A").getextrema()[0] < 255:
        return png
    palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                            dither=Image.Dither.NONE)
    out = io.BytesIO()
    palette.save(out, "PNG", optimize=True, dpi=image.info.get("dpi", (72, 72)))
    return out.getvalue() if out.tell() < len(png) else png


def _shows_values_by_colour(fig) -> bool:
    """Whether ``fig`` maps numbers to colours (an image, a mesh, a colour bar, points or
    patches coloured by value): a palette would merge neighbouring values there."""
    from matplotlib.cm import ScalarMappable

    return bool(fig.findobj(lambda artist: isinstance(artist, ScalarMappable) and artist.get_array() is not None))


def _stored_png(fig, png: bytes) -> bytes:
    """``png`` of ``fig`` as stored: in a palette, unless ``fig`` shows values by colour."""
    return png if _shows_values_by_colour(fig) else compact_png(png)


def figure_png(fig) -> str | None:
    """The ``image/png`` display of ``fig``: as the inline backend prints it (tight bounding
    box), in a palette (:func:`compact_png`) unless it shows values by colour, base64-encoded;
    ``None`` for a figure without axes."""
    png = _png(fig)
    return None if png is None else base64.b64encode(_stored_png(fig, png)).decode()


def _min_font_px(fig) -> float:
    """Smallest visible text of ``fig`` (after drawing), in pixels of its PNG."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes, default=float("nan")) / 72.0 * fig.dpi


def _alt(fig) -> str:
    """What the figure shows (the image's alternative text): :func:`attnlab.alt_text.alt_text`."""
    from .alt_text import alt_text
    from .plots import COLOR_WORDS, COLORS

    return alt_text(fig, _panels(fig) or None, {COLORS[k].lower(): w for k, w in COLOR_WORDS.items()})


def figure_html(fig) -> str | None:
    """The ``<picture>`` of ``fig``: the figure, and its phone variant where it is wider.

    Parameters
    ----------
    fig : matplotlib.figure.Figure

    Returns
    -------
    str or None
        HTML with the PNGs inline (``data:`` URIs; in a palette, :func:`compact_png`, unless the
        figure shows values by colour); ``None`` for a figure without axes,
        which IPython does not draw either.
    """
    import matplotlib.pyplot as plt

    wide = _png(fig)
    if wide is None:  # (IPython draws nothing for a figure without axes)
        return None
    wide = _stored_png(fig, wide)
    attrs = {"data-min-font-px": f"{_min_font_px(fig):.2f}"}
    source = ""
    narrow = narrow_variant(fig)
    if narrow is not None:
        try:
            import warnings

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                png = _png(narrow) or b""
            # (a variant whose axes collapsed when printed is left out: the page scales the figure)
            if png and not any("collapsed" in str(w.message) for w in caught):
                attrs["data-narrow-min-font-px"] = f"{_min_font_px(narrow):.2f}"
                source = (f'<source media="{PHONE_MEDIA}" '
                          f'srcset="data:image/png;base64,{base64.b64encode(_stored_png(fig, png)).decode()}">')
        finally:
            plt.close(narrow)
    data = " ".join(f'{k}="{v}"' for k, v in attrs.items())
    return (f'<picture class="attnlab-figure" {data}>{source}'
            f'<img src="data:image/png;base64,{base64.b64encode(wide).decode()}" '
            f'alt="{html.escape(_alt(fig))}"></picture>')


def phone_figures(shell=None) -> None:
    """Display matplotlib figures as :func:`figure_html` (and their ``image/png`` as
    :func:`figure_png`) in this IPython session.

    Call it after ``%matplotlib inline``: that magic resets the display of figures.

    Parameters
    ----------
    shell : IPython.core.interactiveshell.InteractiveShell, optional
        Default: the running one; outside IPython nothing happens.
    """
    from matplotlib.figure import Figure

    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is None:
        return
    shell.display_formatter.formatters["text/html"].for_type(Figure, figure_html)
    shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)
