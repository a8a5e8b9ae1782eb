"""Figures with the book's colour convention: positional, semantic, linear baseline.

Every function draws on a given matplotlib ``Axes`` (or a new figure) and
returns the ``Axes``; nothing here computes physics.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .alt_text import describe
from .experiments.store import save_figure_atomic
from .extrapolation import first_sign_change, gd_gap_map
from .params import DEFAULT_A, DEFAULT_OMEGA

__all__ = ["COLORS", "COLOR_WORDS", "MARKERS", "LINESTYLES", "DASHES", "plot_phase_diagram", "plot_gd_gap_map", "new_axes", "CMAPS", "plot_attention_matrix",
           "plot_branch_curves", "plot_points", "plot_linear_level", "mark_threshold",
           "plot_training_curves", "plot_branch_bars", "plot_gaussian_check", "plot_token_attention",
           "attention_colorbar", "plot_spinodals", "plot_spinodal_probes", "plot_random_start", "D_STYLES", "INIT_KINDS", "START_NAMES", "INIT_LABELS", "LEAD_MIN", "on_branch_rows",
           "plot_simulation_runs", "plot_se_table",
           "plot_arbiter", "SWEEP_PANELS",
           "plot_sweep", "plot_phase_map", "plot_explorer_overview", "branch_crossing", "gap_map_point"]

#: One colour per concept, kept across the whole book. Chosen so that every pair stays apart
#: under simulated deuteranopia, protanopia and tritanopia (Machado, Oliveira & Fernandes 2009,
#: full severity, as colorspacious implements it: CAM02-UCS distance >= 10 for every pair), with
#: a contrast on white >= 4.5:1 for the branch colours (the explorers write the phase's name in
#: them) and >= 3:1 for the others (WCAG 2.1, 1.4.11); green and reddish purple are Okabe & Ito's
#: (2008). tests/test_accessibility.py checks both. In greyscale the branches are told apart by
#: :data:`MARKERS` and :data:`LINESTYLES`.
COLORS = {
    "positional": "#0c5da5",  # blue
    "semantic": "#d1421a",    # red (vermilion)
    "linear": "#6a6a6a",      # grey
    "alpha_c": "#000000",
    "alpha_l": "#009e73",     # (bluish) green
    # neither positional nor semantic: the two tokens of a sample (e.g. h_1 and h_2)
    "token_1": "#cc79a7",     # reddish purple
    "token_2": "#6b4c2a",     # brown
}

#: Each colour's name in words (the alternative text of figures, :mod:`attnlab.alt_text`).
COLOR_WORDS = {"positional": "blue", "semantic": "red", "linear": "grey", "alpha_c": "black", "alpha_l": "green",
               "token_1": "purple", "token_2": "brown"}

#: The second channel beside colour (read in greyscale and under colour-vision deficiency):
#: each branch's marker, drawn on its curves and its simulation points.
MARKERS = {"positional": "s", "semantic": "o", "linear": "^"}
#: Line style of each branch's theory curve (matplotlib), and the same as Bokeh dashes.
LINESTYLES = {"positional": "--", "semantic": "-"}
DASHES = {"positional": "dashed", "semantic": "solid"}


def new_axes(ax=None, figsize=(5.0, 3.6)):
    """Return ``ax`` or a fresh ``Axes`` of a new figure."""
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    return ax


def plot_phase_diagram(rows, ax=None, path=None, alpha_max=None, point=None):
    """Plot ``alpha_c(omega)`` and ``alpha_l(omega)``.

    Parameters
    ----------
    rows : list of dict
        Each with keys ``omega``, ``alpha_c``, ``alpha_l`` (e.g.
        ``[t.to_dict() for t in phase_diagram(...)]``); ``nan`` where a threshold
        was not found in the search interval.
    ax : matplotlib Axes, optional
    path : str, optional
        If given, save the figure there.
    alpha_max : float, optional
        Upper end of the thresholds' search: where ``alpha_c`` was found but
        ``alpha_l`` was not, a marker at ``alpha_max`` says that ``alpha_l`` lies
        beyond it (instead of the line just stopping).
    point : str, optional
        The point the figure makes (its alternative text, :func:`attnlab.alt_text.describe`);
        default: where the phases lie and the range of ``alpha_c``, from ``rows``.

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    omega = np.array([r["omega"] for r in rows])
    ac = np.array([r["alpha_c"] for r in rows])
    al = np.array([r["alpha_l"] for r in rows])
    right = np.nanmax(np.r_[ac, al, alpha_max if alpha_max is not None else np.nan]) * 1.2
    ax.fill_betweenx(omega, 0, ac, color=COLORS["positional"], alpha=0.15, label="positional minimum lower")
    ax.fill_betweenx(omega, ac, right, color=COLORS["semantic"], alpha=0.12, label="semantic minimum lower")
    _threshold_lines(ax, omega, ac, al)
    beyond = np.isfinite(ac) & ~np.isfinite(al)
    if alpha_max is not None and beyond.any():
        ax.plot(np.full(beyond.sum(), alpha_max), omega[beyond], ">", color=COLORS["alpha_l"], ms=8, clip_on=False,
                label=rf"$\alpha_l > {alpha_max:g}$ (beyond the search)")
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional weight $\omega$")
    ax.legend(fontsize=8, loc="best")
    describe(ax.figure, point or _phase_diagram_point(omega, ac, al))
    if path:
        save_figure_atomic(ax.figure, path, dpi=150)
    return ax


