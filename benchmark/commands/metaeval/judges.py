"""`editmeter metaeval judges`: editmeter's judges measured against published human-preference sets, each by the
set's own agreement measure (docs/metaeval.md, "Judges measured against people").

Every set is read into groups of 2-4 edits of one (source image, instruction) with people's pairwise verdicts.
Each edit is scored on its own by a judge (`metrics=judge`'s probability readout, `metrics=gedit`'s official
protocol), then the scores are compared pair by pair. Statistics are functions of per-item weights, so the point
estimate and every resample of the project's cluster bootstrap (`benchmark.commands.metaeval.stats.bootstrap`, clusters =
groups sharing a source image and an instruction) run through the same code.

Sets and their real file formats:

- `editscore`: EditScore's EditReward-Bench (VectorSpaceLab; Hugging Face `EditScore/EditReward-Bench`), parquet
  rows key [2], instruction, input_image, output_images [better, worse], task_type (13 subtasks), dimension.
  Measure: strict pairwise accuracy (the better edit must score strictly higher), per subtask, then the unweighted
  mean over subtasks (the authors' `calculate_statistics.py`).
- `tiger`: TIGER-Lab's EditReward-Bench (TIGER-AI-Lab/EditReward), `EditReward_Bench_{2,3,4}pair.json`: items
  prompt, path_src, paths_generated, human_vote.ranking ("A>B", "A=B=Good", "C>A>B", ...). Measure: pairwise
  accuracy with ties (Deutsch et al. 2023 tie calibration, as `eval_bench.py` computes it over all pairs).
- `genai`: GenAI-Bench image_edition (TIGER-Lab; Hugging Face `TIGER-Lab/GenAI-Bench`, CC BY 4.0), parquet rows
  instruct_prompt, source_image, left_output_image, right_output_image, vote_type. Measure: pairwise accuracy with
  ties (tievote and bothbad_vote are both people's ties).
- `imagenhub`: ImagenHub's per-image ratings (`--ratings`, `--images`, the query set's sources and instructions).
  Measure: editmeter's 2AFC agreement (a judge tie counts half; people's ties are dropped).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.commands.metaeval.human import HumanDataError

SETS = ("editscore", "tiger", "genai", "imagenhub")
# the metric sets that score single edits (for messages): the probability readout, GEdit-Bench's protocol, and the
# learned judges
JUDGES = ("judge (probability readout)", "gedit (GEdit-Bench's protocol)", "editscore (EditScore)",
          "editreward (EditReward)")
EDITSCORE_DIMENSIONS = ("prompt_following", "consistency", "overall")
GENAI_VOTES = {"leftvote": 1, "rightvote": -1, "tievote": 0, "bothbad_vote": 0}
TIGER_FILES = {"2-Pair": "EditReward_Bench_2pair.json", "3-Pair": "EditReward_Bench_3pair.json",
               "4-Pair": "EditReward_Bench_4pair.json"}
MEASURES = {"editscore": "strict pairwise accuracy, macro over subtasks",
            "tiger": "pairwise accuracy with ties (tie-calibrated)",
            "genai": "pairwise accuracy with ties (tie-calibrated)",
            "imagenhub": "2AFC agreement (judge tie = 1/2, people's ties dropped)"}
# Published figures, each with the file it was read from; only figures whose source was checked are listed.
# They come from the authors' own prompting of each model, so they sit beside editmeter's judges, not under them.
EDITREWARD_README = "TIGER-AI-Lab/EditReward README.md @ edb027edde6080b8a9521ef8e87049b3797f8374"
GENAI_README = "TIGER-AI-Lab/GenAI-Bench README.md @ f0b0334d414074c6b1c97e2c60ad8d8a592bda9f"
STRICT = "strict ranking"  # the label of TIGER's group-level rows
STRICT_MEASURE = "strict ranking accuracy: share of groups ranked wholly as people ranked them"
_K = {"2-Pair": "K=2", "3-Pair": "K=3", "4-Pair": "K=4"}
# (model, figure, source, subtask row it sits beside)
PUBLISHED: dict[str, list[tuple[str, float, str, str]]] = {
    "genai": [("Qwen2.5-VL-7B-Inst", 0.4048, f"{EDITREWARD_README}, GenAI-Bench column", "all"),
              ("GPT-4o", 0.5354, f"{EDITREWARD_README}, GenAI-Bench column; {GENAI_README}, Image Editing", "all"),
              ("EditReward (on Qwen2.5-VL-7B)", 0.6397, f"{EDITREWARD_README}, GenAI-Bench column", "all")],
    "tiger": [(model, value, f"{EDITREWARD_README}, EditReward-Bench ({_K.get(sub, 'Overall')})",
               f"{'all' if sub == 'Overall' else sub} ({STRICT})")
              for model, figures in (("Qwen2.5-VL-7B-Inst", (0.5269, 0.2467, 0.0338, 0.2975)),
                                     ("GPT-4o", (0.4569, 0.2733, 0.0731, 0.2831)),
                                     ("EditReward (on Qwen2.5-VL-7B)", (0.5699, 0.3600, 0.1081, 0.3678)))
              for sub, value in zip(("2-Pair", "3-Pair", "4-Pair", "Overall"), figures, strict=True)],
}


class JudgeSetError(HumanDataError):
    """A human-preference set is unusable; the message names the file, the row and the fix."""


@dataclass(frozen=True)
class Group:
    """Edits of one (source, instruction) that people compared. Images are files or encoded bytes."""

    id: str
    subtask: str
    instruction: str
    source: Path | bytes
    edits: tuple[Path | bytes, ...]
    comparisons: tuple[tuple[int, int, int], ...]  # (i, j, people): +1 edit i preferred, -1 edit j, 0 tie
    # people's whole order of the edits, best first (TIGER's `get_gt_ranking`): () when the set gives none,
    # None for a two-edit tie ("A=B=Good" / "A=B=Bad")
    order: tuple[int, ...] | None = ()

    @property
    def cluster(self) -> str:
        """Groups sharing a source image and an instruction resample together."""
        return _digest(self.source) + "|" + self.instruction


@dataclass
class HumanSet:
    name: str
    groups: list[Group]
    inputs: list[Path]
    counts: dict[str, int] = field(default_factory=dict)


def _digest(ref: Path | bytes) -> str:
    return hashlib.sha256(ref if isinstance(ref, bytes) else str(Path(ref).resolve()).encode()).hexdigest()[:16]


def load_image(ref: Path | bytes) -> Any:
    """An RGB PIL image from a file or from encoded bytes, under `load_rgb`'s rules (pixel limit from the header,
    16-bit scaled, transparency refused); an unusable one raises `ImageInputError` (`score_set` makes it a failure
    row)."""
    from benchmark.io.imageio import ImageInputError, load_rgb

    if isinstance(ref, bytes):
        if not ref:
            raise ImageInputError("embedded image: no bytes")
        return load_rgb("embedded image", ref)
    return load_rgb(ref)


# ------------------------------------------------------------------------------------------------- importers
def _parquet_rows(path: Path, columns: Sequence[str]) -> tuple[list[dict[str, Any]], list[Path]]:
    import pyarrow.parquet as pq

    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise JudgeSetError(f"{path}: no parquet file here; point at the data set's parquet file or its folder")
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            table = pq.read_table(f)
        except Exception as err:  # pyarrow's errors have many types
            raise JudgeSetError(f"{f}: not a readable parquet file ({type(err).__name__}: {err})") from None
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise JudgeSetError(f"{f}: missing column(s) {', '.join(missing)}; it has {table.column_names}")
        rows += table.select(list(columns)).to_pylist()
    return rows, files


def _image_cell(cell: Any, where: str) -> bytes:
    """A Hugging Face `Image` cell ({bytes, path}) as encoded bytes (embedded: a path alone is never read)."""
    if isinstance(cell, dict) and isinstance(cell.get("bytes"), bytes) and cell["bytes"]:
        return cell["bytes"]
    raise JudgeSetError(f"{where}: not an embedded image ({{bytes, path}} with bytes); got "
                        f"{'null' if cell is None else type(cell).__name__}")


def _text(value: Any, where: str, field: str) -> str:
    from benchmark.querysets.release import release_text

    return release_text(value, where, field, JudgeSetError)


def read_editscore(path: Path, *, dimension: str = "overall") -> HumanSet:
    """EditScore's EditReward-Bench: one pair per row of `dimension`, the better edit first."""
    if dimension not in EDITSCORE_DIMENSIONS:
        raise JudgeSetError(f"--dimension {dimension!r}: use one of {', '.join(EDITSCORE_DIMENSIONS)}")
    cols = ("key", "instruction", "input_image", "output_images", "task_type", "dimension")
    rows, files = _parquet_rows(path, cols)
    groups = []
    for n, r in enumerate(rows):
        where = f"{path}: row {n}"
        if _text(r["dimension"], where, "dimension") != dimension:
            continue
        key = r["key"]
        if not isinstance(key, list | tuple) or len(key) != 2:
            raise JudgeSetError(f"{where}: key must be a list of 2 ids (the two edits'), got {str(key)[:60]}")
        key = [_text(k, where, f"key[{i}]") for i, k in enumerate(key)]
        where = f"{path}: row {n} (key {key})"
        outs = r["output_images"]
        if not isinstance(outs, list | tuple) or len(outs) != 2:
            got = f"{len(outs)} output images" if isinstance(outs, list | tuple) else \
                f"output_images is {'null' if outs is None else type(outs).__name__}"
            raise JudgeSetError(f"{where}: {got}; a pair has 2, the better first")
        groups.append(Group(f"{key[0]}|{key[1]}", _text(r["task_type"], where, "task_type"),
                            _text(r["instruction"], where, "instruction"), _image_cell(r["input_image"], where),
                            tuple(_image_cell(o, where) for o in outs), ((0, 1, 1),)))
    if not groups:
        raise JudgeSetError(f"{path}: no rows of dimension {dimension!r}")
    return HumanSet("editscore", groups, files, {"rows": len(rows), "pairs": len(groups)})


