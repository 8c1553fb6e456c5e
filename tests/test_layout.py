"""Guards for the repository layout (DESIGN.md sections 2 and 6)."""

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
    assert "site-packages" in out.splitlines()[0]


def test_pyproject_lists_packages_explicitly():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = meta["tool"]["setuptools"]["packages"]["find"]["include"]
    assert set(include) == {"benchmark*", "editors*"}


def test_import_benchmark_is_light():
    code = "import sys, benchmark, benchmark.run, benchmark.types; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "heavy libraries must be imported lazily"