def plot_spinodals(rows, ax=None, alpha_max=3.0):
    """Add the spinodal lines and the coexistence region to a phase diagram.

    Parameters
    ----------
    rows : list of dict or dict of arrays
        ``omega``, ``alpha_s_semantic`` (above it the semantic minimum exists) and
        ``alpha_s_positional`` (below it the positional one exists; NaN: beyond the search),
        optionally ``alpha_min`` (the search's start: a semantic spinodal there means the semantic
        minimum exists all the way down, and the region is shaded from 0), e.g. ``book/_data/spinodals.csv`` or :meth:`~attnlab.theory.spinodals.Spinodals.to_dict` rows.
    ax : matplotlib Axes, optional
    alpha_max : float
        Right edge of the figure: a positional spinodal beyond it (or NaN) shades to the edge.

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    omega, edge, line = _spinodal_columns(rows, alpha_max)
    left, right = edge["semantic"], edge["positional"]
    ax.fill_betweenx(omega, left, right, where=np.isfinite(left) & (right > left), facecolor="none",
                     edgecolor="0.35", hatch="//", linewidth=0.0, label="coexistence: both minima exist")
    ax.plot(line["semantic"], omega, ":^", color=COLORS["semantic"], label=r"$\alpha_s$ semantic (semantic minimum appears)")
    ax.plot(line["positional"], omega, "-.v", color=COLORS["positional"],
            label=r"$\alpha_s$ positional (positional minimum ends)")
    return ax


def _spinodal_columns(rows, alpha_max: float) -> tuple:
    """``omega`` (sorted), each branch's spinodal as an edge of a region (a semantic minimum that
    exists down to the search's start: 0; a positional one that ends beyond ``alpha_max`` or
    never: ``alpha_max``) and as a line (NaN in those two cases)."""
    cols = rows if isinstance(rows, dict) else {k: [r[k] for r in rows] for k in rows[0]}
    omega = np.asarray(cols["omega"], dtype=float)
    order = np.argsort(omega)
    sem = np.asarray(cols["alpha_s_semantic"], dtype=float)[order]
    pos = np.asarray(cols["alpha_s_positional"], dtype=float)[order]
    low = np.asarray(cols["alpha_min"], dtype=float)[order] if "alpha_min" in cols else np.zeros_like(sem)
    everywhere = sem <= low * (1 + 1e-9)  # the semantic minimum exists down to the search's start
    edge = {"semantic": np.where(everywhere, 0.0, sem),
            "positional": np.where(np.isfinite(pos), np.minimum(pos, alpha_max), alpha_max)}
    line = {"semantic": np.where(everywhere, np.nan, sem), "positional": np.where(pos <= alpha_max, pos, np.nan)}
    return omega[order], edge, line


def plot_spinodal_probes(default, held, ax=None, alpha_max=3.0):
    """Each branch's spinodal by both stability probes, and the band between them.

    Between the default (``basins="redescend"``) and the held probe's spinodal the state
    evolution cannot tell whether the minimum exists (``SEResult.probes_agree`` is False there;
    book Chapter 6, "How sure is a spinodal?").

    Parameters
    ----------
    default, held : list of dict or dict of arrays
        Rows of :func:`~attnlab.theory.spinodals.find_spinodals` at the same ``omega`` values
        with ``basins="redescend"`` and ``"held"`` (``omega``, ``alpha_s_semantic``,
        ``alpha_s_positional``, optionally ``alpha_min``; ``book/_data/spinodals.csv`` and
        ``spinodals_held.csv``).
    ax : matplotlib Axes, optional
    alpha_max : float
        Right edge: a positional spinodal beyond it (or NaN) is drawn at the edge.

    Returns
    -------
    ax : matplotlib Axes

    Raises
    ------
    ValueError
        If ``default`` and ``held`` do not have the same ``omega`` values.
    """
    ax = new_axes(ax)
    omega, edge, line = _spinodal_columns(default, alpha_max)
    omega_h, edge_h, line_h = _spinodal_columns(held, alpha_max)
    if omega.shape != omega_h.shape or not np.allclose(omega, omega_h):
        raise ValueError(f"default and held must have the same omega values, got {omega.tolist()} and "
                         f"{omega_h.tolist()}")
    for b, what in (("semantic", "appears"), ("positional", "ends")):
        lo, hi = np.minimum(edge[b], edge_h[b]), np.maximum(edge[b], edge_h[b])
        ax.fill_betweenx(omega, lo, hi, where=hi > lo, color=COLORS[b], alpha=0.25, linewidth=0.0,
                         label=f"{b}: the probes disagree (cannot tell)")
        ax.plot(line[b], omega, LINESTYLES[b], marker=MARKERS[b], color=COLORS[b],
                label=rf"$\alpha_s$ {b} ({what}), default probe")
        ax.plot(line_h[b], omega, ":", marker=MARKERS[b], mfc="white", color=COLORS[b],
                label=rf"$\alpha_s$ {b} ({what}), held probe")
    ax.set_xlim(0, alpha_max)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional weight $\omega$")
    return ax


#: Line style, marker and grey of each ``d`` in :func:`plot_random_start`'s lower row, from the
#: largest ``d`` (solid, black) down; the lightest grey keeps a contrast of 3.4:1 on white.
D_STYLES = (("-", "o", "#000000"), ("--", "s", "#404040"), ("-.", "^", "#5e5e5e"), (":", "D", "#7a7a7a"),
            ("--", "*", "#8a8a8a"))


def plot_random_start(runs, theory=None, path=None, point=None, spinodals=None):
    """Where gradient descent from a random start ends: fractions of seeds against ``alpha``, one column per ``omega``.

    Parameters
    ----------
    runs : dict of str to ndarray
        Columns ``omega, alpha, d, m, theta`` of the ``random-start`` sweep (every run from the
        random start); each run is classified by :func:`attnlab.metrics.classify_outcome`. Top
        row: the fraction of each outcome at the largest ``d`` of that column's ``omega``. Lower
        row (where there is more than one ``d``): the fraction ending semantic at every ``d`` (:data:`D_STYLES`, largest first;
        at most five ``d``, the largest ones), to see whether the switch sharpens with ``d``.
    theory : dict of str to ndarray, optional
        ``omega, alpha_c`` (the ``transitions`` table): a vertical line in each panel.
    path : str or Path, optional
        Save the figure there (and close it).
    point : str, optional
        The point the figure makes (:func:`attnlab.alt_text.describe`); default: at the
        largest ``d``, the fraction of runs ending semantic at each column's largest ``alpha``,
        and that fraction at every ``d`` in the first column.
    spinodals : dict of str to ndarray, optional
        ``omega, alpha_s_semantic, alpha_s_positional, alpha_min`` (``book/_data/spinodals.csv``):
        dotted vertical lines where a spinodal falls inside a column's ``alpha`` range.

    Returns
    -------
    fig : matplotlib Figure
    """
    from .metrics import OUTCOMES, classify_outcome
    omegas = np.unique(runs["omega"])
    ds = np.unique(runs["d"])
    rows = 2 if len(ds) > 1 else 1
    fig, axes = plt.subplots(rows, len(omegas), figsize=(4.0 * len(omegas), 3.4 * rows), constrained_layout=True,
                             sharey=True, squeeze=False)
    kind = classify_outcome(runs["m"], runs["theta"])
    styles = dict(semantic=("-o", COLORS["semantic"]), positional=("-s", COLORS["positional"]),
                  mixed=("--^", "0.45"), collapsed=(":x", "0.0"))
    shown = ds[::-1][:len(D_STYLES)]

    def fractions(here, outcome):
        alphas = np.unique(runs["alpha"][here])
        return alphas, [np.mean(kind[here & np.isclose(runs["alpha"], a)] == outcome) for a in alphas]

    top_d = {w: runs["d"][np.isclose(runs["omega"], w)].max() for w in omegas}  # each column's largest d
    for col, w in enumerate(omegas):
        at_w = np.isclose(runs["omega"], w)
        ax = axes[0][col]
        for outcome in OUTCOMES:
            style, color = styles[outcome]
            ax.plot(*fractions(at_w & (runs["d"] == top_d[w]), outcome), style, color=color, ms=4, label=outcome)
        ax.set_title(rf"$\omega = {w:g}$, $d = {top_d[w]}$")
        if rows == 2:
            low = axes[1][col]
            for d, (ls, marker, grey) in zip(shown, D_STYLES):
                if (at_w & (runs["d"] == d)).any():
                    low.plot(*fractions(at_w & (runs["d"] == d), "semantic"), ls=ls, marker=marker, color=grey,
                             ms=4, label=f"d = {d}")
            low.set_title(rf"$\omega = {w:g}$: ending semantic, by $d$")
        for ax in axes[:, col]:
            _mark_alphas(ax, w, theory, spinodals, runs["alpha"][at_w].max())
            ax.set_xlabel(r"$\alpha = n/d$")
    axes[0][0].set_ylabel("fraction of random starts")
    if rows == 2:
        axes[1][0].set_ylabel("fraction ending semantic")
    axes[0][-1].legend(fontsize=7, loc="center right")
    if rows == 2:  # the first column has every d (the sweep's largest d is run at the first omega only)
        axes[1][0].legend(fontsize=7, loc="upper left")
    same = len(set(top_d.values())) == 1
    big = np.zeros(len(runs["d"]), bool)
    tops = []
    for w in omegas:
        at = np.isclose(runs["omega"], w) & (runs["d"] == top_d[w])
        big |= at
        a_max = runs["alpha"][at].max()
        top = at & np.isclose(runs["alpha"], a_max)
        tops.append(f"{np.mean(kind[top] == 'semantic'):.2f} at ω = {w:g} (α = {a_max:.2f}"
                    f"{'' if same else f', d = {top_d[w]}'})")
    text = (f"{f'At d = {ds[-1]}' if same else 'At the largest d of each panel'}, the fraction of random starts "
            f"that end semantic at the largest α of each panel is {', '.join(tops)}; most runs end {_most(kind[big])}.")
    if rows == 2:
        first = np.isclose(runs["omega"], omegas[0])
        a_top = runs["alpha"][first].max()
        by_d = [f"{np.mean(kind[here] == 'semantic'):.2f} at d = {d}" for d in shown[::-1]
                if (here := first & (runs["d"] == d) & np.isclose(runs["alpha"], a_top)).any()]
        text += f" At ω = {omegas[0]:g}, α = {a_top:.2f} the fraction ending semantic is {', '.join(by_d)}."
    describe(fig, point or text)
    if path:
        save_figure_atomic(fig, path, dpi=150)
        plt.close(fig)
    return fig


def _mark_alphas(ax, omega, theory, spinodals, alpha_max) -> None:
    """The state evolution's alpha_c (dashed) and the spinodals inside ``(0, alpha_max]`` (dotted) at ``omega``."""
    if theory is not None and "alpha_c" in theory:
        ac = theory["alpha_c"][np.isclose(theory["omega"], omega)]
        for a in ac[np.isfinite(ac)]:
            ax.axvline(a, color=COLORS["alpha_c"], lw=1, ls="--", label=r"$\alpha_c$ (SE)")
    if spinodals is None:
        return
    i = int(np.argmin(np.abs(np.asarray(spinodals["omega"]) - omega)))
    for branch in ("semantic", "positional"):
        a_s = spinodals[f"alpha_s_{branch}"][i]
        if np.isfinite(a_s) and spinodals["alpha_min"][i] < a_s <= alpha_max:
            ax.axvline(a_s, color=COLORS[branch], ls=":", lw=1.5, label=f"spinodal ({branch})")