def tiger_verdict(ranking: str, i: int, j: int) -> int:
    """People's verdict on edits i, j from TIGER's `human_vote.ranking`, as the authors' `get_pairwise_gt`: "A>B"
    +1, "B>A" / "A<B" -1, "A=B=Good" / "A=B=Bad" 0; a longer order ("C>A>B") ranks by position."""
    if ranking == "A>B":
        return 1
    if ranking in ("B>A", "A<B"):
        return -1
    if ranking in ("A=B=Good", "A=B=Bad"):
        return 0
    pi, pj = ranking.find(chr(ord("A") + i)), ranking.find(chr(ord("A") + j))
    return 0 if pi < 0 or pj < 0 else (1 if pi < pj else -1)


def tiger_order(ranking: str) -> tuple[int, ...] | None:
    """People's order of the edits, best first, as TIGER's `get_gt_ranking` reads `human_vote.ranking`: "A>B"
    (0, 1), "B>A" / "A<B" (1, 0), "C>A>B" (2, 0, 1); a two-edit tie ("A=B=Good", "A=B=Bad") has none (None)."""
    if ranking in ("A=B=Good", "A=B=Bad"):
        return None
    if ranking in ("B>A", "A<B"):
        return (1, 0)
    return tuple(ord(c) - ord("A") for c in ranking.replace(">", ""))


