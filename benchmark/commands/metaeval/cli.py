"""`editmeter metaeval <test> [options] [key=value ...]`: how far each metric agrees with ground truth and people.

    editmeter metaeval gt-selection queryset=demo_mini profile=tiny --metrics basic
    editmeter metaeval 2afc --pairs prefs.csv queryset=demo
    editmeter metaeval winrate --ratings r1.tsv r2.tsv r3.tsv --images ImagenHub_Text-Guided_IE \\
        --query-ids magicbrush-dev queryset=magicbrush
    editmeter metaeval fit-weights --pairs prefs.csv --name my-fit queryset=hatie metrics... (docs/metaeval.md)
    editmeter metaeval drift --metrics gedit [--a SIG_OR_JUDGE --b SIG_OR_JUDGE] paths.results=results

`key=value` arguments are run-config overrides (queryset=, profile=, paths.results=, limit=...), or metaeval settings
(`metaeval.candidates.preserved.noise_std=3`, configs/metaeval.yaml).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

TESTS = ("gt-selection", "2afc", "winrate", "fit-weights", "judges", "drift")
JUDGE_SETS = ("editscore", "tiger", "genai", "imagenhub")  # benchmark.commands.metaeval.judges.SETS, without its imports
STATS = {"gt-selection": ("gt_first", "pref_gt", "pref_preserved", "pref_modified"),
         "2afc": ("agreement",), "winrate": ("pearson", "spearman", "kendall"),
         "fit-weights": ("train_pearson", "test_pearson", "test_spearman", "test_kendall")}
COUNTS = {"gt-selection": ("n_queries", "n_excluded"), "2afc": ("n_pairs", "n_human_ties", "n_unscored"),
          "winrate": ("n_editors", "n_pairs", "n_unscored"), "fit-weights": ("n_train_pairs", "n_test_pairs")}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="editmeter metaeval", description=(
        "Meta-evaluation of every metric set: ground-truth selection, 2AFC agreement with people, win-rate "
        "correlation, HATIE weight fitting; judges against published human preferences, and the drift between two "
        "judges of one suite. Writes one table (metric x statistic, with bootstrap intervals) to "
        "<results>/metaeval/. docs/metaeval.md describes every test and input format."),
        epilog="key=value: run-config overrides (queryset=demo profile=tiny limit=20 paths.results=...) or "
               "metaeval settings (metaeval.resamples=2000, configs/metaeval.yaml)")
    sub = ap.add_subparsers(dest="test", required=True, metavar="{" + ",".join(TESTS) + "}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--metrics", help="comma-separated metric sets (configs/metrics/); default: every one "
                        "(fit-weights: hatie)")
    common.add_argument("--resamples", type=int, help="bootstrap resamples (default metaeval.resamples)")
    common.add_argument("--seed", type=int, help="bootstrap / split seed (default metaeval.seed)")
    common.add_argument("overrides", nargs="*", metavar="key=value")
    human = argparse.ArgumentParser(add_help=False)
    src = human.add_mutually_exclusive_group(required=True)
    src.add_argument("--pairs", type=Path, help="pairwise preference CSV: query_id,image_a,image_b,preferred[,"
                     "editor_a,editor_b,rater,criterion,split]")
    src.add_argument("--ratings", type=Path, nargs="+", help="per-image rating TSVs, one per rater (ImagenHub's "
                     "uid + one [SC, PQ] column per editor)")
    human.add_argument("--criterion", help="with --pairs: keep the rows of this criterion (column `criterion`)")
    human.add_argument("--images", type=Path, help="with --ratings: folder of <editor>/<uid> images")
    human.add_argument("--aspect", default="overall", choices=("overall", "SC", "PQ"),
                       help="with --ratings: what people's score is (overall = sqrt(SC*PQ), ImagenHub's O)")
    human.add_argument("--raters", default="mean", choices=("mean", "majority"),
                       help="with --ratings: combine raters by mean score or by majority of votes")
    human.add_argument("--query-ids", default="stem", help="with --ratings: uid -> query id: stem, "
                       "magicbrush-<split> (sample_<img>_<turn> -> mb-<split>-<img>-t<turn>) or a CSV uid,query_id")
    human.add_argument("--skip-missing", action="store_true", help="with --ratings: drop (and count) pairs whose "
                       "image is missing instead of stopping")
    g = sub.add_parser("gt-selection", parents=[common], help="does each metric pick the ground truth over an "
                       "excessively preserved and an excessively modified image?")
    g.add_argument("--modified", type=Path, help="folder of excessively modified images named <query id>.<ext> "
                   "(default: generated from the target text by metaeval.candidates.modified)")
    g.add_argument("--preserved", choices=("noise", "shift"), help="excessively preserved candidate: light Gaussian "
                   "noise or a one-pixel shift of the source (default metaeval.candidates.preserved.mode)")
    sub.add_parser("2afc", parents=[common, human], help="share of human pairwise preferences each metric agrees with")
    sub.add_parser("winrate", parents=[common, human], help="Pearson / Spearman / Kendall between human and metric "
                   "per-editor win rates")
    f = sub.add_parser("fit-weights", parents=[common, human], help="fit HATIE's Total weights to human win rates "
                       "(grid search, train / held-out split) and write a named weight profile")
    f.add_argument("--name", required=True, help="profile name (configs/metrics/hatie_weights/<name>.yaml)")
    f.add_argument("--out-profile", type=Path, help="write the profile here instead")
    f.add_argument("--base", default="default", help="profile to compare with and take criteria_share from")
    f.add_argument("--force", action="store_true", help="replace an existing profile file")
    f.add_argument("--train-fraction", type=float, help="share of queries used for fitting when the CSV has no "
                   "split column (default metaeval.fit.train_fraction)")
    j = sub.add_parser("judges", parents=[common], help="editmeter's judges against published human-preference "
                       "sets, each by the set's own agreement measure (docs/metaeval.md)")
    j.add_argument("--judges", default="judge,gedit", help="comma-separated judge metric sets (default judge,gedit)")
    j.add_argument("--sets", nargs="+", required=True, metavar="NAME=PATH", help="editscore=PATH (EditScore's "
                   "EditReward-Bench parquet), tiger=PATH (TIGER-Lab's EditReward-Bench JSON folder), genai=PATH "
                   "(GenAI-Bench image_edition parquet), imagenhub (with --ratings, --images and queryset=)")
    j.add_argument("--dimension", default="overall", help="editscore: the rows of this dimension "
                   "(prompt_following, consistency, overall), compared on the judge's score of that dimension")
    j.add_argument("--no-cache", action="store_true", help="judge every edit again instead of reading the rows "
                   "kept in <results>/metaeval/judge_scores/ (per judge signature and image content)")
    j.add_argument("--ratings", type=Path, nargs="+", help="imagenhub: per-image rating TSVs, one per rater")
    j.add_argument("--images", type=Path, help="imagenhub: folder of <editor>/<uid> images")
    j.add_argument("--query-ids", default="stem", help="imagenhub: uid -> query id (as for 2afc)")
    d = sub.add_parser("drift", help="two judges of one suite on the same edits: mean shift, per-sample agreement, "
                       "and what it does to the ranking of the editors (docs/metaeval.md)",
                       description="Compare two judges (two metric signatures of one judged suite) on the edits of "
                       "one results folder: per dimension the mean shift B - A with a paired bootstrap interval, "
                       "exact / within / Spearman agreement, each editor's rank under both, Kendall's tau and the "
                       "pairs whose order changes. Only samples scored ok under both judges are paired; failures "
                       "are counted. Reads scored runs only.",
                       epilog="key=value: paths.results=DIR (the results folder) or metaeval.<key>=value "
                              "(configs/metaeval.yaml: resamples, confidence, seed)")
    d.add_argument("--metrics", help="the judged metric set (default: the only one scored by two judges)")
    d.add_argument("--queryset", help="the query set (by name) when the metric set has runs on several")
    d.add_argument("--a", metavar="JUDGE", help="judge A: a metric signature prefix or a judge name (the leaderboard's components "
                   "`judge`); default: of exactly two judges, the one scored first")
    d.add_argument("--b", metavar="JUDGE", help="judge B (as --a); default: the other one")
    d.add_argument("--within", type=float, default=1.0, help="agreement tolerance: |B - A| <= this counts as "
                   "within, on the suite's own scale (default 1)")
    d.add_argument("--resamples", type=int, help="bootstrap resamples (default metaeval.resamples)")
    d.add_argument("--seed", type=int, help="bootstrap seed (default metaeval.seed)")
    d.add_argument("overrides", nargs="*", metavar="key=value")
    return ap


def _pairs(args: argparse.Namespace) -> tuple[list[Any], list[Path], dict[str, int]]:
    from benchmark.commands.metaeval.human import (
        HumanDataError,
        query_id_mapper,
        ratings_to_pairs,
        read_pairs,
        read_ratings,
    )

    if args.pairs is not None:
        if args.images is not None:
            raise HumanDataError("--images goes with --ratings; a pairs CSV names its images itself")
        pairs, counts = read_pairs(args.pairs, criterion=args.criterion)
        return pairs, [args.pairs], counts
    if args.images is None:
        raise HumanDataError("--ratings needs --images <folder of <editor>/<uid> images>")
    raters = [read_ratings(p) for p in args.ratings]
    pairs, counts = ratings_to_pairs(raters, args.images, aspect=args.aspect, rule=args.raters,
                                     query_ids=query_id_mapper(args.query_ids), skip_missing=args.skip_missing)
    return pairs, list(args.ratings), counts


def main(argv: list[str] | None = None) -> int:
    """Run one test; exit 0, or 2 with one message naming the bad input and the fix."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # key=value overrides may stand anywhere (argparse's subcommands cannot mix them with options)
    # (`judges --sets editscore=PATH ...` entries are its sets, not overrides)
    kv = [a for a in argv if "=" in a and not a.startswith("-") and a.split("=", 1)[0] not in JUDGE_SETS]
    args = _parser().parse_args([a for a in argv if a not in kv])
    bad = list(args.overrides)
    if bad:
        print(f"error: not a key=value override: {' '.join(bad)}", file=sys.stderr)
        return 2
    args.overrides = kv
    settings = [o for o in args.overrides if o.startswith("metaeval.")]
    overrides = [o for o in args.overrides if not o.startswith("metaeval.")]
    from benchmark.commands.metaeval.fit import FitError
    from benchmark.commands.metaeval.human import HumanDataError
    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.metrics.hatie.weights import WeightProfileError

    try:
        if args.test == "judges":
            from benchmark.commands.metaeval.judge_cli import run_judges

            return run_judges(args, overrides, settings)
        if args.test == "drift":
            from benchmark.commands.metaeval.drift_cli import run_drift

            return run_drift(args, overrides, settings)
        return _run(args, overrides, settings)
    except (MetaevalError, HumanDataError, WeightProfileError, FitError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, overrides: list[str], settings: list[str]) -> int:
    from benchmark.commands.metaeval import evaluate
    from benchmark.commands.metaeval.human import with_split
    from benchmark.commands.metaeval.scoring import MetaevalError, Session, metric_suite
    from benchmark.commands.metaeval.table import file_digests, render, write_table
    from benchmark.plan.config import UnknownOptionError, check_keys

    try:  # `metrics.<suite>.<key>=` overrides are checked by the session, against the sets that hold the suite
        check_keys([o for o in overrides if metric_suite(o) is None])
    except UnknownOptionError as err:
        raise MetaevalError(str(err)) from None
    metric_sets = args.metrics.split(",") if args.metrics else (["hatie"] if args.test == "fit-weights" else None)
    inputs: list[Path] = []
    pairs: list[Any] = []
    counts: dict[str, int] = {}
    if args.test != "gt-selection":  # read the judgements first: a bad file fails before any model loads
        pairs, inputs, counts = _pairs(args)
        if not pairs:
            dropped = counts.get("pairs_skipped_missing_image", 0)
            why = (f": --skip-missing dropped all {dropped} pair(s) for a missing image; point --images at the "
                   f"folder that holds the edits" if dropped else "")
            raise MetaevalError(f"no judged pairs in the input{why}")
    session = Session(overrides, metric_sets, settings)
    for m, why in session.left_out.items():
        print(f"[metaeval] metrics={m} left out of the default (every metric set): {why}")
    boot = evaluate.Boot(int(args.resamples if args.resamples is not None else session.setting("resamples")),
                         int(args.seed if args.seed is not None else session.setting("seed")),
                         float(session.setting("confidence")))
    if boot.resamples < 0:
        raise MetaevalError(f"--resamples {boot.resamples}: must be >= 0")
    if args.test == "gt-selection":
        rows, extra = evaluate.run_gt_selection(session, modified_folder=args.modified, preserved_mode=args.preserved,
                                                boot=boot)
        if args.modified is not None:
            inputs = []  # the folder's bytes key the run that scored it (editor signature)
    elif args.test in ("2afc", "winrate"):
        rows, extra = evaluate.run_pairs_test(session, pairs, args.test, boot)
    else:
        frac = float(args.train_fraction if args.train_fraction is not None else session.setting("fit.train_fraction"))
        if not 0 < frac < 1:
            raise MetaevalError(f"--train-fraction {frac}: must be in (0, 1)")
        pairs = with_split(pairs, frac, boot.seed)
        rows, extra, profile_path = evaluate.run_fit(session, pairs, name=args.name, out_path=args.out_profile,
                                                     base=args.base, step=float(session.setting("fit.step")),
                                                     boot=boot, force=args.force)
    extra["counts"] = {**counts, **extra.get("counts", {})}
    extra.setdefault("options", {})
    extra["options"].update({k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                             if k not in ("overrides", "pairs", "ratings") and v is not None})
    extra["overrides"] = overrides + settings
    if session.left_out:
        extra["left_out"] = session.left_out
    full, _ = session.queryset()
    path = write_table(session.out_dir, args.test, rows, queryset=full, profile=session.profile,
                       resamples=boot.resamples, confidence=boot.confidence, seed=boot.seed,
                       inputs=file_digests(inputs), extra=extra)
    print(f"\n[metaeval] {args.test} on {full.name} ({full.short_hash}), profile={session.profile}, "
          f"{int(boot.confidence * 100)}% intervals from {boot.resamples} cluster-bootstrap resamples over queries")
    print(render(rows, STATS[args.test], COUNTS[args.test]))
    if counts:
        print("[metaeval] input: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.test == "fit-weights":
        print(f"[metaeval] fitted weights {extra['fitted']} written to {profile_path}; use them with "
              f"metrics.hatie.weights={args.name if args.out_profile is None else profile_path}")
    if session.profile != "pretrained":
        print(f"[metaeval] NOTE: profile={session.profile}: random weights; these numbers test the pipeline, they do "
              "not measure the metrics")
    print(f"[metaeval] wrote {path} (+ .json provenance)")
    return 0