def _most(labels) -> str:
    """The most frequent of ``labels`` and its share, in words."""
    names, counts = np.unique(np.asarray(labels), return_counts=True)
    k = int(np.argmax(counts))
    return f"{names[k]} ({counts[k] / counts.sum():.2f} of them)"


def _phase_diagram_point(omega, ac, al) -> str:
    """The point of a phase diagram, in words (its alternative text, :mod:`attnlab.alt_text`)."""
    known = np.isfinite(ac)
    if not known.any():
        return "No α_c was found in the search: the training losses of the two minima do not cross."
    i, j = np.flatnonzero(known)[[0, -1]]
    text = (f"The positional phase lies left of α_c, the semantic phase right of it; α_c goes from "
            f"{ac[i]:.2f} at ω = {omega[i]:g} to {ac[j]:.2f} at ω = {omega[j]:g}")
    both = known & np.isfinite(al)
    if both.any():
        k = np.flatnonzero(both)[0]
        text += f"; α_l, where the semantic minimum beats the linear baseline, is {al[k]:.2f} at ω = {omega[k]:g}"
    return text + "."


def plot_gd_gap_map(gap_map, ax=None, span=None):
    """The map of gradient descent under a phase diagram: which start reaches the lower loss.

    Parameters
    ----------
    gap_map : dict
        Arrays ``omega``, ``alpha``, ``gap`` of equal length (e.g.
        ``attnlab.explorers.gd_gap_map``): ``gap`` is the training loss
        reached from the informed start minus the one from the random start,
        averaged over seeds, on a grid of ``(alpha, omega)``.
    ax : matplotlib Axes, optional
    span : float, optional
        Colour scale ``[-span, span]`` (default: the largest ``|gap|``); symmetric
        logarithmic, linear within ``span / 100`` of zero, so that the small gaps
        near the transition show their sign.

    Returns
    -------
    mesh : matplotlib QuadMesh
        For a colour bar. Red: the informed (semantic) start's minimum is lower;
        blue: the random (positional) start's.
    """
    ax = new_axes(ax)
    omega, alpha, gap = (np.asarray(gap_map[k], dtype=float) for k in ("omega", "alpha", "gap"))
    ws, as_ = np.unique(omega), np.unique(alpha)
    Z = np.full((ws.size, as_.size), np.nan)
    Z[np.searchsorted(ws, omega), np.searchsorted(as_, alpha)] = gap

    def edges(c):
        mid = (c[1:] + c[:-1]) / 2 if c.size > 1 else np.array([])
        step = np.diff(c).min() if c.size > 1 else 1.0
        return np.r_[c[0] - step / 2, mid, c[-1] + step / 2]

    from matplotlib.colors import SymLogNorm

    span = span or float(np.nanmax(np.abs(gap)))
    norm = SymLogNorm(linthresh=span / 100, vmin=-span, vmax=span, base=10)
    return ax.pcolormesh(edges(as_), edges(ws), Z, cmap="RdBu", norm=norm, shading="flat")


# ----------------------------------------------------------------------------- book figures
# Added for the executable book (chapters 1-7); same colour convention as above.

#: Sequential colour maps matching :data:`COLORS` (attention matrices).
CMAPS = {"positional": "Blues", "semantic": "Reds", "linear": "Greys", None: "Greys"}

_BRANCH_LABELS = {"positional": "positional", "semantic": "semantic", "linear": "linear baseline"}


def plot_attention_matrix(M, ax=None, kind=None, title=None, labels=None, annotate=True, vmax=1.0, cmap=None):
    """Heat map of one ``L x L`` attention matrix, rows = queries, columns = keys.

    Parameters
    ----------
    M : array_like, shape (L, L)
        Row-stochastic attention matrix (e.g. :func:`attnlab.softmax_attention` output).
    ax : matplotlib Axes, optional
    kind : {"positional", "semantic", "linear", None}
        Picks the colour map of :data:`CMAPS` and the title's colour (:data:`COLORS`).
    title : str, optional
    labels : list of str, optional
        Tick labels of the tokens (default ``1..L``).
    annotate : bool
        Write each entry in its cell (two decimals).
    vmax : float
        Upper end of the colour scale (the lower end is 0).
    cmap : str, optional
        Colour map instead of the one of ``kind`` (e.g. one map for panels that
        are compared with each other; the image, ``ax.images[0]``, can then take
        a common colour bar).

    Returns
    -------
    ax : matplotlib Axes
    """
    M = np.asarray(M, dtype=float)
    ax = new_axes(ax, figsize=(2.8, 2.6))
    ax.imshow(M, cmap=cmap or CMAPS.get(kind, "Greys"), vmin=0.0, vmax=vmax)
    L = M.shape[0]
    labels = [str(i + 1) for i in range(L)] if labels is None else list(labels)
    ax.set_xticks(range(L), labels)
    ax.set_yticks(range(L), labels)
    ax.set_xlabel("key (attended token)")
    ax.set_ylabel("query")
    if annotate:
        for i in range(L):
            for j in range(M.shape[1]):
                ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if M[i, j] > 0.6 * vmax else "black")
    if title:
        ax.set_title(title, fontsize=10, color=COLORS.get(kind, "black"))
    return ax


