import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Deterministic cuBLAS (p2p, imagic on a GPU) needs this before the process's first cuBLAS call, which on a GPU
# machine may be any earlier test's (benchmark.editing.determinism; the `editmeter` command sets it the same way).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
ROOT = Path(__file__).resolve().parents[1]
# Tiny random-weight models are built once per checkout (content-keyed; see benchmark.io.model_cache).
os.environ.setdefault("EDITMETER_CACHE", str(ROOT / ".cache"))
# the user's pins (`editmeter data pin`, benchmark.io.pins) never reach a test: a file that no test writes (a test that
# pins sets its own with monkeypatch)
os.environ["EDITMETER_PINS"] = str(ROOT / ".cache" / "no-pins-in-tests" / "pins.json")
HELPERS = Path(__file__).parent / "helpers"
sys.path.insert(0, str(HELPERS))


def child_pythonpath(*dirs: Path) -> str:
    """PYTHONPATH for a `python -m ...` child: `dirs` first, then the inherited one, which may hold the installed
    packages (pip install --target, as on an offline GPU machine)."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([*(str(d) for d in dirs), *inherited])


@pytest.fixture(scope="session")
def demo_qs():
    from benchmark.querysets.io import load_queryset

    return load_queryset(ROOT / "datasets" / "demo")


def run_demo(results: Path, editor: str, *extra: str):
    """Run the pipeline in-process on the demo set into `results`; returns the summary dict."""
    from benchmark.commands.run import compose, run_pipeline

    cfg, choices = compose([f"editor={editor}", "queryset=demo", "profile=tiny", f"paths.results={results}",
                            "progress=false", "aggregate.bootstrap_resamples=200", *extra])
    return run_pipeline(cfg, choices["editor"])


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="run tests marked slow")
    parser.addoption("--run-weights", action="store_true", help="run tests that need real pretrained weights")


# The test files that take longest, longest first (seconds summed over each file's tests, from `make test
# --durations=0` on this project's 2-core machine, 2026-12-06). `make test` runs each file on one worker
# (--dist loadfile) and hands files out in collection order (--no-loadscope-reorder: xdist would otherwise order
# them by how many tests they hold); starting the long ones first keeps one of them from being the suite's tail.
# Only the order changes: a file missing here runs after these, in its usual place.
LONGEST_FILES = (
    "test_gpu_class_bugs.py", "test_slurm.py", "test_inversion_store.py", "test_readme_commands.py",
    "test_docs_run.py", "test_editors.py", "test_pipeline.py", "test_sample.py", "test_flow_editors.py",
    "test_code_identity.py", "test_inversion_resume.py", "test_score_judged.py", "test_report.py",
    "test_multiturn.py", "test_arena.py", "test_scale.py", "test_carry.py", "test_inversion_sharing_pipelines.py",
    "test_first_hour.py", "test_diffusion.py",
)


def _longest_first(items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    cuda = False
    if any("gpu" in item.keywords for item in items):
        import torch

        cuda = torch.cuda.is_available()
    for item in items:
        if "slow" in item.keywords and not config.getoption("--run-slow"):
            item.add_marker(pytest.mark.skip(reason="slow: pass --run-slow"))
        if "weights" in item.keywords and not config.getoption("--run-weights"):
            item.add_marker(pytest.mark.skip(reason="needs real weights: pass --run-weights"))
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA device"))


@pytest.fixture(scope="module")
def single_thread_torch():
    """Run torch on one CPU thread for the module. On a shared 2-core machine, torch's 2-thread OpenMP barriers
    spin while a neighbour holds the other core: tiny-model backward passes then vary from 1 s to 30 s."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def restore_logging():
    """An in-process Hydra run configures logging (handlers on the captured stderr); put it back afterwards."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_terminal_summary(terminalreporter, config):
    """After a session that ran the docs' blocks (tests/test_docs_run.py): how many ran, how many are slow-only,
    and the offline-impossible ones, listed with their reasons; and the time the blocks took."""
    reports = [r for r in terminalreporter.stats.get("passed", []) + terminalreporter.stats.get("failed", [])
               if r.nodeid.startswith("tests/test_docs_run.py::test_a_docs_block") and r.when == "call"]
    if not reports:
        return
    from test_docs_run import SETUP_S, summary_lines

    for line in summary_lines():
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"docs blocks: {len(reports)} ran in {sum(r.duration for r in reports):.0f} s, "
                                f"+ {sum(SETUP_S):.0f} s for the checkout copy and the demo runs they share")
