"""The `editmeter` command: subcommands dispatch, help lists the config, typos get suggestions, the Makefile stays
online by default, progress bars stay out of non-terminal output."""

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmark.commands import cli
from benchmark.plan.config import UnknownKeyError, check_keys, config_groups, options

ROOT = Path(__file__).resolve().parents[1]
FAST = ["queryset=demo", "profile=tiny", "metrics=basic", "aggregate.bootstrap_resamples=50"]


def test_top_level_help_lists_commands_and_groups(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert re.search(rf"^  {name}\s", out, re.M), name
    for group in config_groups():
        assert f"{group}: {', '.join(options(group))}" in out


def test_unknown_commands(capsys):
    assert cli.main(["shw"]) == 2
    assert "unknown command 'shw'. Did you mean 'show'?" in capsys.readouterr().err
    assert cli.main(["reprot"]) == 2
    assert "Did you mean 'report'?" in capsys.readouterr().err
    assert cli.main([]) == 2 and "usage: editmeter" in capsys.readouterr().out


def test_run_help_lists_groups_options_and_every_key(capsys):
    from omegaconf import OmegaConf

    assert cli.main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Powered by Hydra" not in out and "_target_" not in out  # not the stock text with the composed YAML
    for group in config_groups():
        assert f"{group}: {', '.join(options(group))}" in out
    root = OmegaConf.load(ROOT / "configs" / "config.yaml")
    keys = [k for k in root if k not in ("defaults", "hydra")]
    assert keys and all(re.search(rf"^{k}[.=]", out, re.M) for k in keys), [k for k in keys if f"{k}" not in out]
    assert "editmeter run --multirun" in out


def test_unknown_key_gets_a_suggestion(capsys):
    assert cli.main(["run", "limt=3"]) == 2
    assert "error: unknown key 'limt'. Did you mean 'limit'" in capsys.readouterr().err
    with pytest.raises(UnknownKeyError, match=r"Did you mean 'editor\.noise_std'\?"):
        check_keys(["editor=overedit", "editor.noise_st=4"])
    with pytest.raises(UnknownKeyError, match=r"'editor\.noise_std' \(with editor=identity\)"):
        check_keys(["editor=overedit,identity", "editor.noise_std=4"])  # every job of a sweep needs the key
    with pytest.raises(UnknownKeyError, match=r"Did you mean 'metrics\.hatie\.clip\.arch'\?"):
        check_keys(["metrics=hatie", "metrics.hatie.clip.arc=x"])
    check_keys(["+limt=3", "++other.key=1", "limit=3", "shard.index=1", "editor=overedit", "editor.noise_std=4",
                "stages=[edit]", "hydra.run.dir=/tmp/x", "~seed"])  # adding keys and real keys pass


def test_compose_reports_unknown_keys_the_same_way():
    from benchmark.commands.run import compose

    with pytest.raises(UnknownKeyError, match="Did you mean 'batch_size'"):
        compose(["bach_size=3"])


def test_unknown_group_option_gets_a_suggestion(capsys):
    from benchmark.commands.run import main as run_main

    assert run_main(["editor=overedt"]) == 2  # `python -m benchmark.commands.run` is the same command
    # the closest name first; an editor added under a similar name may follow it ("... or 'overlay'?")
    assert re.search(r"unknown editor 'overedt'\. Did you mean 'overedit'( or '\w+')*\?", capsys.readouterr().err)
    # the override is checked before the (here missing) edits folder, as `editmeter run` checks it first
    assert cli.main(["score", "--edits", "x", "--name", "y", "queryset=dmo"]) == 2
    assert "unknown queryset 'dmo'. Did you mean 'demo'" in capsys.readouterr().err  # (or 'demo_mini')


def test_run_then_show_in_process(tmp_path, capsys, restore_logging):
    results = tmp_path / "results"
    assert cli.main(["run", "editor=identity", "limit=3", f"paths.results={results}", *FAST]) == 0
    captured = capsys.readouterr()
    assert "\r" not in captured.err and "\r" not in captured.out  # progress=auto: stderr is not a terminal here
    assert re.search(r"^\[editmeter\] timings \(identity\): .*total [\d.]+ s$", captured.out, re.M)
    lb = pd.read_csv(results / "leaderboard.csv")
    assert lb[lb["editor"] == "identity"].iloc[0]["n_ok"] == 3
    assert cli.main(["show", "--results", str(results), "--queryset", "demo"]) == 0
    shown = capsys.readouterr().out
    assert re.search(r"^identity\s+\w{8}\s+3\s+0\s", shown, re.M)


def test_score_a_folder_of_edits(tmp_path, capsys, restore_logging):
    from benchmark.querysets.io import load_queryset

    qs = load_queryset(ROOT / "datasets" / "demo")
    edits = tmp_path / "edits"
    edits.mkdir()
    for q in qs.subset(4).queries[:3]:
        shutil.copy(qs.path(q.image), edits / f"{q.id}.png")  # the source itself: a perfect no-op "edit"
    rc = cli.main(["score", "--edits", str(edits), "--name", "theirs", "limit=4", f"paths.results={tmp_path / 'r'}",
                   *FAST])
    assert rc == 0
    assert "MISSING 1 edits" in capsys.readouterr().out
    row = pd.read_csv(tmp_path / "r" / "leaderboard.csv").set_index("editor").loc["theirs"]
    assert row["n_ok"] == 3 and row["n_failed"] == 0 and row["l1_out"] == 0  # the missing one is not a failure


def test_score_needs_its_options(capsys):
    assert cli.main(["score", "queryset=demo"]) == 2
    assert "--edits" in capsys.readouterr().err
    assert cli.main(["score", "--edits", "/nonexistent/edits", "--name", "x", "queryset=demo"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/edits: no such folder" in err and "Traceback" not in err


def test_score_on_an_unbuilt_queryset_names_it_without_a_traceback(tmp_path, capsys):
    edits = tmp_path / "edits"
    edits.mkdir()
    rc = cli.main(["score", "--edits", str(edits), "--name", "x", f"queryset.root={tmp_path / 'nowhere'}",
                   f"paths.results={tmp_path / 'r'}", *FAST])
    err = capsys.readouterr().err
    assert rc == 1
    assert "preflight: query set" in err and str(tmp_path / "nowhere") in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # nothing was started


def test_progress_only_on_a_terminal():
    from benchmark.io.console import progress_enabled

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert progress_enabled("auto", io.StringIO()) is False
    assert progress_enabled("auto", Tty()) is True
    assert progress_enabled(True, io.StringIO()) is True and progress_enabled("false", Tty()) is False
    with pytest.raises(ValueError, match="progress"):
        progress_enabled("sometimes")


def test_quiet_third_party_respects_the_users_settings(monkeypatch):
    import warnings

    from benchmark.io.console import quiet_third_party

    for key in ("DIFFUSERS_VERBOSITY", "TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")
    with warnings.catch_warnings():
        quiet_third_party(progress=False)
        assert os.environ["DIFFUSERS_VERBOSITY"] == "error" and os.environ["TRANSFORMERS_VERBOSITY"] == "info"
        assert os.environ["TQDM_DISABLE"] == "1"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("default")
            quiet_third_party(progress=False)
            warnings.warn_explicit("old", FutureWarning, "x.py", 1, module="diffusers.pipelines.x")
            warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="benchmark.stages.edit")
        assert [str(w.message) for w in seen] == ["ours"]  # third-party deprecations go, ours stay


def test_our_warnings_print_in_the_console_style_and_others_keep_pythons(tmp_path):
    """A quarantine warning after any `editmeter` command reads `[editmeter] warning: <message>`: no source path, line
    or class name of editmeter's; another package's warning keeps Python's format, path and line included."""
    bad = tmp_path / "part-0.parquet"
    bad.write_bytes(b"not parquet")
    child = ("import sys, warnings\n"
             "from pathlib import Path\n"
             "from benchmark.commands.cli import main\n"
             "from benchmark.io.score_cache import quarantine\n"
             "main(['show', '--results', sys.argv[1]])\n"
             "quarantine(Path(sys.argv[2]), 'not a readable Parquet file')\n"
             "warnings.warn_explicit('a third-party warning', UserWarning, 'lib/x.py', 7, module='lib.x')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", child, str(tmp_path / "results"), str(bad)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    ours = [ln for ln in lines if "not a readable Parquet file" in ln]
    assert ours == [f"[editmeter] warning: {bad}: not a readable Parquet file; moved to "
                    f"{tmp_path / 'quarantine' / bad.name}, its rows will be recomputed by the next score run"], lines
    assert "score_cache.py" not in proc.stderr and "ResultsWarning" not in proc.stderr
    assert "lib/x.py:7: UserWarning: a third-party warning" in lines


def _makefile_rules() -> list[str]:
    return (ROOT / "Makefile").read_text().splitlines()


def test_makefile_is_online_by_default():
    lines = [line.split("##")[0] for line in _makefile_rules()]  # `## ...` is a target's help text
    for line in lines:
        if "HF_HUB_OFFLINE" in line and not line.lstrip().startswith("#"):
            # only as a target-specific variable (`targets: export HF_HUB_OFFLINE = 1`) or inside a recipe
            assert re.match(r"^[a-z][a-z -]*:\s*export HF_HUB_OFFLINE", line) or line.startswith("\t"), line
    offline = next(line for line in lines if re.match(r"^[a-z][a-z -]*:\s*export HF_HUB_OFFLINE", line))
    targets = set(offline.split(":")[0].split())
    assert {"test", "demo"} <= targets and not {"bench", "weights", "data", "score"} & targets


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize(("target", "expected"), [("bench", "unset"), ("weights", "unset"), ("demo-hatie", "1")])
def test_makefile_targets_call_editmeter_with_the_right_network_mode(target, expected):
    probe = f"{sys.executable} -c 'import os, sys; print(sys.argv[1], os.environ.get(\"HF_HUB_OFFLINE\", \"unset\"))'"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE" and not k.startswith("MAKE")}
    out = subprocess.run(["make", "-s", target, f"EDITMETER={probe}", "SHOW=true"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    calls = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert calls and all(c == [c[0], expected] for c in calls), out.stdout
    assert {c[0] for c in calls} <= {"run", "weights", "show"}


def test_data_dispatches_to_the_downloader(capsys):
    assert cli.main(["data", "no_such_set"]) == 1
    err = capsys.readouterr().err
    assert "error: no manifest" in err and "magicbrush" in err  # names the sets there are
    assert cli.main(["data", "--help"]) == 0 and "--only" in capsys.readouterr().out


def test_weights_is_imported_lazily_and_gets_the_arguments(monkeypatch):
    import types

    seen = []
    fake = types.ModuleType("benchmark.plan.weights")
    fake.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "benchmark.plan.weights", fake)
    assert cli.main(["weights", "editor=ip2p", "metrics=hatie"]) == 0
    assert seen == [["editor=ip2p", "metrics=hatie"]]


def test_run_logging_keeps_root_info_out_and_ours_in(tmp_path, restore_logging):
    """open_clip logs "Loaded ... model config." at INFO through the root logger: a run's logging drops that and
    keeps editmeter's INFO and every WARNING."""
    import logging.config

    from omegaconf import OmegaConf

    cfg = OmegaConf.load(ROOT / "configs" / "hydra" / "job_logging" / "editmeter.yaml")
    cfg.handlers.file.filename = str(tmp_path / "run.log")
    stream = io.StringIO()
    logging.config.dictConfig(OmegaConf.to_container(cfg))
    logging.getLogger().handlers[0].setStream(stream)  # the console handler
    logging.info("Loaded ViT-B-32 model config.")
    logging.getLogger("benchmark.stages.edit").info("ours")
    logging.getLogger("open_clip.factory").warning("third-party warning")
    logging.shutdown()
    for text in (stream.getvalue(), (tmp_path / "run.log").read_text()):
        assert "Loaded ViT" not in text and "ours" in text and "third-party warning" in text
    for name in ("benchmark", "editors"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def test_docs_name_every_command_group_option_and_key():
    from omegaconf import OmegaConf

    doc = (ROOT / "docs" / "cli.md").read_text()
    assert all(f"## `editmeter {name}`" in doc for name in cli.COMMANDS)
    assert all(f"`{opt}`" in doc for group in config_groups() if group != "editor" for opt in options(group))
    # editors are plug-ins (docs/editors.md): the row names the shipped ones, each a real editor, and the command
    # that lists every one, an editor added to configs/editor/ included (its output: test_run_help_lists_...)
    row = next(line for line in doc.splitlines() if line.startswith("| `editor` |"))
    listed = re.findall(r"`(\w+)`", row.split("|")[2])
    assert listed and set(listed) <= set(options("editor")) and "`editmeter run --help`" in row, row
    root = OmegaConf.load(ROOT / "configs" / "config.yaml")
    for key in (k for k in root if k not in ("defaults", "hydra")):
        node = root[key]
        names = [f"{key}.{k}" for k in node] if OmegaConf.is_dict(node) else [key]
        assert all(f"`{n}`" in doc for n in names), names


def test_docs_name_every_metaeval_test():
    from benchmark.commands.metaeval.cli import TESTS

    doc = (ROOT / "docs" / "cli.md").read_text()
    assert all(f"editmeter metaeval {t} " in doc for t in TESTS), [t for t in TESTS if f"metaeval {t} " not in doc]


def test_console_script_and_accelerate_are_declared():
    import importlib

    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, func = meta["scripts"]["editmeter"].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    assert any(re.match(r"accelerate\b", d) for d in meta["dependencies"])


def test_show_reads_the_checkout_results_from_any_folder(tmp_path, monkeypatch, capsys):
    from benchmark.tables.leaderboard import main as show_main

    monkeypatch.chdir(tmp_path)  # an empty folder: a cwd-relative default would find nothing here
    seen = []
    monkeypatch.setattr("benchmark.tables.leaderboard.format_table", lambda results, queryset=None: seen.append(results) or "")
    assert show_main(["show"]) == 0
    assert seen == [ROOT / "results"]


def test_output_piped_into_head_is_not_an_error():
    """`editmeter show | head -1`: the reader closes the pipe while output is still coming (more than a pipe
    buffer); the command exits quietly, with no BrokenPipeError traceback."""
    import subprocess
    import sys

    code = ("import sys; from benchmark.commands import cli; "
            "cli.COMMANDS['big'] = (lambda argv: print('row\\n' * 500_000) or 0, 'a long listing'); "
            "sys.exit(cli.main(['big']))")
    proc = subprocess.run(f"{sys.executable} -c \"{code}\" | head -c 10", shell=True, capture_output=True,
                          text=True, timeout=120)
    assert proc.stdout == "row\nrow\nro"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("suite", ["gedit", "imgedit", "rise"])
@pytest.mark.parametrize("backbone", ["endpoint", "openai"])
def test_a_judge_backbone_selected_into_its_package_composes_through_the_cli(suite, backbone):
    """`metrics/<suite>_judge@metrics.<suite>.backbone=<choice>` (docs/judge.md) through `editmeter run`, as a user
    types it: the key check composes the group with its package (it dropped the package and raised Hydra's
    ConfigCompositionException); `--cfg job` prints the composed config without running anything."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OPENAI_API_KEY="sk-test")
    proc = subprocess.run([sys.executable, "-m", "benchmark.commands.cli", "run", "--cfg", "job", f"metrics={suite}",
                           f"metrics/{suite}_judge@metrics.{suite}.backbone={backbone}",
                           f"metrics.{suite}.backbone.base_url=http://127.0.0.1:9/v1", "editor=identity",
                           "queryset=demo_mini", "profile=tiny"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "_target_: benchmark.models.judge_endpoint.EndpointJudge" in proc.stdout
    assert "base_url: http://127.0.0.1:9/v1" in proc.stdout


@pytest.mark.parametrize("target", ["demo", "demo-editval"])
def test_docs_cli_make_table_names_the_commands_make_runs(target):
    """docs/cli.md's row for `make <target>` quotes the `editmeter run` commands that `make -n <target>` prints
    (one with another `metrics=` is named by that setting), so the table cannot drift from the Makefile."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    row = next(line for line in (ROOT / "docs" / "cli.md").read_text().splitlines()
               if line.startswith(f"| `make {target}` |"))
    quoted = {" ".join(c.split()) for c in re.findall(r"`(editmeter run [^`]+)`", row)}
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "ARGS")}
    dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, env=env, check=True).stdout
    made = []
    for line in dry.splitlines():
        m = re.search(r"editmeter run (.*)", line)
        if m:
            args = [a for a in m.group(1).split() if not a.startswith("paths.results=")]
            made.append("editmeter run " + " ".join(args))
    assert made and quoted, (made, quoted)
    for cmd in made:
        setting = re.search(r"metrics=\S+", cmd).group(0)
        same_but_metrics = {re.sub(r"metrics=\S+", setting, q) for q in quoted}
        assert cmd in quoted or (cmd in same_but_metrics and f"`{setting}`" in row), (cmd, row[:300])
    assert quoted <= set(made), quoted - set(made)
