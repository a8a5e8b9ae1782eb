"""Figures with the book's colour convention: positional, semantic, linear baseline.

Every function draws on a given matplotlib ``Axes`` (or a new figure) and
returns the ``Axes``; nothing here computes physics.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

__all__ = ["COLORS", "plot_phase_diagram", "new_axes"]

#: One colour per concept, kept across the whole book.
COLORS = {
    "positional": "#1f77b4",  # blue
    "semantic": "#d62728",    # red
    "linear": "#7f7f7f",      # grey
    "alpha_c": "#000000",
    "alpha_l": "#2ca02c",
}


def new_axes(ax=None, figsize=(5.0, 3.6)):
    """Return ``ax`` or a fresh ``Axes`` of a new figure."""
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=figsize, constrained_layout=True)
    return ax


def plot_phase_diagram(rows, ax=None, path=None):
    """Plot ``alpha_c(omega)`` and ``alpha_l(omega)``.

    Parameters
    ----------
    rows : list of dict
        Each with keys ``omega``, ``alpha_c``, ``alpha_l`` (e.g.
        ``[t.to_dict() for t in phase_diagram(...)]``).
    ax : matplotlib Axes, optional
    path : str, optional
        If given, save the figure there.

    Returns
    -------
    ax : matplotlib Axes
    """
    ax = new_axes(ax)
    omega = np.array([r["omega"] for r in rows])
    ac = np.array([r["alpha_c"] for r in rows])
    al = np.array([r["alpha_l"] for r in rows])
    ax.fill_betweenx(omega, 0, ac, color=COLORS["positional"], alpha=0.15, label="positional global minimum")
    ax.fill_betweenx(omega, ac, np.nanmax(np.r_[ac, al]) * 1.2, color=COLORS["semantic"], alpha=0.12,
                     label="semantic global minimum")
    ax.plot(ac, omega, "-o", color=COLORS["alpha_c"], label=r"$\alpha_c$ (training losses cross)")
    ax.plot(al, omega, "--s", color=COLORS["alpha_l"], label=r"$\alpha_l$ (beats linear baseline)")
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional weight $\omega$")
    ax.legend(fontsize=8, loc="best")
    if path:
        ax.figure.savefig(path, dpi=150)
    return ax