def plot_branch_curves(x, curves, ax=None, ylabel=None, xlabel=r"sample complexity $\alpha = n/d$",
                       style="-", label_prefix="SE ", **kwargs):
    """Curves of one observable for each branch, in the branch colours.

    Parameters
    ----------
    x : array_like, shape (k,)
        Common abscissa (e.g. ``alpha``), or a dict ``{branch: x_branch}``.
    curves : dict of str to array_like
        ``{"positional": values, "semantic": values}`` (any subset; ``"linear"`` too).
    ax : matplotlib Axes, optional
    ylabel, xlabel : str
    style : str
        Matplotlib format string (``"-"`` for theory lines, ``"o"`` for points).
    label_prefix : str
        Prepended to the branch name in the legend.
    **kwargs
        Passed to ``ax.plot``.

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    for branch, y in curves.items():
        xb = x[branch] if isinstance(x, dict) else x
        # a plain line gets the branch's line style and sparse markers (the second channel)
        line = dict(ls=LINESTYLES.get(branch, "-"), marker=MARKERS.get(branch), markevery=0.1, ms=4) \
            if style == "-" else {}
        ax.plot(xb, y, *([] if line else [style]), color=COLORS.get(branch, "k"),
                label=f"{label_prefix}{_BRANCH_LABELS.get(branch, branch)}", **{**line, **kwargs})
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return ax


def plot_points(x, y, kind, ax=None, yerr=None, label=None, marker=None, filled=True):
    """Simulation points (with optional error bars) in the colour of ``kind``.

    Parameters
    ----------
    x, y : array_like, shape (k,)
    kind : {"positional", "semantic", "linear"}
    ax : matplotlib Axes, optional
    yerr : array_like, shape (k,), optional
    label : str, optional
    marker : str, optional
        Default: the marker of ``kind`` (:data:`MARKERS`), else a circle.
    filled : bool
        Open markers when ``False`` (e.g. to tell two optimisers apart).

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    c = COLORS.get(kind, "k")
    marker = marker or MARKERS.get(kind, "o")
    ax.errorbar(x, y, yerr=yerr, fmt=marker, ms=5, capsize=2, color=c, mfc=c if filled else "white",
                label=label, lw=1)
    return ax


def plot_linear_level(value, ax=None, label="linear baseline"):
    """Horizontal dashed line at the linear baseline's test error."""
    ax = new_axes(ax)
    ax.axhline(value, ls="--", color=COLORS["linear"], lw=1.2, label=label)
    return ax


def mark_threshold(alpha, ax=None, kind="alpha_c", label=None):
    """Vertical dotted line at a threshold ``alpha_c`` or ``alpha_l`` (skipped if ``nan``)."""
    ax = new_axes(ax)
    if alpha is not None and np.isfinite(alpha):
        default = {"alpha_c": r"$\alpha_c$", "alpha_l": r"$\alpha_l$"}.get(kind, kind)
        ax.axvline(alpha, ls=":", lw=1.4, color=COLORS.get(kind, "k"),
                   label=(label or default) + f" = {alpha:.2f}")
    return ax


def plot_training_curves(histories, ax=None, ylabel=r"training loss $\varepsilon_t = R/d$", logx=True):
    """Training loss along the optimisation, one curve per run.

    Parameters
    ----------
    histories : dict of str to (kind, array_like)
        ``{label: (kind, eps_t_along_training)}``; ``kind`` picks the colour.
    ax : matplotlib Axes, optional
    ylabel : str
    logx : bool
        Logarithmic step axis (the first step is plotted at 1).

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    used = {}  # runs of the same kind share its colour and differ by line style
    for label, (kind, h) in histories.items():
        h = np.asarray(h, dtype=float)
        style = ("-", "--", ":", "-.")[used.get(kind, 0) % 4]
        used[kind] = used.get(kind, 0) + 1
        ax.plot(np.arange(1, h.size + 1), h, style, color=COLORS.get(kind, "k"), label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return ax


def plot_branch_bars(values, ax=None, ylabel=None, title=None, highlight=None):
    """Bar chart of one observable for the positional/semantic branches (and the baseline).

    Parameters
    ----------
    values : dict of str to float
        ``{"positional": v, "semantic": v, "linear": v}`` (any subset, in that order).
    ax : matplotlib Axes, optional
    ylabel, title : str, optional
    highlight : str, optional
        Key drawn with a thick black edge (e.g. the lower minimum).

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax, figsize=(3.2, 3.0))
    keys = [k for k in ("positional", "semantic", "linear") if k in values]
    vals = [values[k] for k in keys]
    bars = ax.bar(range(len(keys)), vals, color=[COLORS[k] for k in keys], alpha=0.85, linewidth=0)
    for bar, k in zip(bars, keys):
        if k == highlight:
            bar.set_edgecolor("black")
            bar.set_linewidth(2.0)
    ax.set_xticks(range(len(keys)), [_BRANCH_LABELS[k] for k in keys], fontsize=8)
    for b, v in zip(bars, vals):
        ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
    # bars start at zero: their heights compare as the values do (a log scale set afterwards
    # by the caller is honest too, and overrides this)
    ax.set_ylim(0.0, 1.15 * max(vals))
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_gaussian_check(samples, mean, var, ax=None, kind=None, label=None, bins=40):
    """Histogram of samples with the Gaussian density ``N(mean, var)`` on top.

    Parameters
    ----------
    samples : array_like, shape (k,)
    mean, var : float
        Predicted mean and variance.
    ax : matplotlib Axes, optional
    kind : str, optional
        Colour key of :data:`COLORS`.
    label : str, optional
    bins : int

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    c = COLORS.get(kind, "k")
    samples = np.asarray(samples, dtype=float)
    ax.hist(samples, bins=bins, density=True, color=c, alpha=0.35, label=label)
    t = np.linspace(samples.min(), samples.max(), 300)
    ax.plot(t, np.exp(-(t - mean) ** 2 / (2 * var)) / np.sqrt(2 * np.pi * var), color=c, lw=1.5)
    return ax


def plot_token_attention(attn, tokens, ax=None, kind=None, title=None, alphabet=None, vmax=None, cmap=None):
    """Attention map of one sequence of the counting task, tokens as tick labels.

    Parameters
    ----------
    attn : array_like, shape (L, L)
        Row ``l``: where query ``l`` attends.
    tokens : array_like, shape (L,)
        Symbols of the sequence.
    ax : matplotlib Axes, optional
    kind : {"positional", "semantic", None}
    title : str, optional
    alphabet : str, optional
        Characters for the symbols (default ``"ABC..."``).
    vmax : float, optional
        Upper end of the colour scale (default: the largest entry; pass a common
        value to compare several maps).
    cmap : str, optional
        Colour map instead of the one of ``kind``.

    Returns
    -------
    ax : matplotlib Axes
    """
    alphabet = alphabet or "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    labels = [alphabet[int(t) % len(alphabet)] for t in np.asarray(tokens)]
    attn = np.asarray(attn, dtype=float)
    return plot_attention_matrix(attn, ax=ax, kind=kind, title=title, labels=labels, annotate=False,
                                 vmax=float(attn.max()) if vmax is None else vmax, cmap=cmap)


def attention_colorbar(ax, label="attention weight", uniform=True, **kwargs):
    """Colour bar of the attention map drawn on ``ax``, on that map's own scale.

    Maps whose weights span very different ranges (a nearly uniform positional map
    next to a sharp semantic one) each get their own scale this way, and the line at
    the uniform weight ``1/L`` is one reference that reads the same on every bar.

    Parameters
    ----------
    ax : matplotlib Axes
        Holds the map (its first image, as drawn by :func:`plot_attention_matrix`
        or :func:`plot_token_attention`).
    label : str
        Label of the colour bar.
    uniform : bool
        Draw a black line (edged in white) at ``1/L``, the weight of every key under
        uniform attention.
    **kwargs
        Passed to ``Figure.colorbar`` (e.g. ``shrink``).

    Returns
    -------
    cbar : matplotlib Colorbar
    """
    image = ax.images[0]
    cbar = ax.figure.colorbar(image, ax=ax, label=label, **kwargs)
    if uniform:
        for color, width in (("white", 3.5), ("black", 1.5)):  # seen on a light and on a dark colour
            cbar.ax.axhline(1.0 / image.get_array().shape[1], color=color, lw=width)
    return cbar


#: Colour key of each initialisation: the minimum that gradient descent reaches from it.
INIT_KINDS = {"random": "positional", "positional": "positional", "semantic": "semantic"}
#: The book's name of each initialisation (``init=``) of gradient descent: ``0.1 N(0, I_d)``,
#: ``0.5 1_d``, and ``Q*`` (the informed start), for printed output and legends.
START_NAMES = {"random": "random start", "positional": "positional start", "semantic": "informed start"}
#: Legend label of each initialisation.
INIT_LABELS = {**START_NAMES, "semantic": START_NAMES["semantic"] + r" $Q_0 = Q^*$"}


def plot_simulation_runs(runs, y, ax=None, x="alpha", by="init", absolute=False, label_fmt=None,
                         marker=None, filled=True, select=None, kind=None, x_scale=1.0):
    """Mean and standard error over seeds of finite-``d`` runs, one series per ``by`` value.

    Parameters
    ----------
    runs : dict of str to ndarray
        Columns as returned by :func:`attnlab.experiments.figures.load_results` (or built
        from :class:`attnlab.SimulationResult` objects): at least ``x``, ``y``, ``by``.
    y : str
        Column to plot (e.g. ``"m"``, ``"theta"``, ``"eps_t"``, ``"eps_g"``).
    ax : matplotlib Axes, optional
    x : str
        Column on the abscissa.
    by : str
        Column that splits the runs into series (colour from :data:`INIT_KINDS`
        when ``by == "init"``).
    absolute : bool
        Plot ``|y|`` (overlaps are defined up to a sign).
    label_fmt : str or dict, optional
        Legend label, formatted with the series value; or a dict from series value to label
        (default: ``"GD, "`` and the :data:`START_NAMES` entry when ``by == "init"``,
        else the series value).
    marker : str, optional
        Default: the marker of the series' colour key (:data:`MARKERS`).
    filled : bool
    select : ndarray of bool, optional
        Rows to use.
    kind : str, optional
        Colour key of :data:`COLORS` for every series (default: from the series value).
    x_scale : float
        Factor applied to the abscissa of the points (e.g. ``1.015`` to set two
        series measured at the same ``x`` side by side).

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    sel = np.ones(len(runs[x]), dtype=bool) if select is None else np.asarray(select, dtype=bool)
    for group in sorted(set(runs[by][sel].tolist())):
        rows = sel & (runs[by] == group)
        xs = np.unique(runs[x][rows])
        vals = [runs[y][rows & (runs[x] == v)] for v in xs]
        vals = [np.abs(v) if absolute else v for v in vals]
        mean = np.array([v.mean() for v in vals])
        sem = np.array([v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else 0.0 for v in vals])
        series_kind = kind or (INIT_KINDS.get(group, group) if by == "init" else group)
        if label_fmt is None:
            label = f"GD, {START_NAMES.get(group, group)}" if by == "init" else str(group)
        else:
            label = label_fmt[group] if isinstance(label_fmt, dict) else label_fmt.format(group)
        plot_points(xs * x_scale, mean, series_kind, ax=ax, yerr=sem, label=label, marker=marker, filled=filled)
    return ax