RANKING = re.compile(r"^(A>B|B>A|A<B|A=B=Good|A=B=Bad|[A-D](>[A-D]){1,3})$")
TWO_EDIT_RANKINGS = ("A>B", "B>A", "A<B", "A=B=Good", "A=B=Bad")


def ranking_problem(ranking: Any, n_edits: int) -> str | None:
    """Why TIGER's `human_vote.ranking` cannot be read for a group of `n_edits` edits, or None: it must be text, the
    group 2-4 edits, and the ranking name exactly the group's edits, each once ("A>C" with 2 edits, "A>A" and
    "A>B>D" with 3 are refused; the tie and "B>A" / "A<B" forms only for 2 edits)."""
    if not isinstance(ranking, str):
        return f"ranking must be text, got {'null' if ranking is None else type(ranking).__name__}"
    if not 2 <= n_edits <= 4:
        return f"{n_edits} edits; a group has 2-4"
    letters = [chr(ord("A") + i) for i in range(n_edits)]
    if n_edits == 2 and ranking in TWO_EDIT_RANKINGS:
        return None
    if RANKING.match(ranking) and "=" not in ranking and "<" not in ranking and \
            sorted(ranking.split(">")) == letters:
        return None
    return f"ranking {ranking[:40]!r} does not order its {n_edits} edits (it must name each of {', '.join(letters)} " \
           "exactly once)"


def read_tiger(path: Path) -> HumanSet:
    """TIGER-Lab's EditReward-Bench: a folder with EditReward_Bench_{2,3,4}pair.json (or one of them); image
    paths relative to the file's folder, which they must stay inside (`release.release_file`)."""
    from benchmark.querysets.release import read_json, release_file

    path = Path(path)
    files = {k: path / f for k, f in TIGER_FILES.items() if (path / f).is_file()} if path.is_dir() else \
        {next((k for k, f in TIGER_FILES.items() if f == path.name), path.stem): path}
    if not files:
        raise JudgeSetError(f"{path}: none of {', '.join(TIGER_FILES.values())} here")
    groups, problems = [], []
    dirs: dict[str, str] = {}  # each image folder's real path, resolved once per read
    for subtask, f in files.items():
        items = read_json(f, JudgeSetError)
        if not isinstance(items, list):
            raise JudgeSetError(f"{f}: must hold a JSON list of items, got {type(items).__name__}")
        for n, it in enumerate(items):
            where = f"{f.name} item {n}"
            try:
                src, gens, ranking = it["path_src"], it["paths_generated"], it["human_vote"]["ranking"]
                prompt = it["prompt"]
            except (KeyError, TypeError, IndexError) as err:
                problems.append(f"{where}: missing {err}; want prompt, path_src, paths_generated, "
                                "human_vote.ranking")
                continue
            if not isinstance(gens, list):
                problems.append(f"{where}: paths_generated must be a list of paths, got {type(gens).__name__}")
                continue
            why = ranking_problem(ranking, len(gens))
            if why:
                problems.append(f"{where}: {why}")
                continue
            try:
                prompt = _text(prompt, where, "prompt")
                refs = [release_file(f.parent, p, where, field, JudgeSetError, dirs) for field, p in
                        [("path_src", src), *((f"paths_generated[{i}]", g) for i, g in enumerate(gens))]]
            except JudgeSetError as err:
                problems.append(str(err))
                continue
            comps = tuple((i, j, tiger_verdict(ranking, i, j)) for i, j in itertools.combinations(range(len(gens)), 2))
            groups.append(Group(f"{f.stem}:{n}", subtask, prompt, refs[0], tuple(refs[1:]), comps,
                                tiger_order(ranking)))
    if problems:
        shown = "\n  ".join(problems[:10])
        raise JudgeSetError(f"{path}: {len(problems)} problem(s):\n  {shown}\nFix the items (docs/metaeval.md).")
    if not groups:
        raise JudgeSetError(f"{path}: no items; the set is empty")
    return HumanSet("tiger", groups, list(files.values()),
                    {"groups": len(groups), "pairs": sum(len(g.comparisons) for g in groups)})


