"""`editmeter gpu-check`: one line without CUDA; on a device (here the CPU, `--allow-cpu`) a table whose rows pass
only when the check really holds. And the GPU tests (`-m gpu`): every editor and suite on CUDA, skipped here."""

import subprocess
import sys

import numpy as np
import pytest

from benchmark.commands import gpucheck

pytestmark = pytest.mark.usefixtures("single_thread_torch")


def test_without_cuda_it_says_so_in_one_line_and_exits_0(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpucheck.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("gpu-check: no CUDA device visible")


def test_make_gpu_check_is_the_same_command():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the whole check")
    proc = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "gpu-check"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stdout + proc.stderr


def test_on_a_device_every_row_passes_and_the_table_has_the_numbers(tmp_path, capsys, restore_logging):
    md = tmp_path / "check.md"
    status = gpucheck.main(["--allow-cpu", "--editors", "identity,sdedit", "--dtypes", "bf16", "--suites", "basic",
                            "--no-timing", "--markdown", str(md)])
    out = capsys.readouterr().out
    assert status == 0, out
    rows = [line for line in md.read_text().splitlines() if line.startswith("| tiny")]
    assert [r.split("|")[2].strip() for r in rows] == ["identity tiny fp32", "sdedit tiny bf16", "suite basic"]
    assert all("PASS" in r for r in rows)
    assert float(rows[1].split("|")[4]) > 0  # seconds per query measured
    assert "3 passed, 0 failed" in out


def test_timing_only_with_a_priced_variant_names_it_and_leaves_the_table_after_each_row(tmp_path, monkeypatch):
    seen = []

    def fake_run(overrides, results, **kw):
        seen.append(list(overrides))
        if len(seen) == 2:  # the table of the first row is on disk before the second runs
            assert "| random | identity real size editor.deterministic=false |" in md.read_text()
            assert "incomplete" in md.read_text()
        raise RuntimeError("stop here")

    md = tmp_path / "t.md"
    monkeypatch.setattr(gpucheck, "run_once", fake_run)
    monkeypatch.setattr(gpucheck, "SD_EDITORS", ("identity", "oracle"))
    status = gpucheck.main(["--allow-cpu", "--no-tiny", "--editors", "identity,oracle", "--suites", "basic",
                            "--timing-set", "editor.deterministic=false", "--markdown", str(md)])
    assert status == 1 and len(seen) == 2  # two timings, no tiny check, no HATIE timing (hatie not in --suites)
    assert all("editor.deterministic=false" in o and "profile=random" in o for o in seen)
    text = md.read_text()
    assert "incomplete" not in text and text.count("FAIL: RuntimeError: stop here") == 2


def test_nothing_to_check_and_bad_overrides_are_refused(capsys):
    for argv in (["--no-tiny", "--no-timing"], ["--timing-set", "deterministic=false"]):
        with pytest.raises(SystemExit):
            gpucheck.parse(argv)
    err = capsys.readouterr().err
    assert "leave nothing to check" in err and "write editor.KEY=VALUE" in err


def test_a_rerun_that_differs_fails_its_row_with_the_reason(tmp_path, monkeypatch):
    """overedit draws from the query seed: giving the second run another seed must make the rerun check fail."""
    real = gpucheck.run_once
    calls = []

    def second_run_other_seed(overrides, results, **kw):
        calls.append(results)
        extra = ["seed=1"] if len(calls) == 2 else []
        return real([*overrides, *extra], results, **kw)

    monkeypatch.setattr(gpucheck, "run_once", second_run_other_seed)
    row = gpucheck.check_editor("overedit", None, device=gpucheck.Device("cpu"), queries=2, work=tmp_path)
    assert not row.ok and row.reason.startswith("rerun differs: 2 of 2 PNGs"), row


def test_a_failing_editor_is_a_failed_row_not_a_crash(tmp_path, monkeypatch):
    real = gpucheck.run_once
    monkeypatch.setattr(gpucheck, "run_once", lambda o, r, **kw: real(
        [*o, "editor._target_=failing_editor.AlwaysFails"], r, **kw))
    row = gpucheck.check_editor("identity", None, device=gpucheck.Device("cpu"), queries=2, work=tmp_path)
    assert not row.ok and "2 of 2 failed" in row.reason and "RuntimeError" in row.reason


def test_unknown_editor_or_suite_is_refused_naming_the_valid_ones(capsys):
    with pytest.raises(SystemExit):
        gpucheck.parse(["--editors", "ip2p,p2pp"])
    assert "unknown editor(s) p2pp; valid:" in capsys.readouterr().err


# --- on CUDA (-m gpu; skipped without a device) ---------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", gpucheck.HALF)
@pytest.mark.parametrize("name", gpucheck.DIFFUSION_EDITORS)
def test_gpu_editor_edits_and_reruns_byte_identically(name, dtype, tmp_path, restore_logging):
    row = gpucheck.check_editor(name, dtype, device=gpucheck.Device("cuda"), queries=2, work=tmp_path)
    assert row.ok, row


@pytest.mark.gpu
@pytest.mark.parametrize("suite", gpucheck.SUITES)
def test_gpu_suite_scores_without_failures(suite, tmp_path, restore_logging):
    row = gpucheck.check_suite(suite, device=gpucheck.Device("cuda"), queries=4, work=tmp_path)
    assert row.ok, row


@pytest.mark.gpu
def test_gpu_imagic_fine_tune_is_reproducible_and_not_black(demo_qs):
    from hydra.utils import instantiate

    from benchmark.commands.run import compose
    from benchmark.editing import imagic
    from benchmark.editing.editor import query_seed
    from benchmark.io.imageio import load_rgb

    cfg, _ = compose(["editor=imagic", "queryset=demo", "profile=tiny", "editor.device=cuda", "editor.dtype=fp16",
                      "editor.cache_size=0"])
    editor = instantiate(cfg.editor)
    q = demo_qs.queries[0]
    src = load_rgb(demo_qs.path(q.image))
    a = editor.edit([q], [src], seeds=[query_seed(0, q.id)])[0]
    imagic.FINETUNES.entries.clear()
    b = editor.edit([q], [src], seeds=[query_seed(0, q.id)])[0]
    assert np.asarray(a).std() > 1 and np.array_equal(np.asarray(a), np.asarray(b))