def plot_se_table(theory, y, ax=None, x="alpha", style="-", label_prefix="SE "):
    """State-evolution curves from a table with a ``branch`` column, one line per branch.

    Parameters
    ----------
    theory : dict of str to ndarray
        Columns ``branch``, ``x``, ``y`` (e.g. :func:`attnlab.experiments.figures.load_results`
        with ``table="theory"``); with a ``converged`` column, the points that did not
        converge are left out (a gap in the line).
    y : str
    ax : matplotlib Axes, optional
    x : str
    style : str
    label_prefix : str

    Returns
    -------
    ax : matplotlib Axes
    """
    xs, ys = {}, {}
    for branch in ("positional", "semantic"):
        rows = theory["branch"] == branch
        if rows.any():
            order = np.argsort(theory[x][rows])
            values = np.asarray(theory[y][rows][order], dtype=float)
            if "converged" in theory:
                values = np.where(theory["converged"][rows][order].astype(str) == "True", values, np.nan)
            xs[branch], ys[branch] = theory[x][rows][order], values
    return plot_branch_curves(xs, ys, ax=ax, style=style, label_prefix=label_prefix, xlabel=None)


#: The ``se-vs-gd`` figure draws a row of its theory table as on its branch when the
#: branch's leading overlap (``theta`` semantic, ``|m|`` positional) exceeds this. Where a
#: branch does not exist the solver returns the trivial fixed point, whose leading overlap is
#: 5e-8 to 2.3e-5 in that table (rounding), against at least 0.058 on its branches. Not a
#: general criterion: where a branch appears continuously (e.g. some cells of the explorer
#: grid, from 2e-5 up) the explorers use the solver's own ``on_branch`` threshold instead.
LEAD_MIN = 1e-3


def on_branch_rows(theory, branch, min_lead=LEAD_MIN):
    """Boolean mask of the rows of ``theory`` (a table with ``branch``, ``m``, ``theta``
    columns) on ``branch`` whose leading overlap exceeds ``min_lead`` (default
    :data:`LEAD_MIN`, chosen for the ``se-vs-gd`` table)."""
    lead = "theta" if branch == "semantic" else "m"
    return (theory["branch"] == branch) & (np.abs(np.asarray(theory[lead], dtype=float)) > min_lead)


def _theory_line(ax, theory, omega, branch, minimizer, y, style, label):
    rows = (np.isclose(theory["omega"], omega) & (theory["kind"] == "se-curve") & on_branch_rows(theory, branch)
            & (theory["minimizer"] == minimizer) & (theory["converged"].astype(str) == "True"))
    if rows.any():
        order = np.argsort(theory["alpha"][rows])
        vals = np.abs(theory[y][rows][order])
        ax.plot(theory["alpha"][rows][order], vals, style, color=COLORS[branch], lw=1.6, label=label,
                marker=MARKERS[branch], markevery=0.1, ms=4)