def read_genai(path: Path) -> HumanSet:
    """GenAI-Bench's image_edition votes: one pair per row, left = edit 0."""
    cols = ("instruct_prompt", "source_image", "left_output_image", "right_output_image", "vote_type")
    rows, files = _parquet_rows(path, cols)
    groups = []
    for n, r in enumerate(rows):
        where = f"{path}: row {n}"
        vote = r["vote_type"]
        if not isinstance(vote, str) or vote not in GENAI_VOTES:
            raise JudgeSetError(f"{where}: vote_type {vote!r}; want one of {', '.join(GENAI_VOTES)}")
        groups.append(Group(f"genai:{n}", "all", _text(r["instruct_prompt"], where, "instruct_prompt"),
                            _image_cell(r["source_image"], where),
                            (_image_cell(r["left_output_image"], where), _image_cell(r["right_output_image"], where)),
                            ((0, 1, GENAI_VOTES[vote]),)))
    if not groups:
        raise JudgeSetError(f"{path}: no rows; the set is empty")
    return HumanSet("genai", groups, files, {"votes": len(groups)})


def imagenhub_set(pairs: Sequence[Any], queries: dict[str, Any], root: Path, inputs: list[Path]) -> HumanSet:
    """ImagenHub's ratings as pairs (`human.ratings_to_pairs`), each with its query's source and instruction."""
    missing = sorted({p.query_id for p in pairs if p.query_id not in queries})
    if missing:
        raise JudgeSetError(f"--ratings: query id(s) {', '.join(missing[:5])} are not in the query set; choose the "
                            "set the ratings were made on (queryset=magicbrush) and --query-ids")
    groups = [Group(f"{p.query_id}:{p.editor_a}|{p.editor_b}", "all", queries[p.query_id].instruction,
                    root / queries[p.query_id].image, (p.image_a, p.image_b), ((0, 1, p.human),)) for p in pairs]
    return HumanSet("imagenhub", groups, inputs, {"pairs": len(groups)})


# ------------------------------------------------------------------------------------------------ statistics
def strict_correct(h: np.ndarray, d: np.ndarray) -> np.ndarray:
    """1 where the judge orders a pair strictly as people do (d = score_i - score_j; a judge tie is wrong)."""
    return (np.asarray(h) * np.asarray(d) > 0).astype(np.float64)


