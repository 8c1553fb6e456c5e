"""The four meta-evaluation tests, each producing one row per metric (docs/metaeval.md):

- `gt_selection`: triplets (ground truth, excessively preserved, excessively modified) per query;
- `two_afc`: agreement with people's pairwise preferences;
- `winrate`: correlation between people's and the metric's per-editor win rates;
- `fit_weights`: HATIE's criteria weights fitted to people's win rates, written as a named weight profile.

The row-building functions take plain arrays, so they are tested with hand-made data; the `run_*` functions add the
scoring through editmeter's pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.commands.metaeval import stats
from benchmark.commands.metaeval.human import Pair
from benchmark.commands.metaeval.scoring import MetaevalError, ScoredSet, Session, external_node, slot_folders

CANDIDATES = ("gt", "preserved", "modified")
CORRELATIONS = ("pearson", "spearman", "kendall")


@dataclass(frozen=True)
class Boot:
    """Bootstrap settings."""

    resamples: int = 10000
    seed: int = 0
    confidence: float = 0.95


def _est(row: dict[str, Any], name: str, stat: Any, clusters: np.ndarray, boot: Boot, salt: int) -> None:
    value, lo, hi = stats.bootstrap(stat, clusters, n_resamples=boot.resamples, seed=boot.seed + salt,
                                    confidence=boot.confidence)
    row.update({name: value, f"{name}_lo": lo, f"{name}_hi": hi})


# ------------------------------------------------------------------------------------------ ground-truth selection
def gt_selection_row(metric: str, higher_is_better: bool, scores: np.ndarray, query_ids: Sequence[str],
                     boot: Boot) -> dict[str, Any]:
    """One metric's row from its scores (n queries x 3: gt, preserved, modified).

    gt_first: share of queries where the ground truth alone scores best. pref_<candidate>: share of preferences
    (a tie at the top splits the query's preference equally). Queries where any candidate is undefined are left
    out and counted (`n_excluded`)."""
    credit, valid = stats.selection_credit(scores, higher_is_better)
    c = credit[valid]
    clusters = stats.query_clusters([q for q, v in zip(query_ids, valid, strict=True) if v])
    row: dict[str, Any] = {"metric": metric, "higher_is_better": higher_is_better, "n_queries": int(valid.sum()),
                           "n_excluded": int((~valid).sum())}
    _est(row, "gt_first", stats.weighted_mean((c[:, 0] == 1.0).astype(float)), clusters, boot, 0)
    for k, name in enumerate(CANDIDATES):
        _est(row, f"pref_{name}", stats.weighted_mean(c[:, k]), clusters, boot, 1 + k)
    row["top_ties"] = float(((c > 0).sum(axis=1) > 1).mean()) if len(c) else float("nan")
    return row


def run_gt_selection(session: Session, *, modified_folder: Path | None, preserved_mode: str | None,
                     boot: Boot) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Make (or read) the three candidates of every selected query with a ground truth and score them with every
    metric set; returns (rows, provenance extras)."""
    _, qs = session.queryset()
    queries = [q for q in qs.queries if q.target_image]
    if not queries:
        raise MetaevalError(f"query set {qs.name} has no ground-truth edits (target_image) among its {len(qs)} "
                            "selected queries; use queryset=demo or queryset=magicbrush")
    nodes: dict[str, dict[str, Any]] = {
        "gt": session.setting("candidates.gt"),
        "preserved": session.setting("candidates.preserved"),
        "modified": (external_node(modified_folder, "metaeval-modified") if modified_folder is not None
                     else session.setting("candidates.modified")),
    }
    if preserved_mode:
        nodes["preserved"]["mode"] = preserved_mode
    if modified_folder is not None:
        if not Path(modified_folder).is_dir():
            raise MetaevalError(f"--modified {modified_folder}: no such folder (images named <query id>.<ext>)")
        from editors.external import ExternalEdits

        missing = ExternalEdits(str(modified_folder)).missing([q.id for q in queries])
        if missing:
            print(f"[metaeval] {len(missing)} of {len(queries)} queries have no image in {modified_folder} (first: "
                  f"{', '.join(missing[:5])}); they are excluded and counted")
    ids = [q.id for q in queries]
    rows, sigs, runs = [], {}, {}
    for m in session.metric_sets:
        scored = {c: session.score(f"metaeval-{c}", nodes[c], m) for c in CANDIDATES}
        sigs[m] = scored["gt"].metric_sig
        runs[m] = {c: str(s.run_dir) for c, s in scored.items()}
        for col, hib in scored["gt"].columns.items():
            mat = np.array([[scored[c].get(col, q) for c in CANDIDATES] for q in ids])
            rows.append(gt_selection_row(f"{m}/{col}", hib, mat, ids, boot))
    source = "folder " + str(modified_folder) if modified_folder is not None else "text-to-image (candidates.modified)"
    extra = {"metric_sigs": sigs, "runs": runs, "candidates": {k: v for k, v in nodes.items()},
             "options": {"modified": source, "preserved_mode": nodes["preserved"].get("mode")},
             "counts": {"queries_with_gt": len(queries), "selected": len(qs)}}
    return rows, extra


# ---------------------------------------------------------------------------------------------- pairs and scores
@dataclass
class PairScores:
    """For each metric (`<set>/<column>`): its direction and the scores of image a and b of every pair."""

    metrics: dict[str, bool]
    a: dict[str, np.ndarray]
    b: dict[str, np.ndarray]
    sigs: dict[str, str]
    runs: dict[str, list[str]]


def score_pairs(session: Session, pairs: Sequence[Pair]) -> PairScores:
    """Score both images of every pair with every metric set (each image through the edit and score stages, as an
    external edit of its query)."""
    full, _ = session.queryset()
    known = {q.id for q in full.queries}
    unknown = sorted({p.query_id for p in pairs} - known)
    if unknown:
        raise MetaevalError(f"{len(unknown)} query id(s) of the judgements are not in query set {full.name} "
                            f"(e.g. {', '.join(unknown[:5])}); pass the query set they were made on (queryset=...), "
                            "or map the ids (--query-ids)")
    slots = slot_folders([(p.query_id, im) for p in pairs for im in (p.image_a, p.image_b)], session.work_dir)
    folders = sorted({(k, f) for k, f in slots.values()})
    out = PairScores({}, {}, {}, {}, {})
    for m in session.metric_sets:
        scored: dict[int, ScoredSet] = {k: session.score(f"metaeval-slot{k}", external_node(f, f"slot{k}"), m)
                                        for k, f in folders}
        first = scored[folders[0][0]]
        out.sigs[m] = first.metric_sig
        out.runs[m] = [str(s.run_dir) for s in scored.values()]
        for col, hib in first.columns.items():
            name = f"{m}/{col}"
            out.metrics[name] = hib
            out.a[name] = np.array([scored[slots[(p.query_id, p.image_a)][0]].get(col, p.query_id) for p in pairs])
            out.b[name] = np.array([scored[slots[(p.query_id, p.image_b)][0]].get(col, p.query_id) for p in pairs])
    return out


def two_afc_row(metric: str, higher_is_better: bool, human: np.ndarray, score_a: np.ndarray, score_b: np.ndarray,
                query_ids: Sequence[str], boot: Boot) -> dict[str, Any]:
    """Agreement of one metric with people: pairs people tied on are left out (`n_human_ties`), so are pairs the
    metric cannot score (`n_unscored`); a metric tie counts 0.5 (`metric_ties`)."""
    h = np.asarray(human, dtype=np.float64)
    m = stats.metric_outcome(score_a, score_b, higher_is_better)
    scored = np.isfinite(m)
    keep = scored & (h != 0)
    agree = stats.agreement(h[keep], m[keep])
    clusters = stats.query_clusters([q for q, k in zip(query_ids, keep, strict=True) if k])
    row: dict[str, Any] = {"metric": metric, "higher_is_better": higher_is_better, "n_pairs": int(keep.sum()),
                           "n_human_ties": int((h == 0).sum()), "n_unscored": int((~scored).sum())}
    _est(row, "agreement", stats.weighted_mean(agree), clusters, boot, 0)
    row["metric_ties"] = float((m[keep] == 0).mean()) if keep.any() else float("nan")
    return row


def winrate_row(metric: str, higher_is_better: bool, human: np.ndarray, score_a: np.ndarray, score_b: np.ndarray,
                editor_a: Sequence[str], editor_b: Sequence[str], query_ids: Sequence[str],
                boot: Boot) -> tuple[dict[str, Any], dict[str, tuple[float, float]]]:
    """Correlations between people's and the metric's per-editor win rates over the pairs the metric scores (both
    win rates from the same pairs; a tie is half a win for each side). Returns (row, editor -> (human, metric))."""
    h = np.asarray(human, dtype=np.float64)
    m = stats.metric_outcome(score_a, score_b, higher_is_better)
    keep = np.isfinite(m)
    ea = [e for e, k in zip(editor_a, keep, strict=True) if k]
    eb = [e for e, k in zip(editor_b, keep, strict=True) if k]
    row: dict[str, Any] = {"metric": metric, "higher_is_better": higher_is_better, "n_pairs": int(keep.sum()),
                           "n_unscored": int((~keep).sum())}
    rates: dict[str, tuple[float, float]] = {}
    if not keep.any():
        row["n_editors"] = 0
        for kind in CORRELATIONS:
            row.update({kind: float("nan"), f"{kind}_lo": float("nan"), f"{kind}_hi": float("nan")})
        return row, rates
    index = stats.PairIndex.build(ea, eb)
    ones = np.ones((1, len(ea)))
    u, v = stats.win_rates(h[keep], index, ones)[0], stats.win_rates(m[keep], index, ones)[0]
    rates = {e: (float(x), float(y)) for e, x, y in zip(index.editors, u, v, strict=True)}
    row["n_editors"] = len(index.editors)
    clusters = stats.query_clusters([q for q, k in zip(query_ids, keep, strict=True) if k])
    for i, kind in enumerate(CORRELATIONS):
        if len(index.editors) < 3:
            row.update({kind: float("nan"), f"{kind}_lo": float("nan"), f"{kind}_hi": float("nan")})
            continue
        _est(row, kind, stats.correlation_stat(kind, h[keep], m[keep], index), clusters, boot, i)
    return row, rates


def require_editors(pairs: Sequence[Pair], what: str) -> None:
    bad = [p for p in pairs if not (p.editor_a and p.editor_b)]
    if bad:
        raise MetaevalError(f"{what} needs the editor of both images of every pair (columns editor_a, editor_b); "
                            f"{len(bad)} pairs lack them (e.g. query {bad[0].query_id})")


def run_pairs_test(session: Session, pairs: Sequence[Pair], test: str, boot: Boot
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """2AFC agreement (`2afc`) or win-rate correlation (`winrate`) of every metric."""
    if test == "winrate":
        require_editors(pairs, "winrate")
    ps = score_pairs(session, pairs)
    human = np.array([p.human for p in pairs], dtype=np.float64)
    qids = [p.query_id for p in pairs]
    rows, rates = [], {}
    for name, hib in ps.metrics.items():
        if test == "2afc":
            rows.append(two_afc_row(name, hib, human, ps.a[name], ps.b[name], qids, boot))
        else:
            row, r = winrate_row(name, hib, human, ps.a[name], ps.b[name], [p.editor_a for p in pairs],
                                 [p.editor_b for p in pairs], qids, boot)
            rows.append(row)
            rates[name] = r
    extra: dict[str, Any] = {"metric_sigs": ps.sigs, "runs": ps.runs,
                             "counts": {"pairs": len(pairs), "human_ties": int((human == 0).sum())}}
    if rates:
        extra["win_rates"] = rates
    return rows, extra


# ------------------------------------------------------------------------------------------------- weight fitting
def fit_rows(x_a: np.ndarray, x_b: np.ndarray, pairs: Sequence[Pair], criteria: Sequence[str],
             base: Mapping[str, float], step: float, boot: Boot, profile_name: str
             ) -> tuple[list[dict[str, Any]], dict[str, float], float]:
    """Fit on the pairs with split == train, report on split == test: rows for the base and the fitted weights.

    x_a, x_b: the criteria of image a and b of each pair (n_pairs, k). Returns (rows, fitted weights, train r)."""
    from benchmark.commands.metaeval.fit import grid_search
    from benchmark.commands.metaeval.scoring import composite_scores

    train = np.array([p.split == "train" for p in pairs])
    test = np.array([p.split == "test" for p in pairs])
    human = np.array([p.human for p in pairs], dtype=np.float64)
    ea, eb = [p.editor_a for p in pairs], [p.editor_b for p in pairs]
    n = int(train.sum())
    x = np.concatenate([x_a[train], x_b[train]])
    ia, ib = np.arange(n), np.arange(n, 2 * n)
    index = stats.PairIndex.build([e for e, t in zip(ea, train, strict=True) if t],
                                  [e for e, t in zip(eb, train, strict=True) if t])
    fit = grid_search(x, ia, ib, index, human[train], criteria, step)
    rows = []
    qids = [p.query_id for p in pairs]
    for label, weights in (("base", dict(base)), (profile_name, fit.weights)):
        w = np.array([[weights[c] for c in criteria]])
        sa, sb = composite_scores(x_a, w)[:, 0], composite_scores(x_b, w)[:, 0]
        undefined = ~(np.isfinite(sa) & np.isfinite(sb))  # no weighted criterion defined: a tie, as in the fit
        sa, sb = np.where(undefined, 0.0, sa), np.where(undefined, 0.0, sb)
        tr_row, _ = winrate_row("", True, human[train], sa[train], sb[train], [e for e, t in zip(ea, train, strict=True) if t],
                                [e for e, t in zip(eb, train, strict=True) if t], [q for q, t in zip(qids, train, strict=True) if t],
                                Boot(0, boot.seed, boot.confidence))
        te_row, _ = winrate_row("", True, human[test], sa[test], sb[test], [e for e, t in zip(ea, test, strict=True) if t],
                                [e for e, t in zip(eb, test, strict=True) if t], [q for q, t in zip(qids, test, strict=True) if t],
                                boot)
        row: dict[str, Any] = {"metric": f"weights={label}", **{f"w_{c}": weights[c] for c in criteria},
                               "train_pearson": tr_row["pearson"], "n_train_pairs": tr_row["n_pairs"],
                               "n_test_pairs": te_row["n_pairs"], "n_editors": te_row["n_editors"]}
        for kind in CORRELATIONS:
            row.update({f"test_{kind}": te_row[kind], f"test_{kind}_lo": te_row[f"{kind}_lo"],
                        f"test_{kind}_hi": te_row[f"{kind}_hi"]})
        rows.append(row)
    return rows, fit.weights, fit.pearson


def run_fit(session: Session, pairs: Sequence[Pair], *, name: str, out_path: Path | None, base: str, step: float,
            boot: Boot, force: bool) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """Score both images of every pair with the one HATIE metric set, fit its Total weights on the training pairs,
    write the profile, and report base vs fitted on the held-out pairs."""
    import yaml

    from benchmark.io.provenance import PROJECT_ROOT, git_sha
    from benchmark.metrics.hatie.weights import CRITERIA, PROFILE_DIR, load_weight_profile
    from benchmark.plan.config import LabelError, check_label

    require_editors(pairs, "fit-weights")
    if len(session.metric_sets) != 1:
        raise MetaevalError(f"fit-weights fits one HATIE metric set; got --metrics {','.join(session.metric_sets)}")
    try:
        check_label(name, "--name")
    except LabelError as err:
        raise MetaevalError(str(err)) from None
    path = Path(out_path) if out_path is not None else PROJECT_ROOT / PROFILE_DIR / f"{name}.yaml"
    if path.exists() and not force:
        raise MetaevalError(f"{path} exists; choose another --name, or pass --force to replace it")
    base_profile = load_weight_profile(base)
    ps = score_pairs(session, pairs)
    m = session.metric_sets[0]
    cols = [f"{m}/{c}" for c in CRITERIA]
    if not all(c in ps.metrics for c in cols):
        raise MetaevalError(f"metrics={m} has no HATIE criteria ({', '.join(CRITERIA)}); fit-weights needs a HATIE "
                            "metric set (hatie, hatie_vqa)")
    x_a = np.column_stack([ps.a[c] for c in cols])
    x_b = np.column_stack([ps.b[c] for c in cols])
    scored = np.isfinite(x_a).any(axis=1) & np.isfinite(x_b).any(axis=1)  # a failed image has no criterion at all
    kept = [p for p, k in zip(pairs, scored, strict=True) if k]
    rows, weights, r_train = fit_rows(x_a[scored], x_b[scored], kept, CRITERIA, base_profile.total, step, boot, name)
    profile = {"name": name, "total": weights, "criteria_share": base_profile.criteria_share,
               "fit": {"method": f"grid search over convex weights, step {step}, maximising Pearson of per-editor "
                                 "win rates on the training pairs (docs/metaeval.md)",
                       "train_pearson": r_train, "test_pearson": rows[1]["test_pearson"],
                       "base": base_profile.name, "base_test_pearson": rows[0]["test_pearson"],
                       "n_train_pairs": rows[1]["n_train_pairs"], "n_test_pairs": rows[1]["n_test_pairs"],
                       "metric_set": m, "metric_sig": ps.sigs[m], "queryset": session.queryset()[0].name,
                       "profile": session.profile, "git_sha": git_sha()}}
    from benchmark.io.fileio import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# HATIE Total weight profile written by `editmeter metaeval fit-weights` (docs/metaeval.md)\n"
    atomic_write_text(path, header + yaml.safe_dump(profile, sort_keys=False))
    extra = {"metric_sigs": ps.sigs, "runs": ps.runs, "profile_path": str(path), "fitted": weights,
             "counts": {"pairs": len(pairs), "unscored_pairs": int((~scored).sum())},
             "options": {"name": name, "base": base, "step": step}}
    return rows, extra, path