def _gap_panel(ax, runs, theory, omega):
    """GD's paired training-loss gap (extrapolated) and the SE gap of each minimiser."""
    from .extrapolation import crossing

    gaps = crossing(runs, omega)["gaps"]
    if gaps:
        ax.errorbar([g["alpha"] for g in gaps], [g["gap"] for g in gaps], yerr=[g["error"] for g in gaps], fmt="o",
                    ms=5, capsize=2, color="k", label=r"GD, paired by seed, $d\to\infty$")
    if theory is not None:
        for minimizer, style in (("followed", "-"), ("global", "--")):
            curve = {}
            for branch in ("semantic", "positional"):
                rows = (np.isclose(theory["omega"], omega) & (theory["kind"] == "se-curve")
                        & on_branch_rows(theory, branch) & (theory["minimizer"] == minimizer)
                        & (theory["converged"].astype(str) == "True"))
                curve[branch] = dict(zip(np.round(theory["alpha"][rows], 6), theory["eps_t"][rows]))
            common = sorted(set(curve["semantic"]) & set(curve["positional"]))
            if common:
                ax.plot(common, [curve["semantic"][a] - curve["positional"][a] for a in common], style, color="k",
                        lw=1.4, label=f"SE, {minimizer} prox")
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7.5)


def plot_arbiter(runs, theory, path=None, omega=DEFAULT_OMEGA, omega_low=0.0, ncols=3, point=None):
    """The state evolution against gradient descent extrapolated to ``d -> infinity``.

    First four panels, at ``omega``: ``theta``, ``|m|``, the training-loss gap
    ``eps_t(semantic) - eps_t(positional)`` (GD: paired by seed) and ``eps_g``
    against ``alpha``; points are GD from the informed start (semantic colour) and
    from the positional start (positional colour), extrapolated in ``1/d`` with
    their standard errors (:func:`attnlab.extrapolation.extrapolate_runs`); lines
    are the SE branches with the followed minimiser (solid) and the global one
    (dashed), where they exist (converged, leading overlap above :data:`LEAD_MIN`;
    the gap only where both do). Fifth panel: the lead overlaps (``theta`` from the informed start,
    ``|m|`` from the positional start) at ``omega_low``. Last panel:
    ``alpha_c(omega)`` from the GD training-loss crossing
    (:func:`attnlab.extrapolation.crossing`) and from both SE descriptions.

    Parameters
    ----------
    runs : dict of ndarray
        Columns of the ``se-vs-gd`` sweep.
    theory : dict of ndarray or None
        Its theory table (``kind``, ``minimizer``, ``branch`` ... columns).
    path : str or Path, optional
        Save the figure there.
    omega, omega_low : float
        The ``omega`` of the first four panels and of the fifth.
    ncols : {3, 2}
        Panels per row: 3 (2 rows, for a wide page or file) or 2 (3 rows, for
        narrow screens).
    point : str, optional
        The point the figure makes (:func:`attnlab.alt_text.describe`); default: where
        the training losses cross at ``omega``, by gradient descent and by both SE
        descriptions.

    Returns
    -------
    fig : matplotlib Figure
    """
    from .extrapolation import crossing, extrapolate_runs

    if ncols not in (2, 3):
        raise ValueError(f"ncols must be 2 or 3, got {ncols!r}")
    fig, grid = plt.subplots(6 // ncols, ncols, figsize=(4.5 * ncols, 3.8 * 6 // ncols + 0.8), layout="constrained")
    axes = grid.ravel()
    labels = dict(theta=r"semantic overlap $\theta = Q^*\!\cdot Q/d$", m=r"positional overlap $|m|$",
                  eps_t=r"training loss $\varepsilon_t = R/d$", eps_g=r"test error $\varepsilon_g$",
                  lead=r"$\theta$ (informed start), $|m|$ (positional start)",
                  gap=r"$\varepsilon_t$(semantic) $-$ $\varepsilon_t$(positional)")
    panels = [(omega, "theta"), (omega, "m"), (omega, "gap"), (omega, "eps_g"), (omega_low, "lead")]
    for ax, (w, y) in zip(axes, panels):
        if y == "gap":
            _gap_panel(ax, runs, theory, w)
            ax.set_ylabel(labels[y])
            ax.set_title(rf"$\omega = {w:g}$: below zero the semantic minimum is lower", fontsize=10)
            continue
        at = np.isclose(runs["omega"], w)
        sub = {k: v[at] for k, v in runs.items()}
        for init, branch in (("semantic", "semantic"), ("positional", "positional")):
            key = {"semantic": "theta", "positional": "m"}[branch] if y == "lead" else y
            ex = [r for r in extrapolate_runs(sub, key, absolute=(key == "m")) if r["init"] == init] if at.any() else []
            if ex:
                plot_points([r["alpha"] for r in ex], [r["value"] for r in ex], init, ax=ax,
                            yerr=[r["error"] for r in ex], label=f"GD from the {START_NAMES[init]}, $d\\to\\infty$")
            for minimizer, style in (("followed", "-"), ("global", "--")):
                if theory is not None:  # the lead panel draws each branch's own overlap
                    _theory_line(ax, theory, w, branch, minimizer, key, style, f"SE {branch}, {minimizer} prox")
        ax.set_xlabel(r"sample complexity $\alpha = n/d$")
        ax.set_ylabel(labels[y])
        ax.set_title(rf"$\omega = {w:g}$", fontsize=10)
    # one legend for the curve panels (the same entries), under the figure: not over the data
    handles, names = axes[0].get_legend_handles_labels()
    if handles:  # (a panel without data has nothing to list)
        fig.legend(handles, names, fontsize=8, loc="outside lower center", ncol=2)
    ax = axes[5]
    omegas = sorted(set(runs["omega"].tolist()))
    cross = [crossing(runs, w) for w in omegas]
    ok = [c for c in cross if np.isfinite(c["alpha_c"])]
    if ok:
        lo = [c["alpha_c"] - (c["low"] if np.isfinite(c["low"]) else c["alpha_c"]) for c in ok]
        hi = [(c["high"] if np.isfinite(c["high"]) else c["alpha_c"]) - c["alpha_c"] for c in ok]
        ax.errorbar([c["alpha_c"] for c in ok], [c["omega"] for c in ok], xerr=np.abs([lo, hi]), fmt="D", ms=7,
                    mfc="white", color="#9467bd", capsize=3, zorder=5,
                    label=r"GD: training losses cross ($d\to\infty$)")
    if theory is not None:
        for minimizer, style in (("followed", "-"), ("global", "--")):
            rows = (theory["kind"] == "transition") & (theory["minimizer"] == minimizer)
            if rows.any():
                order = np.argsort(theory["omega"][rows])
                ax.plot(theory["alpha_c"][rows][order], theory["omega"][rows][order], style, marker=".",
                        color=COLORS["alpha_c"], label=f"SE $\\alpha_c$, {minimizer} prox")
    ax.set_xlabel(r"$\alpha_c$")
    ax.set_ylabel(r"positional weight $\omega$")
    ax.set_title("where the training losses of the two minima cross", fontsize=10)
    ax.legend(fontsize=7.5)
    se = {}
    for minimizer in ("followed", "global"):
        rows = np.zeros(0, bool) if theory is None else ((theory["kind"] == "transition")
                                                         & (theory["minimizer"] == minimizer)
                                                         & np.isclose(theory["omega"], omega))
        se[minimizer] = f"{theory['alpha_c'][rows][0]:.2f}" if rows.any() else "not computed"
    gd = crossing(runs, omega)["alpha_c"]
    gd = f"α_c = {gd:.2f}" if np.isfinite(gd) else "no α on the grid"
    describe(fig, point or f"At ω = {omega:g} the training losses that gradient descent reaches from the two "
                           f"starts, extrapolated to d → ∞, cross at {gd}; the state evolution's α_c is "
                           f"{se['followed']} with the followed prox and {se['global']} with the global one.")
    if path is not None:
        save_figure_atomic(fig, path, dpi=110)
        plt.close(fig)
    return fig


# ----------------------------------------------------------------------------- the figures of `attnlab reproduce`

#: The four observables of a sweep figure and their axis labels.
SWEEP_PANELS = (("m", r"positional overlap $m = \mathbf{1}\cdot Q/d$"),
                ("theta", r"semantic overlap $\theta = Q^*\cdot Q/d$"),
                ("eps_t", r"training loss $\varepsilon_t = R/d$"),
                ("eps_g", r"test error $\varepsilon_g$"))

_METHOD_LABELS = {"lbfgs": "GD + L-BFGS", "gd": "GD", "adam": "Adam"}


def _sweep_title(runs, extra: str = "") -> str:
    """``omega, sigma, lambda`` (and ``A`` if not the default), ``d`` and the number of seeds of a sweep."""
    def values(k):
        return ", ".join(f"{v:g}" for v in np.unique(runs[k]))
    A = ""
    if not np.isclose(runs["A11"][0], DEFAULT_A[0][0]):
        A = f", A=[[{runs['A11'][0]:g}, {runs['A12'][0]:g}], [{runs['A21'][0]:g}, {runs['A22'][0]:g}]]"
    title = (rf"$\omega$={values('omega')}, $\sigma$={values('sigma')}, $\lambda$={values('lambda')}{A}, "
             f"d={values('d')}, {len(np.unique(runs['seed']))} seed(s){extra}")
    return _wrap_clauses(title)


def _wrap_clauses(text: str, width: int = 110) -> str:
    """``text`` in lines of at most about ``width`` characters of source, broken only after
    "; " (which the titles' ``$...$`` formulas do not hold), a clause longer than ``width`` on a
    line of its own: a long figure title fits the figure instead of running off it."""
    lines = []
    for clause in text.split("; "):
        if lines and len(lines[-1]) + 2 + len(clause) <= width:
            lines[-1] += "; " + clause
        else:
            lines.append(clause)
    return ";\n".join(lines)


def _save(fig, path, dpi=110):
    if path is not None:
        save_figure_atomic(fig, path, dpi=dpi)  # (an interrupt never leaves a truncated image)
        plt.close(fig)
    return fig


def plot_sweep(runs, theory=None, path=None, *, x="alpha", note="", point=None):
    """Four panels ``m, theta, eps_t, eps_g`` of a sweep: mean +- SEM over seeds, with the state evolution.

    Points are :func:`plot_simulation_runs` per initialisation (and optimiser,
    Adam with open markers, set slightly to the right); the state evolution is
    :func:`plot_se_table` when ``x = "alpha"``, and a horizontal line per branch
    (its value at the sweep's ``alpha``) when ``x = "d"`` (logarithmic axis). The
    ``eps_g`` panel adds the linear baseline: theory (dashed) and, against ``alpha``,
    simulation.

    Parameters
    ----------
    runs : dict of str to ndarray
        Columns of a simulation sweep (:func:`attnlab.experiments.figures.load_results`).
    theory : dict of str to ndarray, optional
        Its state-evolution table (``table="theory"``).
    path : str or Path, optional
        Save the figure there (and close it).
    x : {"alpha", "d"}
    note : str
        Appended to the title.
    point : str, optional
        The point the figure makes (:func:`attnlab.alt_text.describe`); default: how the
        seed-mean training loss of each start changes along ``x`` and, against ``alpha``,
        where the informed start's becomes the lower one.

    Returns
    -------
    fig : matplotlib Figure
    """
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True, sharex=True)
    methods = sorted(set(runs["method"].tolist()))
    for ax, (y, label) in zip(axes.flat, SWEEP_PANELS):
        if theory is not None and "branch" in theory and x == "alpha":
            plot_se_table(theory, y, ax=ax)
        elif theory is not None and "branch" in theory:
            for branch in ("positional", "semantic"):
                at = theory["branch"] == branch
                if at.any():
                    ax.axhline(theory[y][at][0], color=COLORS[branch], ls="--", label=f"SE {branch} branch")
        for method in methods:
            suffix = f", {_METHOD_LABELS.get(method, method)}" if len(methods) > 1 else ""
            adam = method == "adam"
            plot_simulation_runs(runs, y, ax=ax, x=x, select=runs["method"] == method, marker="^" if adam else "o",
                                 filled=not adam, x_scale=1.015 if adam else 1.0,
                                 label_fmt={k: v + suffix for k, v in INIT_LABELS.items()})
        if y == "eps_g":
            if theory is not None and "eps_g_linear" in theory:
                plot_linear_level(theory["eps_g_linear"][0], ax=ax, label="linear baseline (theory)")
            if x == "alpha":
                plot_simulation_runs(runs, "eps_g_linear", ax=ax, by="d", kind="linear", marker="s",
                                     label_fmt="linear baseline (simulation)")
        if x == "d":
            ax.set_xscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(r"sample complexity $\alpha = n/d$" if x == "alpha" else "embedding dimension $d$")
    # one legend for the four panels, under them: none drawn over the data
    entries = {}
    for ax in axes.flat:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(name, handle)
    fig.legend(list(entries.values()), list(entries), fontsize=8, loc="outside lower center", ncol=3)
    fixed = rf"; $\alpha$={', '.join(f'{a:g}' for a in np.unique(runs['alpha']))}" if x == "d" else ""
    methods = ", ".join(_METHOD_LABELS.get(m, m) for m in methods)
    fig.suptitle(_sweep_title(runs, f"{fixed}; {methods}; points: mean $\\pm$ SEM over seeds{note}"), fontsize=9)
    describe(fig, point or _sweep_point(runs, x))
    return _save(fig, path)


