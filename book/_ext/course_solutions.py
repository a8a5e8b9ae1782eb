"""Hide the *gated* solutions too when ``hide_solutions`` is set (the student build).

sphinx-exercise's ``hide_solutions`` drops a ``{solution}`` directive, but for a gated
solution (``{solution-start}`` ... ``{solution-end}``, which the book uses so that solution
code runs as notebook cells) it drops only the start marker and leaves the cells and the
text up to ``{solution-end}`` on the page. With ``hide_solutions = True`` this extension
removes everything from ``{solution-start}`` to ``{solution-end}`` instead. Without it
nothing changes.
"""
from __future__ import annotations

from docutils import nodes
from sphinx.transforms import SphinxTransform
from sphinx_exercise.directive import SolutionStartDirective
from sphinx_exercise.nodes import solution_end_node


class hidden_solution_start(nodes.Element):
    """Marker left where a gated solution starts in the student build."""


class HidableSolutionStart(SolutionStartDirective):
    def run(self):
        out = super().run()
        if self.env.app.config.hide_solutions:
            return [hidden_solution_start()]
        return out


class RemoveHiddenGatedSolutions(SphinxTransform):
    # before sphinx-exercise merges the gated nodes (priority 10)
    default_priority = 9

    def apply(self):
        for start in list(self.document.findall(hidden_solution_start)):
            parent = start.parent
            i = parent.index(start)
            for j in range(i, len(parent.children)):
                if isinstance(parent.children[j], solution_end_node):
                    break
            else:
                raise ValueError(f"{self.env.docname}: solution-start without solution-end")
            for child in parent.children[i:j + 1]:
                parent.remove(child)


def setup(app):
    app.setup_extension("sphinx_exercise")
    app.add_directive("solution-start", HidableSolutionStart, override=True)
    app.add_transform(RemoveHiddenGatedSolutions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
