"""The package's layers import one way: model -> theory -> experiments -> figures -> CLI.

Read from the source (every ``import`` statement, also those inside functions), so a
lazy import that closes a cycle counts too. And the repository's files that the
package's docstrings name exist.
"""
import ast
import re
from pathlib import Path

import attnlab

PACKAGE = Path(attnlab.__file__).resolve().parent

#: What each layer may import from attnlab (besides itself and the layers before it).
LAYERS = [
    ("model", {"attnlab", "attnlab.params", "attnlab.data", "attnlab.attention", "attnlab.objective",
               "attnlab.training", "attnlab.metrics", "attnlab.baseline", "attnlab.simulation", "attnlab.hysteresis", "attnlab.curvature", "attnlab.counting",
               "attnlab.parallel", "attnlab.safe_cache"}),
    ("theory", {"attnlab.theory"}),
    ("experiments", {"attnlab.experiments", "attnlab.explorer_grid", "attnlab.extrapolation"}),
    ("figures", {"attnlab.plots", "attnlab.experiments.figures", "attnlab.widgets", "attnlab.explorers",
                 "attnlab.responsive", "attnlab.alt_text", "attnlab.explorer_access"}),
    ("command line", {"attnlab.cli"}),
]


def _modules() -> dict:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict):
    """``(imported module, imported name or None)`` of every attnlab import in ``path``."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((a.name, None) for a in node.names if a.name.startswith("attnlab"))
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            if target.startswith("attnlab"):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    yield (sub, None) if sub in modules else (target, alias.name)


def _layer(module: str) -> int:
    """The layer of the most specific entry of :data:`LAYERS` that holds ``module``."""
    holders = [(len(m), i) for i, (_, members) in enumerate(LAYERS) for m in members
               if module == m or (m != "attnlab" and module.startswith(m + "."))]
    assert holders, f"{module} is in no layer of tests/test_layout.py"
    return max(holders)[1]


def test_layers_import_one_way_and_no_private_names():
    modules = _modules()
    for name, path in modules.items():
        for target, imported in _imports(name, path, modules):
            if name == "attnlab":  # the top-level lazy loader names the model layer only
                assert _layer(target) == 0, target
                continue
            assert _layer(target) <= _layer(name), f"{name} ({LAYERS[_layer(name)][0]}) imports {target}"
            private = imported is not None and imported.startswith("_") and not imported.startswith("__")
            if private:
                assert target == name, f"{name} imports the private name {imported} of {target}"


def test_no_import_cycle():
    modules = _modules()
    graph = {n: {t for t, _ in _imports(n, p, modules) if t in modules and t != n} for n, p in modules.items()}
    graph["attnlab"] = set()  # (its lazy loader is the way in, not a dependency of the modules)

    def reaches(start, goal, seen):
        return any(nxt == goal or (nxt not in seen and not seen.add(nxt) and reaches(nxt, goal, seen))
                   for nxt in graph[start])

    cycles = [n for n in graph if reaches(n, n, set())]
    assert not cycles, cycles


#: Paths of the repository (outside the package) that a docstring may name.
_REPO_PATH = re.compile(r"\b(?:book/_ext/\w+\.py|book/_scripts/[\w.-]*\w|benchmarks/[\w/-]+\.py)\b")


def test_files_named_in_docstrings_exist():
    """A docstring of attnlab.explorers named ``book/_ext/bokeh_static.py``, which is
    ``book/_ext/offline_assets.py``: every ``book/_ext/*.py``, ``book/_scripts/*`` and
    ``benchmarks/*.py`` that a docstring names is a file of the repository."""
    root = PACKAGE.parent
    named = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                for found in _REPO_PATH.findall(ast.get_docstring(node) or ""):
                    named.setdefault(found, set()).add(path.relative_to(root).as_posix())
    assert len(named) >= 3, named  # the pattern finds what the docstrings name
    missing = {p: sorted(where) for p, where in named.items() if not (root / p).is_file()}
    assert not missing, f"named in docstrings, not in the repository: {missing}"