def _sweep_point(runs, x) -> str:
    """The point of a sweep figure: each start's seed-mean training loss at both ends of ``x``
    and, against ``alpha``, where the informed start's mean drops below the random or
    positional start's."""
    means = {}
    for init in sorted(set(runs["init"].tolist())):
        at = runs["init"] == init
        xs = np.unique(runs[x][at])
        means[init] = xs, np.array([runs["eps_t"][at & (runs[x] == v)].mean() for v in xs])
    name = {"alpha": "α"}.get(x, x)
    ends = "; ".join(f"from the {START_NAMES.get(i, i)} it goes from {m[0]:.3g} at {name} = {xs[0]:g} to "
                     f"{m[-1]:.3g} at {name} = {xs[-1]:g}" for i, (xs, m) in means.items())
    text = f"Mean training loss over seeds: {ends}"
    other = next((i for i in ("random", "positional") if i in means), None)
    if x == "alpha" and "semantic" in means and other:
        common, i_s, i_o = np.intersect1d(means["semantic"][0], means[other][0], return_indices=True)
        lower = means["semantic"][1][i_s] < means[other][1][i_o]
        if lower.all() or not lower.any():
            text += f". The informed start's is {'lower at every' if lower.all() else 'not lower at any'} α of the sweep"
        elif lower[-1]:
            cross = first_sign_change(common, means["semantic"][1][i_s] - means[other][1][i_o])
            text += f". The informed start's is the lower one from α ≈ {cross:.2f} on"
        else:
            text += f". The informed start's is the lower one only at α = {', '.join(f'{a:g}' for a in common[lower])}"
    return text + "."


