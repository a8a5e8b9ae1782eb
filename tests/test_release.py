"""The release: the CI workflow (linted with actionlint) and the release check.

``RELEASE.md`` creates the tag ``v`` + ``version`` of pyproject.toml; ``retarget.py --check``
verifies that the book points at exactly that tag (``repository.branch`` of ``_config.yml``,
which the launch buttons open, and every ``git+URL@TAG`` install of attnlab). These tests read
files and run the check on copies of the book; no notebook is executed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "book" / "_scripts"
sys.path.insert(0, str(SCRIPTS))
import retarget  # noqa: E402

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
REPO = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
TAG = f"v{VERSION}"


def _workflow(path: Path) -> dict:
    wf = yaml.safe_load(path.read_text())
    wf["on"] = wf.pop(True, wf.get("on"))  # YAML 1.1 reads the key `on` as True
    return wf


def _steps(job: dict) -> list[str]:
    """Each step of a job as one string: its `uses` or its `run`."""
    return [step.get("uses") or step.get("run", "") for step in job["steps"]]


# --------------------------------------------------------------------------- the workflow

def _actionlint() -> str:
    """The actionlint command of the test extra (beside this Python, or on PATH)."""
    beside = Path(sys.executable).parent / "actionlint"
    found = str(beside) if beside.exists() else shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is not installed: pip install -e '.[test]'")
    return found


def test_workflows_pass_actionlint():
    """actionlint (and shellcheck on the `run:` blocks, where shellcheck is on PATH) finds nothing."""
    assert WORKFLOWS, "no workflow in .github/workflows"
    res = subprocess.run([_actionlint(), "-no-color", *(str(p.relative_to(ROOT)) for p in WORKFLOWS)],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0 and not res.stdout.strip(), f"actionlint:\n{res.stdout}{res.stderr}"


def test_ci_runs_the_ci_script_on_every_push_and_pull_request():
    wf = _workflow(ROOT / ".github" / "workflows" / "ci.yml")
    assert "pull_request" in wf["on"] and "main" in wf["on"]["push"]["branches"]
    assert wf["on"]["push"]["tags"] == ["v*.*.*"]
    test = wf["jobs"]["test"]
    assert "if" not in test and re.search(r"python:3\.11\b", test["container"])
    assert _steps(test)[-1] == "bash .ci/run"


def test_a_release_tag_builds_publishes_and_attaches_the_wheel():
    wf = _workflow(ROOT / ".github" / "workflows" / "ci.yml")
    book, deploy = wf["jobs"]["book"], wf["jobs"]["deploy"]
    assert book["if"] == "startsWith(github.ref, 'refs/tags/v')" and book["needs"] == "test"
    steps = _steps(book)
    # set up and built with the README's first two commands (read from it as .ci/run does);
    # the tag is checked before anything is built
    setup = steps.index('eval "$(python .ci/readme_commands.py README.md | sed -n 1p)"')
    check = steps.index('python book/_scripts/retarget.py --check --tag "$GITHUB_REF_NAME"')
    build = steps.index('eval "$(python .ci/readme_commands.py README.md | sed -n 2p)"')
    assert setup < check < build < steps.index("actions/upload-pages-artifact@v5")
    assert book["steps"][steps.index("actions/upload-pages-artifact@v5")]["with"]["path"] == "_build/html"
    assert "python -m pip wheel --no-deps -w dist ." in steps
    assert any(s.startswith('gh release create "$GITHUB_REF_NAME" dist/*.whl') for s in steps)
    assert book["permissions"] == {"contents": "write"} and wf["permissions"] == {"contents": "read"}
    assert deploy["needs"] == "book" and deploy["environment"]["name"] == "github-pages"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert _steps(deploy) == ["actions/deploy-pages@v5"]


def test_actions_are_official_and_pinned_by_major_version():
    for path in WORKFLOWS:
        for job in _workflow(path)["jobs"].values():
            for uses in filter(None, (step.get("uses") for step in job["steps"])):
                assert re.fullmatch(r"actions/[\w-]+@v\d+", uses), f"{path.name}: {uses}"


# --------------------------------------------------------------------------- the release check

def _copy_book(tmp_path: Path) -> Path:
    """What the check reads: pyproject.toml, attnlab/__init__.py, _config.yml, the chapters, the scripts."""
    for name in ("pyproject.toml", "_config.yml", "_toc.yml", "jupytext.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "attnlab").mkdir()
    shutil.copy2(ROOT / "attnlab" / "__init__.py", tmp_path / "attnlab" / "__init__.py")
    (tmp_path / "book").mkdir()
    shutil.copytree(ROOT / "book" / "md", tmp_path / "book" / "md")
    shutil.copytree(SCRIPTS, tmp_path / "book" / "_scripts", ignore=shutil.ignore_patterns("__pycache__"))
    for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"):
        shutil.copy2(p, tmp_path / "book" / p.name)
    return tmp_path


def _run_check(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "retarget.py"), "--check", "--root", str(root), *args],
                          capture_output=True, text=True)


def _assert_one_line_error(res: subprocess.CompletedProcess, *words: str):
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert res.stderr.startswith("retarget.py: error: ")
    for word in words:
        assert word in res.stderr, res.stderr


def test_the_book_points_at_v_plus_the_version():
    assert REPO["branch"] == TAG
    expected, problems = retarget.check(ROOT)
    assert (expected, problems) == (TAG, [])
    res = _run_check(ROOT, "--tag", TAG)
    assert res.returncode == 0 and TAG in res.stdout, res.stdout + res.stderr
    # the problem sets' install cell (Colab) installs the same release (made from _config.yml)
    import build_course

    assert build_course.release_spec() == f"git+{REPO['url']}@{TAG}"


def test_check_fails_where_the_config_names_another_tag(tmp_path):
    root = _copy_book(tmp_path)
    config = root / "_config.yml"
    config.write_text(re.sub(r"^(\s+branch:).*$", r"\1 v9.9.9", config.read_text(), flags=re.M))
    assert retarget.check(root)[1] == ["_config.yml: repository.branch (the launch buttons) is v9.9.9"]
    _assert_one_line_error(_run_check(root), f"the release is {TAG}", "is v9.9.9",
                           f"retarget.py --release {TAG}")


def test_check_fails_on_another_tag_than_the_version(tmp_path):
    _assert_one_line_error(_run_check(ROOT, "--tag", "v9.9.9"), "the tag is v9.9.9", "bump the version")
    # a version bumped in pyproject.toml alone
    root = _copy_book(tmp_path)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(f'version = "{VERSION}"', 'version = "9.9.9"', 1))
    assert f"attnlab/__init__.py: __version__ is {VERSION}" in retarget.check(root, tag="v9.9.9")[1]


@pytest.mark.parametrize("extras", ["", "[notebook]"])
def test_check_reads_install_cells_with_and_without_extras(tmp_path, extras):
    root = _copy_book(tmp_path)
    pin = re.compile(r"attnlab(\[\w+\])? @ git\+")
    for path in [*(root / "book" / "md").glob("*.md"), *(root / "book").glob("*.ipynb")]:
        path.write_text(pin.sub(f"attnlab{extras} @ git+", path.read_text()))
    assert retarget.check(root) == (TAG, [])
    chapter = root / "book" / "md" / "03_gradient_descent.md"
    chapter.write_text(chapter.read_text().replace(f"@{TAG}", "@v0.0.1"))
    assert retarget.check(root)[1] == [f"book/md/03_gradient_descent.md: installs git+{REPO['url']}@v0.0.1"]


def test_check_fails_on_a_chapter_without_install_cell_and_on_other_pins(tmp_path):
    root = _copy_book(tmp_path)
    chapter = root / "book" / "md" / "01_positional_semantic.md"
    chapter.write_text(re.sub(r"git\+https://\S+", "attnlab", chapter.read_text()))
    (root / "book" / "_scripts" / "pinned.py").write_text(f'REQ = "attnlab @ git+{REPO["url"]}"\n')
    assert retarget.check(root)[1] == [
        "book/_scripts/pinned.py: installs git+https://github.com/attnlab/attnlab (no tag)",
        "book/md/01_positional_semantic.md: no install cell (git+URL@TAG)"]


def test_the_procedure_bump_then_retarget_passes_the_check(tmp_path):
    """RELEASE.md's steps 1-2 on a copy: after the bump the check fails, after retarget it passes."""
    pytest.importorskip("jupytext")
    root = _copy_book(tmp_path)
    for name, line in (("pyproject.toml", 'version = "{}"'), ("attnlab/__init__.py", '__version__ = "{}"')):
        path = root / name
        path.write_text(path.read_text().replace(line.format(VERSION), line.format("9.8.7"), 1))
    expected, problems = retarget.check(root)
    assert expected == "v9.8.7" and len(problems) == 1 + 2 * len(list((root / "book" / "md").glob("*.md")))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    res = subprocess.run([sys.executable, str(SCRIPTS / "retarget.py"), "--release", "v9.8.7", "--root", str(root)],
                         capture_output=True, text=True, cwd=root, env=env)  # runs jupytext --sync
    assert res.returncode == 0, res.stderr
    assert retarget.check(root, tag="v9.8.7") == ("v9.8.7", [])


def test_retarget_errors_are_one_line(tmp_path):
    root = _copy_book(tmp_path)
    for args, words in ((["--release", "not a tag"], "--release must be a tag or branch name"),
                        (["--check", "--release", TAG], "--check changes nothing"),
                        (["--tag", TAG], "--tag goes with --check")):
        res = subprocess.run([sys.executable, str(SCRIPTS / "retarget.py"), "--root", str(root), *args],
                             capture_output=True, text=True)
        _assert_one_line_error(res, words)
    assert (root / "_config.yml").read_text() == (ROOT / "_config.yml").read_text()