def tie_correct(h: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(n_pairs, n_thresholds) correctness under each tie threshold eps in {0} U {|d|}: the judge ties a pair when
    |d| <= eps; right when both tie or both prefer the same edit (Deutsch et al. 2023, TIGER's eval_bench.py)."""
    h, d = np.asarray(h, dtype=np.float64), np.asarray(d, dtype=np.float64)
    eps = np.unique(np.concatenate([[0.0], np.abs(d)]))
    tie = np.abs(d)[:, None] <= eps[None, :]
    return np.where(h[:, None] == 0, tie, ~tie & (h * d > 0)[:, None]).astype(np.float64)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def accuracy_with_ties(h: np.ndarray, d: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w): the best accuracy over tie thresholds, the threshold chosen anew in every resample."""
    c = tie_correct(h, d)
    return lambda w: np.nanmax(_ratio(w @ c, w.sum(axis=1)[:, None]), axis=1) if c.size else np.full(len(w), np.nan)


def accuracy_without_ties(h: np.ndarray, d: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w): C / (C + D) over the pairs people did not tie; a judge tie counts as discordant (TIGER's
    `calc_accuracy_without_ties`, used for its 3- and 4-edit groups)."""
    keep = (np.asarray(h) != 0).astype(np.float64)
    c = strict_correct(h, d) * keep
    return lambda w: _ratio(w @ c, w @ keep)


def macro_strict(h: np.ndarray, d: np.ndarray, subtasks: Sequence[str]) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w): strict pairwise accuracy per subtask, then the unweighted mean over subtasks (EditScore). A subtask
    a resample did not draw is left out of that resample's mean."""
    names = sorted(set(subtasks))
    onehot = np.array([[s == n for n in names] for s in subtasks], dtype=np.float64).reshape(len(subtasks), len(names))
    c = strict_correct(h, d)
    return lambda w: np.nanmean(_ratio((w * c) @ onehot, w @ onehot), axis=1)


def agreement_2afc(h: np.ndarray, d: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w): editmeter's 2AFC agreement (`stats.agreement`) over the pairs people did not tie."""
    from benchmark.commands.metaeval.stats import agreement

    h = np.asarray(h, dtype=np.float64)
    keep = (h != 0).astype(np.float64)
    a = np.where(keep > 0, agreement(h, np.sign(d)), 0.0)
    return lambda w: _ratio(w @ a, w @ keep)


def model_order(scores: Sequence[float]) -> tuple[int, ...]:
    """The judge's order of a group's edits, best first, as TIGER's `eval_bench.py` takes it
    (`np.argsort(scores)[::-1]`): equal scores rank the later edit first, on every machine (`kind="stable"`:
    numpy's default sort is not stable on AVX-512 CPUs, where the authors' figure can differ on ties; docs/metaeval.md)."""
    return tuple(int(i) for i in np.argsort(np.asarray(scores, dtype=np.float64), kind="stable")[::-1])


def strict_ranking(tie: np.ndarray, h: np.ndarray, d: np.ndarray, fixed: np.ndarray
                   ) -> Callable[[np.ndarray], np.ndarray]:
    """stat(w) over groups: the share of groups the judge ranks wholly as people do (TIGER's "strict ranking
    accuracy", its EditReward-Bench "Overall"). A group with an order is right when the judge's order (`model_order`)
    equals it (`fixed`); a two-edit tie is right when |d| <= eps, with eps the smallest threshold that maximises the
    accuracy with ties over the two-edit groups (`h`, `d`: their verdict and score difference; chosen anew in every
    resample, as `calc_accuracy_with_ties_for_edit_reward_bench` picks it for the 2-Pair file)."""
    tie, fixed = np.asarray(tie, dtype=bool), np.asarray(fixed, dtype=np.float64)
    h, d = np.asarray(h, dtype=np.float64), np.asarray(d, dtype=np.float64)
    two = ~np.isnan(h)  # the groups of two edits (they alone have one verdict and one difference)
    c = tie_correct(h[two], d[two])
    eps = np.unique(np.concatenate([[0.0], np.abs(d[two])]))

    def stat(w: np.ndarray) -> np.ndarray:
        if two.any():
            acc = _ratio(w[:, two] @ c, w[:, two].sum(axis=1)[:, None])
            best = eps[np.argmax(np.where(np.isnan(acc), -1.0, acc), axis=1)]  # first maximum: the smallest eps
        else:
            best = np.zeros(len(w))
        ok = np.where(tie[None, :], np.abs(np.nan_to_num(d))[None, :] <= best[:, None], fixed[None, :])
        return _ratio((w * ok).sum(axis=1), w.sum(axis=1))

    return stat


def set_statistics(name: str, h: np.ndarray, d: np.ndarray, subtasks: Sequence[str]
                   ) -> list[tuple[str, Callable[[np.ndarray], np.ndarray], np.ndarray]]:
    """[(row label, stat, item mask)]: the set's headline ("all") and its per-subtask rows, by the set's measure."""
    h, d, sub = np.asarray(h, dtype=np.float64), np.asarray(d, dtype=np.float64), np.asarray(subtasks, dtype=object)
    every = np.ones(len(h), dtype=bool)
    if name == "editscore":
        out = [("all (macro)", macro_strict(h, d, list(sub)), every)]
        return out + [(s, _masked(strict_correct, h, d, sub == s), sub == s) for s in sorted(set(sub))]
    if name in ("tiger", "genai"):
        out = [("all", accuracy_with_ties(h, d), every)]
        if name == "tiger":  # per file as the authors' script: 2 edits with ties, 3 and 4 edits without
            for s in sorted(set(sub)):
                m = sub == s
                fn = accuracy_with_ties if s == "2-Pair" else accuracy_without_ties
                out.append((s, fn(h[m], d[m]), m))
        return out
    return [("all", agreement_2afc(h, d), every)]


def _masked(correct: Callable[[np.ndarray, np.ndarray], np.ndarray], h: np.ndarray, d: np.ndarray,
            mask: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    c = correct(h[mask], d[mask])
    return lambda w: _ratio(w @ c, w.sum(axis=1))


# ------------------------------------------------------------------------------------------------- judging
@dataclass
class Judge:
    """A metric set whose suite scores single edits (`score_images`), and the column compared."""

    name: str
    suite: Any
    column: str
    signature: str
    # the column compared for each of EditScore's EditReward-Bench dimensions the judge scores (a suite's
    # `dimension_columns`; by default its overall column only)
    dimensions: dict[str, str] = field(default_factory=dict)
    # set -> (distinct edits read from the score cache, judged, unreadable cache lines)
    cache_stats: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def column_for(self, hset: HumanSet, dimension: str) -> str:
        """The column compared on `hset`: the `dimension`'s for EditScore's set, the judge's own column elsewhere."""
        if hset.name != "editscore":
            return self.column
        if dimension not in self.dimensions:
            from benchmark.commands.metaeval.scoring import MetaevalError

            raise MetaevalError(f"--dimension {dimension}: the judge {self.name} has no {dimension} score (it has "
                                f"{', '.join(sorted(self.dimensions))}); use --dimension overall, or a judge that "
                                "scores that dimension (editscore)")
        return self.dimensions[dimension]


def build_judge(name: str, overrides: Sequence[str]) -> Judge:
    """The suite of metric set `name`, composed with the run overrides (profile=, metrics.<suite>.<key>=)."""
    from hydra.utils import instantiate

    from benchmark.commands.metaeval.scoring import MetaevalError, metric_suite
    from benchmark.commands.run import compose
    from benchmark.plan.config import UnknownOptionError, check_option

    general = [o for o in overrides if metric_suite(o) is None]
    try:
        check_option("metrics", name)
        own = set(compose([*general, f"metrics={name}"])[0].metrics)  # `metrics.<suite>.<key>=`: this set's only
        cfg, _ = compose([*general, *(o for o in overrides if metric_suite(o) in own), f"metrics={name}"])
    except UnknownOptionError as err:
        raise MetaevalError(str(err)) from None
    suites = list(cfg.metrics)
    suite = instantiate(cfg.metrics[suites[0]]) if len(suites) == 1 else None
    if suite is None or not hasattr(suite, "score_images"):
        raise MetaevalError(f"--judges {name}: metrics={name} is not a judge that scores single edits; judges: "
                            f"{', '.join(JUDGES)}")
    dims = dict(getattr(suite, "dimension_columns", None) or {"overall": suite.judge_column})
    # the suite's version and its identity (model, revision, decoding, protocol): what the score cache is keyed by
    info = getattr(suite, "info", None)
    signature = f"{getattr(info, 'name', name)}@{getattr(info, 'version', '?')}|{getattr(suite, 'identity', name)}"
    return Judge(name, suite, suite.judge_column, signature, dims)


def _content_digest(ref: Path | bytes) -> str:
    return hashlib.sha256(ref if isinstance(ref, bytes) else Path(ref).read_bytes()).hexdigest()


class ScoreCache:
    """Each judged edit's row, kept on disk per judge signature (`<dir>/<sha256(signature)[:16]>.jsonl`), keyed by
    the request's content (instruction, source bytes, edit bytes): a rerun or a killed run's rerun scores only what
    is missing. Lines are appended after each chunk; a line cut short by a kill, one that is not a record of the
    expected shape, or one whose content no longer matches the digest written with it (scores edited by hand), is
    skipped and judged again (it is data to validate, never trusted)."""

    def __init__(self, folder: Path | None, signature: str) -> None:
        self.path = None if folder is None else \
            Path(folder) / f"{hashlib.sha256(signature.encode()).hexdigest()[:16]}.jsonl"
        self.signature = signature
        self.rows: dict[str, dict[str, Any]] = {}
        self.skipped = 0
        if self.path is not None and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                rec = self._valid(line)
                if rec is None:
                    self.skipped += 1
                else:
                    self.rows[rec["key"]] = rec

    def _valid(self, line: str) -> dict[str, Any] | None:
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        ok = (isinstance(rec, dict) and rec.get("signature") == self.signature and isinstance(rec.get("key"), str)
              and rec.get("status") in ("ok", "failed") and isinstance(rec.get("reason", ""), str)
              and isinstance(rec.get("scores"), dict)
              and all(isinstance(k, str) and (v is None or isinstance(v, int | float) and not isinstance(v, bool))
                      for k, v in rec["scores"].items())
              and rec.get("digest") == self.record_digest(rec))
        return rec if ok else None

    @staticmethod
    def record_digest(rec: dict[str, Any]) -> str:
        """sha256 of a record's content (everything but the digest itself), as written."""
        body = {k: v for k, v in rec.items() if k != "digest"}
        return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    @staticmethod
    def key(instruction: str, source_digest: str, edit_digest: str) -> str:
        """The record key of one request: the instruction and the two images' content digests."""
        return hashlib.sha256(json.dumps([instruction, source_digest, edit_digest]).encode()).hexdigest()

    def add(self, records: list[dict[str, Any]]) -> None:
        records = [{**rec, "digest": self.record_digest(rec)} for rec in records]
        for rec in records:
            self.rows[rec["key"]] = rec
        if self.path is not None and records:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def check_judge_inputs(judge: Judge) -> None:
    """The judge's own input files (a judged protocol's pinned prompts), read and checked before any judging."""
    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.io.pinned_prompts import ProtocolError

    check = getattr(judge.suite, "check_inputs", None)
    if check is None:
        return
    try:
        check()
    except ProtocolError as err:
        raise MetaevalError(f"--judges {judge.name}: {err}") from None


def score_set(judge: Judge, hset: HumanSet, chunk: int = 16, column: str | None = None, cache_dir: Path | None = None,
              progress: bool = False) -> tuple[dict[tuple[str, int], float], dict[str, str]]:
    """Score every edit of the set once: (group id, edit index) -> the judge's score in `column` (default: its
    own; NaN: a failure row), and the failure reasons by edit. With `cache_dir`, rows judged before (by a judge of
    the same signature, on the same instruction and image bytes) are read back instead of judged again. `progress`:
    a bar over the edits still to judge."""
    from tqdm import tqdm

    from benchmark.io.imageio import ImageInputError
    from benchmark.io.types import Query

    column = column or judge.column
    cache = ScoreCache(cache_dir, judge.signature)
    digest = functools.cache(_content_digest)  # a group's source is shared by its 2-4 edits: read and hash it once
    items = [(g, k, ScoreCache.key(g.instruction, digest(g.source), digest(g.edits[k]))) for g in hset.groups
             for k in range(len(g.edits))]
    todo = list({key: (g, k, key) for g, k, key in items if key not in cache.rows}.values())  # one per content
    bar = tqdm(total=len(todo), desc=f"{judge.name} on {hset.name}", unit="edit", disable=not progress, leave=False)
    transient: dict[str, dict[str, Any]] = {}
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        batch, unreadable = [], {}
        for g, k, key in part:
            try:
                images = load_image(g.source), load_image(g.edits[k])
            except ImageInputError as err:  # an unusable image is a failure row, as in runs
                unreadable[key] = {"status": "failed", "reason": f"unreadable image: {err}"}
                continue
            batch.append((Query(id=key, image="", edit_type="judged", instruction=g.instruction), *images))
        by_id = {r["query_id"]: r for r in judge.suite.score_images(batch)} if batch else {}
        by_id |= unreadable
        records = []
        for _, _, key in part:
            r = by_id[key]
            nums = {c: (None if not math.isfinite(float(v)) else float(v)) for c, v in r.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)}
            record = {"signature": judge.signature, "key": key, "status": "ok" if r.get("status") == "ok"
                      else "failed", "reason": str(r.get("reason", "")), "scores": nums}
            if r.get("judge_failure") in ("call_failed", "refused"):
                transient[key] = record  # a failed or refused judge call is asked again next time: not cached
            else:
                records.append(record)
        cache.add(records)
        bar.update(len(part))
    bar.close()
    scores: dict[tuple[str, int], float] = {}
    failed: dict[str, str] = {}
    for g, k, key in items:
        rec = cache.rows[key] if key in cache.rows else transient[key]
        value = rec["scores"].get(column) if rec["status"] == "ok" else None
        if rec["status"] == "ok" and value is None:
            raise RuntimeError(f"the judge {judge.name} gave no {column!r} for an ok row; it gives "
                               f"{', '.join(sorted(rec['scores']))}")
        scores[(g.id, k)] = math.nan if value is None else float(value)
        if rec["status"] != "ok":
            failed[f"{g.id}#{k}"] = rec["reason"]
    judge.cache_stats[hset.name] = (len({key for _, _, key in items}) - len(todo), len(todo), cache.skipped)
    return scores, failed


def evaluate(judge: Judge, hset: HumanSet, scores: dict[tuple[str, int], float], boot: Any
             ) -> list[dict[str, Any]]:
    """Rows of the table for one judge on one set: the headline and the per-subtask rows, each with its interval
    (TIGER's set adds its strict-ranking rows)."""
    from benchmark.commands.metaeval.stats import bootstrap, query_clusters

    h, d, sub, clus = [], [], [], []
    unscored: dict[str, int] = {}
    for g in hset.groups:
        for i, j, v in g.comparisons:
            diff = scores[(g.id, i)] - scores[(g.id, j)]
            if not math.isfinite(diff):
                unscored[g.subtask] = unscored.get(g.subtask, 0) + 1
                continue
            h.append(v)
            d.append(diff)
            sub.append(g.subtask)
            clus.append(g.cluster)
    clusters = query_clusters(clus)
    rows = []

    def row(label: str, measure: str, v: tuple[float, float, float], n: int, n_un: int) -> dict[str, Any]:
        return {"judge": judge.name, "set": hset.name, "subtask": label, "measure": measure, "value": v[0],
                "value_lo": v[1], "value_hi": v[2], "n_pairs": n, "n_unscored": n_un, "published": math.nan,
                "source": ""}

    for label, stat, mask in set_statistics(hset.name, np.array(h), np.array(d), sub):
        cl = query_clusters([c for c, m in zip(clus, mask, strict=True) if m]) if label not in ("all", "all (macro)") \
            else clusters
        v = bootstrap(stat, cl, n_resamples=boot.resamples, seed=boot.seed, confidence=boot.confidence)
        n_un = sum(unscored.values()) if label.startswith("all") else unscored.get(label, 0)
        rows.append(row(label, MEASURES[hset.name], v, int(np.sum(mask)), n_un))
    if hset.name == "tiger":
        rows += _strict_rows(hset, scores, boot, row)
    return rows


def _strict_rows(hset: HumanSet, scores: dict[tuple[str, int], float], boot: Any,
                 row: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    """TIGER's strict ranking accuracy over all groups and per file; a group with an unscored edit is left out and
    its pairs counted in n_unscored."""
    from benchmark.commands.metaeval.stats import bootstrap, query_clusters

    tie, h, d, fixed, sub, clus, pairs = [], [], [], [], [], [], []
    unscored: dict[str, int] = {}
    for g in hset.groups:
        s = [scores[(g.id, k)] for k in range(len(g.edits))]
        if not all(math.isfinite(x) for x in s):
            unscored[g.subtask] = unscored.get(g.subtask, 0) + len(g.comparisons)
            continue
        two = len(s) == 2
        tie.append(g.order is None)
        h.append(float(g.comparisons[0][2]) if two else math.nan)
        d.append(s[0] - s[1] if two else math.nan)
        fixed.append(g.order is not None and model_order(s) == g.order)
        sub.append(g.subtask)
        clus.append(g.cluster)
        pairs.append(len(g.comparisons))
    tie_a, h_a, d_a, fixed_a = np.array(tie, bool), np.array(h), np.array(d), np.array(fixed, bool)
    sub_a, pairs_a = np.array(sub, dtype=object), np.array(pairs, dtype=np.int64)
    out = []
    for label in ["all", *sorted(set(sub))]:
        m = np.ones(len(sub), dtype=bool) if label == "all" else sub_a == label
        stat = strict_ranking(tie_a[m], h_a[m], d_a[m], fixed_a[m])
        cl = query_clusters([c for c, keep in zip(clus, m, strict=True) if keep])
        v = bootstrap(stat, cl, n_resamples=boot.resamples, seed=boot.seed, confidence=boot.confidence)
        n_un = sum(unscored.values()) if label == "all" else unscored.get(label, 0)
        out.append(row(f"{label} ({STRICT})", STRICT_MEASURE, v, int(pairs_a[m].sum()), n_un))
    return out


def published_rows(name: str) -> list[dict[str, Any]]:
    """The published figures of set `name`, as table rows naming their source."""
    return [{"judge": f"published: {model}", "set": name, "subtask": subtask,
             "measure": STRICT_MEASURE if subtask.endswith(f"({STRICT})") else MEASURES[name],
             "value": math.nan, "value_lo": math.nan, "value_hi": math.nan, "n_pairs": 0, "n_unscored": 0,
             "published": value, "source": source} for model, value, source, subtask in PUBLISHED.get(name, [])]


def render(rows: list[dict[str, Any]]) -> str:
    """One readable table: judge x set x subtask, the value with its interval, the published figure beside it."""
    from benchmark.commands.metaeval.table import fmt

    header = ["judge", "set", "subtask", "agreement", "n_pairs", "n_unscored", "published", "source"]
    body = [[r["judge"], r["set"], r["subtask"], fmt(r["value"], r["value_lo"], r["value_hi"]), str(r["n_pairs"]),
             str(r["n_unscored"]), "" if not math.isfinite(r["published"]) else f"{r['published']:.4f}", r["source"]]
            for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
                     for cells in [header, *body])


# ------------------------------------------------------------------------------------------------- the arena judge
ARENA = "arena"  # --judges arena: GenArena's pairwise protocol (docs/arena.md), one battle per compared pair


def arena_scores(hset: HumanSet, backbone: Any, prompt: Any, folder: Path, *, drop_failed: bool = False,
                 chunk: int = 32) -> tuple[dict[tuple[str, int], float], dict[str, str], tuple[int, int]]:
    """The arena judge on a set of pairs: one battle per group (edit 0 shown first as A, then swapped), read as a
    score difference d = +1 (edit 0 wins), -1 (edit 1 wins) or 0 (a tie, an inconsistent battle or, by default, a
    battle with a failed call), so `evaluate` measures it as it measures the pointwise judges, on the same pairs.
    `drop_failed`: a battle with a failed call is unscored (NaN) instead. Refuses groups of more than two edits
    (TIGER's 3- and 4-edit groups: a battle compares two). Returns the scores, the failed battles, and the judge
    calls (made, reused)."""
    from benchmark.commands.metaeval.scoring import MetaevalError
    from benchmark.metrics.arena.protocol import MODEL_A, MODEL_B
    from benchmark.stages.arena import judge_battles

    big = [g.id for g in hset.groups if len(g.edits) != 2]
    if big:
        raise MetaevalError(f"--judges {ARENA} on {hset.name}: {len(big)} group(s) of other than two edits (e.g. "
                            f"{big[0]}); the arena judges pairs: use it on genai, editscore or imagenhub")
    items = [(g.instruction, load_image(g.source), load_image(g.edits[0]), load_image(g.edits[1]))
             for g in hset.groups]
    verdicts, made, reused = judge_battles(items, backbone, prompt, folder, chunk=chunk)
    scores: dict[tuple[str, int], float] = {}
    failed: dict[str, str] = {}
    for g, v in zip(hset.groups, verdicts, strict=True):
        value = 1.0 if v.outcome == MODEL_A else -1.0 if v.outcome == MODEL_B else 0.0
        if v.failed_calls:
            failed[g.id] = f"{v.failed_calls} judge call(s) failed or did not parse"
            if drop_failed:
                value = math.nan
        scores[(g.id, 0)], scores[(g.id, 1)] = value, 0.0
    return scores, failed, (made, reused)