def _threshold_lines(ax, omega, alpha_c, alpha_l, **kw):
    """``alpha_c(omega)`` (solid, circles) and ``alpha_l(omega)`` (dashed, squares), in their colours."""
    ax.plot(alpha_c, omega, "-o", color=COLORS["alpha_c"], label=r"$\alpha_c$ (training losses cross)", **kw)
    ax.plot(alpha_l, omega, "--s", color=COLORS["alpha_l"], label=r"$\alpha_l$ (beats linear baseline)", **kw)


def plot_phase_map(runs, theory=None, path=None, point=None):
    """Map of ``eps_t(informed start) - eps_t(random start)`` over ``(alpha, omega)``, with the SE thresholds.

    Parameters
    ----------
    runs : dict of str to ndarray
        Columns of the ``phase-diagram`` sweep (``omega, alpha, init, eps_t, d, method, seed``).
    theory : dict of str to ndarray, optional
        Its thresholds (``omega, alpha_c, alpha_l``).
    path : str or Path, optional
        Save the figure there (and close it).
    point : str, optional
        The point the figure makes (:func:`attnlab.alt_text.describe`); default:
        :func:`gap_map_point`.

    Returns
    -------
    fig : matplotlib Figure
    """
    alphas = np.unique(runs["alpha"])
    fig, ax = plt.subplots(figsize=(6.4, 4.6), constrained_layout=True)
    gaps = gd_gap_map(runs)
    mesh = plot_gd_gap_map(gaps, ax=ax)
    describe(fig, point or gap_map_point(gaps, theory))
    fig.colorbar(mesh, ax=ax, label=r"$\varepsilon_t$(informed start) $-$ $\varepsilon_t$(random start)"
                                     "\n(red: semantic minimum lower)")
    step = 0.5 * np.diff(alphas).min(initial=0.2)
    right = alphas.max() + step
    if theory is not None and "alpha_c" in theory:
        order = np.argsort(theory["omega"])
        _threshold_lines(ax, theory["omega"][order], theory["alpha_c"][order], theory["alpha_l"][order], ms=3)
        # below the axes, not over the map's cells
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
        finite = np.r_[theory["alpha_c"], theory["alpha_l"]]  # show thresholds beyond the simulated range too
        right = max(right, 1.05 * finite[np.isfinite(finite)].max(initial=0.0))
    ax.set_xlim(alphas.min() - step, right)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional weight $\omega$")
    method = ", ".join(_METHOD_LABELS.get(m, m) for m in np.unique(runs["method"]))
    ax.set_title(f"d={', '.join(str(v) for v in np.unique(runs['d']))}, {method}, "
                 f"{len(np.unique(runs['seed']))} seed(s) per cell", fontsize=9)
    return _save(fig, path)


def gap_map_point(gap_map, theory=None) -> str:
    """The point of a map of gradient descent (:func:`plot_gd_gap_map`), in words.

    Parameters
    ----------
    gap_map : dict
        ``omega``, ``alpha``, ``gap`` as :func:`plot_gd_gap_map` takes them.
    theory : dict, optional
        ``omega``, ``alpha_c``: the range of the SE threshold drawn over the map.

    Returns
    -------
    str
        In how many cells the informed start reaches the lower training loss.
    """
    gap = np.asarray(gap_map["gap"], dtype=float)
    text = (f"The informed start reaches the lower training loss (red) in {int(np.sum(gap < 0))} of "
            f"{int(np.isfinite(gap).sum())} cells of the (α, ω) grid")
    if theory is not None and "alpha_c" in theory and np.isfinite(theory["alpha_c"]).any():
        ok = np.isfinite(np.asarray(theory["alpha_c"], dtype=float))
        w, ac = np.asarray(theory["omega"], dtype=float)[ok], np.asarray(theory["alpha_c"], dtype=float)[ok]
        i, j = np.argmin(w), np.argmax(w)
        text += f"; the SE α_c goes from {ac[i]:.2f} at ω = {w[i]:g} to {ac[j]:.2f} at ω = {w[j]:g}"
    return text + "."


def plot_explorer_overview(theory, path=None, point=None):
    """``alpha_c(omega)`` of the explorers' grid: one panel per ``sigma``, one line per ``lambda``.

    Parameters
    ----------
    theory : dict of str to ndarray
        The ``explorer-grid`` theory table (rows of ``kind = "transition"`` are used).
    path : str or Path, optional
        Save the figure there (and close it).
    point : str, optional
        The point the figure makes (:func:`attnlab.alt_text.describe`); default: the
        smallest and the largest ``alpha_c`` of the grid, and where they are.

    Returns
    -------
    fig : matplotlib Figure
    """
    tr = theory["kind"] == "transition"
    sigmas = np.unique(theory["sigma"][tr])
    fig, axes = plt.subplots(1, len(sigmas), figsize=(3.4 * len(sigmas), 3.2), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax, s in zip(axes[0], sigmas):
        for lam in np.unique(theory["lambda"][tr]):
            sel = tr & (theory["sigma"] == s) & (theory["lambda"] == lam)
            order = np.argsort(theory["omega"][sel])
            ax.plot(theory["alpha_c"][sel][order], theory["omega"][sel][order], "-o", ms=3,
                    label=rf"$\lambda$ = {lam:g}")
        ax.set(title=rf"$\sigma$ = {s:g}", xlabel=r"$\alpha_c$")
    axes[0][0].set_ylabel(r"$\omega$")
    axes[0][-1].legend(fontsize=8)
    ac = np.asarray(theory["alpha_c"], dtype=float)
    ok = tr & np.isfinite(ac)
    if ok.any():
        where = lambda k: f"{ac[k]:.2f} (σ = {theory['sigma'][k]:g}, λ = {theory['lambda'][k]:g}, ω = {theory['omega'][k]:g})"  # noqa: E731
        text = (f"Over the grid α_c goes from {where(np.flatnonzero(ok)[np.argmin(ac[ok])])} "
                f"to {where(np.flatnonzero(ok)[np.argmax(ac[ok])])}.")
    else:
        text = "No α_c was found on the grid."
    describe(fig, point or text)
    return _save(fig, path, dpi=120)


def branch_crossing(theory, key="eps_t"):
    """Where the semantic branch's ``key`` drops below the positional one's (linear interpolation).

    Parameters
    ----------
    theory : dict of str to ndarray
        Columns ``branch``, ``alpha`` and ``key`` (as :func:`plot_se_table` takes them).
    key : str

    Returns
    -------
    float
        The last ``alpha`` where ``key(semantic) - key(positional)`` changes sign, on the
        semantic branch's grid (the positional curve interpolated onto it); ``nan`` where it
        does not.
    """
    curve = {}
    for branch in ("positional", "semantic"):
        rows = np.asarray(theory["branch"]) == branch
        ok = rows & np.isfinite(np.asarray(theory[key], dtype=float))
        if "converged" in theory:
            ok &= np.asarray(theory["converged"]).astype(str) == "True"
        order = np.argsort(np.asarray(theory["alpha"], dtype=float)[ok])
        curve[branch] = (np.asarray(theory["alpha"], dtype=float)[ok][order], np.asarray(theory[key], dtype=float)[ok][order])
    a, sem = curve["semantic"]
    a_pos, pos = curve["positional"]
    inside = (a >= a_pos.min()) & (a <= a_pos.max()) if a_pos.size else np.zeros(a.size, bool)
    return first_sign_change(a[inside], sem[inside] - np.interp(a[inside], a_pos, pos))
