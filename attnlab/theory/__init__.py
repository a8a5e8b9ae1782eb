"""State evolution of the attention GLM (Cui et al. 2024, Result 4.2).

Modules: :mod:`.quadrature` (Gaussian expectations), :mod:`.symmetry` (folded
node sets), :mod:`.split_rule` (expectations split at the proximal jumps),
:mod:`.channel` (loss, proximal operator, Moreau envelope), :mod:`.state_evolution`
(hat and overlap updates, errors, free entropy), :mod:`.solver` (fixed points on a branch),
:mod:`.thresholds` (curves, alpha_c, alpha_l, phase diagram); its command-line
sub-commands are in :mod:`attnlab.cli`.
"""
from .split_rule import SplitRule
from .state_evolution import Hats, Overlaps, Quadrature
from .solver import (BRANCHES, ConvergenceWarning, OffBranchWarning, QuadratureWarning, SEResult, StateEvolutionError,
                     solve_state_evolution)
from .thresholds import Transition, find_transition, linear_baseline_error, phase_diagram, se_curve

__all__ = ["Hats", "Overlaps", "Quadrature", "SplitRule", "BRANCHES", "ConvergenceWarning", "OffBranchWarning", "QuadratureWarning", "SEResult", "StateEvolutionError",
           "solve_state_evolution", "Transition", "find_transition", "linear_baseline_error",
           "phase_diagram", "se_curve"]
