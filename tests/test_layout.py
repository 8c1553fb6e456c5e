"""Guards for the repository layout: datasets/ holds data only, packages are listed, docs stay inside the repo."""

import subprocess
import sys

import tomllib
from conftest import ROOT


def test_datasets_folder_holds_data_only():
    datasets = ROOT / "datasets"
    assert not (datasets / "__init__.py").exists()
    assert not list(datasets.rglob("*.py")), "query-set code belongs in benchmark/querysets/"


def test_import_datasets_is_hugging_face_from_repo_root():
    out = subprocess.run([sys.executable, "-c", "import datasets; print(datasets.__file__); print(datasets.load_dataset)"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    # the installed package (site-packages, or a `pip install --target` folder on PYTHONPATH), not a repo folder
    first = out.splitlines()[0]  # "None" for a namespace package, which is what the repo's datasets/ would be
    assert first.endswith("/datasets/__init__.py") and not first.startswith(str(ROOT / "datasets") + "/"), out


def test_pyproject_lists_packages_explicitly():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = meta["tool"]["setuptools"]["packages"]["find"]["include"]
    assert set(include) == {"benchmark*", "editors*"}


def test_import_benchmark_is_light():
    code = "import sys, benchmark, benchmark.commands.run, benchmark.io.types; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "heavy libraries must be imported lazily"


def _repo_text_files():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in tracked if p.endswith((".py", ".md", ".yaml", ".toml", ".json", ".txt")) or p == "Makefile"]


def test_nothing_points_outside_the_repository():
    """Users never see the developers' shared folder: docs and code name only files in the repo."""
    import re

    outside = re.compile(r"(\.\./shared|\bshared/(spec|seeds|DESIGN)|\bDESIGN\.md\b)")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _repo_text_files() if p.is_file()
            for i, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if outside.search(line) and p.name != "test_layout.py"]
    assert not hits, hits


def _anchors(doc):
    """GitHub's heading anchors of a Markdown file (headings inside code blocks are not headings)."""
    import re

    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_links_in_readme_and_docs_resolve():
    import re

    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(docs) > 5
    broken = []
    for doc in docs:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            dest = doc.parent / path if path else doc
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_anchor_check_catches_a_misspelled_heading():
    editors = ROOT / "docs" / "editors.md"
    assert {"1-the-editor-contract", "4-the-tiny-profile-and-tiny_overrides"} <= _anchors(editors)
    assert "1-the-editor-contracts" not in _anchors(editors)
