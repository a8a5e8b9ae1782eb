"""The API appendix matches the package: every module documented, the top-level names generated."""
import importlib.util
import pkgutil
import re
from pathlib import Path

import attnlab

ROOT = Path(__file__).resolve().parent.parent
API = ROOT / "book" / "appendix" / "api.md"


def _api_names():
    spec = importlib.util.spec_from_file_location("api_names", ROOT / "book" / "_scripts" / "api_names.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_module_of_the_package_is_on_the_page():
    text = API.read_text()
    documented = set(re.findall(r"^\.\. (?:automodule|py:module):: (\S+)", text, re.M))
    modules = {m.name for m in pkgutil.walk_packages(attnlab.__path__, "attnlab.")} | {"attnlab"}
    assert modules == documented, (sorted(modules - documented), sorted(documented - modules))


def test_top_level_names_are_generated_and_up_to_date():
    """Signatures and one-line summaries, from the code (``python book/_scripts/api_names.py`` rewrites them)."""
    api_names = _api_names()
    text = API.read_text()
    assert api_names.render() in text, "book/appendix/api.md is out of date: run book/_scripts/api_names.py"
    section = text.split(api_names.BEGIN)[1]
    for name in (n for n in attnlab.__all__ if n != "theory"):
        assert re.search(rf"^\.\. py:\w+:: {name}\b", section, re.M), name
    assert ".. py:function:: run_simulation(params, alpha, d, *" in section
    assert not re.search(r"TODO|FIXME|not shown here until", text)
