"""Every checkpoint a run will touch, resolved from the composed config without loading a model; list or fetch them.

    python -m benchmark.plan.weights editor=ip2p metrics=hatie              # download what is missing (idempotent)
    python -m benchmark.plan.weights --list editor=ip2p metrics=hatie       # id, revision, size, cache path, present?
    python -m benchmark.plan.weights --markdown editor=ip2p metrics=hatie   # the same as a Markdown table (docs)

(`editmeter weights ...` calls the same `main`.) Each checkpoint is downloaded with the call its loader uses, into
the cache that loader reads: Hugging Face repos through `huggingface_hub` / `diffusers` into the HF cache
($HF_HUB_CACHE), URL weights through `torch.hub` into $TORCH_HOME/hub/checkpoints. The tiny profile needs nothing
(its random-weight models are built locally under $EDITMETER_CACHE/tiny on first use).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.plan.run_plan import RunPlan

HF_KINDS = ("hf-pipeline", "hf-model", "hf-file")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# transformers' from_pretrained reads configs, processor/tokenizer files and one weights format (safetensors first)
_HF_MODEL_PATTERNS = ("*.json", "*.txt", "*.model", "*.safetensors")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".ckpt")


@dataclass(frozen=True)
class Checkpoint:
    """One downloadable checkpoint: what needs it, where it comes from, and where its loader looks for it."""

    component: str             # where in the config, e.g. "editor ip2p", "metrics hatie.clip"
    kind: str                  # hf-pipeline (diffusers) | hf-model (transformers) | hf-file (one hub file) | url | unknown
    source: str                # hub repo id or URL
    revision: str | None = None  # pinned commit; None: the loader takes the hub's current `main` (open_clip)
    files: tuple[str, ...] = ()  # hf-file: candidate file names, preferred first
    size: int | None = None    # expected bytes where known offline (torchvision's metadata)
    note: str = ""

    @property
    def fetchable(self) -> bool:
        return self.kind in HF_KINDS or self.kind == "url"

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.kind, self.source, self.revision

    def cache_path(self) -> Path:
        """The folder (hub repos) or file (URL weights) the loader reads."""
        if self.kind in HF_KINDS:
            return hf_cache_dir() / f"models--{self.source.replace('/', '--')}"
        if self.kind == "url":
            return torch_hub_dir() / "checkpoints" / Path(self.source).name
        return Path("?")

    def location(self) -> Path | None:
        """The cached snapshot folder / file when complete, else None. Reads the file system only."""
        if self.kind == "url":
            path = self.cache_path()
            return path if path.is_file() else None
        if self.kind not in HF_KINDS:
            return None
        snap = _snapshot(self.cache_path(), self.revision)
        if snap is None:
            return None
        if self.kind == "hf-file":
            hits = [snap / f for f in self.files if (snap / f).is_file()]
            return hits[0] if hits else None
        if self.kind == "hf-model":  # a model (config.json) or a peft adapter (adapter_config.json)
            configured = (snap / "config.json").is_file() or (snap / "adapter_config.json").is_file()
            return snap if configured and _has_weights(snap) else None
        return snap if _pipeline_complete(snap) else None

    def present_size(self) -> int | None:
        loc = self.location()
        if loc is None:
            return None
        if loc.is_file():
            return loc.stat().st_size
        return sum(p.stat().st_size for p in loc.rglob("*") if p.is_file())


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache every hub loader reads ($HF_HUB_CACHE, else $HF_HOME/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def torch_hub_dir() -> Path:
    import torch

    return Path(torch.hub.get_dir())


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


PROBE_TIMEOUT_S = 5.0  # one HEAD request per host before any download: no answer in this time means unreachable


def hub_endpoint() -> str:
    """The hub URL huggingface_hub downloads from ($HF_ENDPOINT as read at its import, else huggingface.co)."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def host_of(ck: Checkpoint) -> str:
    """`scheme://host/` that serves `ck`: the hub endpoint for hub repos, the URL's server for URL weights."""
    from urllib.parse import urlsplit

    parts = urlsplit(hub_endpoint() if ck.kind in HF_KINDS else ck.source)
    return f"{parts.scheme}://{parts.netloc}/"


def unreachable_hosts(checkpoints: list[Checkpoint], timeout: float = PROBE_TIMEOUT_S) -> dict[str, str]:
    """host -> why, for each host of `checkpoints` that does not answer one HEAD request within `timeout` (any HTTP
    status is an answer). Probed once each, so an unreachable hub costs seconds, not huggingface_hub's retries."""
    import urllib.error
    import urllib.request

    bad: dict[str, str] = {}
    for host in dict.fromkeys(host_of(c) for c in checkpoints):
        try:
            with urllib.request.urlopen(urllib.request.Request(host, method="HEAD"), timeout=timeout):
                pass
        except urllib.error.HTTPError:
            pass  # the server answered
        except (OSError, ValueError) as err:
            bad[host] = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
    return bad


def _snapshot(repo_dir: Path, revision: str | None) -> Path | None:
    rev = revision or "main"
    if not _COMMIT.fullmatch(rev):
        ref = repo_dir / "refs" / rev
        if not ref.is_file():
            return None
        rev = ref.read_text().strip()
    snap = repo_dir / "snapshots" / rev
    return snap if snap.is_dir() else None


def _has_weights(folder: Path) -> bool:
    return any(p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES) for p in folder.iterdir())


def _pipeline_complete(snap: Path) -> bool:
    """model_index.json and every component folder the loader reads (the safety checker is not loaded); a model
    folder (one with config.json) must hold a weights file."""
    import json

    index = snap / "model_index.json"
    if not index.is_file():
        return False
    for name, spec in json.loads(index.read_text()).items():
        if name.startswith("_") or name == "safety_checker" or not isinstance(spec, list) or None in spec:
            continue
        folder = snap / name
        if not folder.is_dir() or not any(p.is_file() for p in folder.iterdir()):
            return False
        if (folder / "config.json").is_file() and not _has_weights(folder):
            return False
    return True


# ---------------------------------------------------------------------------------------------------- resolution

def _clip(node: dict[str, Any]) -> list[Checkpoint]:
    import open_clip
    from open_clip import pretrained as ocp

    arch, tag = node.get("arch", "ViT-B-32"), node.get("tag", "openai")
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    if not cfg:
        return [Checkpoint("", "unknown", f"open_clip {arch}/{tag}", note="open_clip has no such pretrained tag")]
    if cfg.get("hf_hub") and ocp.has_hf_hub():  # open_clip prefers the hub copy when huggingface_hub is installed
        repo, filename = os.path.split(cfg["hf_hub"])
        filename = filename or ocp.HF_WEIGHTS_NAME
        safe = [f for f in ocp._get_safe_alternatives(filename)] if hasattr(ocp, "_get_safe_alternatives") else []
        return [Checkpoint("", "hf-file", repo, None, tuple(safe) + (filename,),
                           note=f"open_clip {arch}/{tag}; open_clip loads the hub's main (no pin)")]
    return [Checkpoint("", "url", cfg["url"], note=f"open_clip {arch}/{tag} (open_clip caches it in ~/.cache/clip)")]


def _hf_model(default_id: str, default_rev: str) -> Callable[[dict[str, Any]], list[Checkpoint]]:
    def resolve(node: dict[str, Any]) -> list[Checkpoint]:
        return [Checkpoint("", "hf-model", node.get("model_id", default_id), node.get("revision", default_rev))]

    return resolve


def _dino(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.dino import DINO_ID, DINO_REVISION

    return _hf_model(DINO_ID, DINO_REVISION)(node)


def _dino_v1(node: dict[str, Any]) -> list[Checkpoint]:
    """The revision the loader will use: the config's, else the pinned one; none pinned raises
    UnpinnedRevisionError here, before any edit, as the loader would at score time."""
    from benchmark.models.dino_v1 import pinned_revision

    model_id = node.get("model_id", "facebook/dino-vitb16")
    return [Checkpoint("", "hf-model", model_id, pinned_revision(model_id, node.get("revision")))]


def _owlvit(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.owlvit import OWLVIT_ID, OWLVIT_REVISION

    return _hf_model(OWLVIT_ID, OWLVIT_REVISION)(node)


def _vqa(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.vqa import VQA_ID, VQA_REVISION

    return _hf_model(VQA_ID, VQA_REVISION)(node)


def _augclip_llm(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.llm import LLM_ID, LLM_REVISION

    return _hf_model(LLM_ID, LLM_REVISION)(node)


def _judge_vlm(node: dict[str, Any]) -> list[Checkpoint]:
    """The judge VLM at the config's revision, else its pinned commit (an unknown model without one raises here,
    as the loader would at score time)."""
    from benchmark.models.vlm import VLM_ID, pinned_revision

    model_id = node.get("model_id", VLM_ID)
    return [Checkpoint("", "hf-model", model_id, pinned_revision(model_id, node.get("revision")),
                       note="Qwen2.5-VL judge (model + processor)")]


def _text_judge(node: dict[str, Any]) -> list[Checkpoint]:
    """metrics=gedit's judge (`TextJudge`): its model at the config's revision, else the pinned commit."""
    from benchmark.models.vlm import GEDIT_VLM_ID, pinned_revision

    model_id = node.get("model_id", GEDIT_VLM_ID)
    return [Checkpoint("", "hf-model", model_id, pinned_revision(model_id, node.get("revision")),
                       note="Qwen2.5-VL judge (model + processor), free-text replies")]


def _editscore_judge(node: dict[str, Any]) -> list[Checkpoint]:
    """metrics=editscore's judge (`EditScoreJudge`): the base model and the LoRA adapter, each at the config's
    revision, else its pinned commit."""
    from benchmark.models.editscore import ADAPTER_ID, adapter_revision
    from benchmark.models.vlm import VLM_ID, pinned_revision

    base_id, adapter_id = node.get("base_id", VLM_ID), node.get("adapter_id", ADAPTER_ID)
    return [Checkpoint("", "hf-model", base_id, pinned_revision(base_id, node.get("base_revision")),
                       note="Qwen2.5-VL base of the EditScore judge (model + processor)"),
            Checkpoint("", "hf-model", adapter_id, adapter_revision(adapter_id, node.get("adapter_revision")),
                       note="EditScore LoRA adapter (peft), merged into the base at load")]


def _editreward(node: dict[str, Any]) -> list[Checkpoint]:
    """metrics=editreward's scorer: its base Qwen2.5-VL (model + processor) and the authors' full state dict."""
    from benchmark.models.editreward import BASE_ID, CHECKPOINT_FILES, CHECKPOINT_ID, CHECKPOINT_REVISION
    from benchmark.models.vlm import pinned_revision

    base = node.get("base_id", BASE_ID)
    # hf-file downloads its last candidate and accepts any present one: the loader reads model.safetensors first
    return [Checkpoint("", "hf-model", base, pinned_revision(base, node.get("base_revision")),
                       note="EditReward's base (model + processor)"),
            Checkpoint("", "hf-file", node.get("checkpoint_id", CHECKPOINT_ID),
                       node.get("checkpoint_revision", CHECKPOINT_REVISION), tuple(reversed(CHECKPOINT_FILES)),
                       note="EditReward's full state dict (base weights and reward heads)")]


def _grounding_detector(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.grounding import DETECTORS

    default_id, default_rev = DETECTORS.get(node.get("kind", "grounding-dino"), DETECTORS["grounding-dino"])
    return [Checkpoint("", "hf-model", node.get("model_id") or default_id, node.get("revision") or default_rev)]


def _sam(node: dict[str, Any]) -> list[Checkpoint]:
    from benchmark.models.grounding import SAM_ID, SAM_REVISION

    return _hf_model(SAM_ID, SAM_REVISION)(node)


def _torchvision(weights: Any, note: str) -> Checkpoint:
    mib = weights.meta.get("_file_size")
    return Checkpoint("", "url", weights.url, size=int(mib * 2**20) if mib else None, note=note)


def _lpips(node: dict[str, Any]) -> list[Checkpoint]:
    from torchvision import models as tvm

    net = node.get("net", "alex")
    weights = {"alex": tvm.AlexNet_Weights, "vgg": tvm.VGG16_Weights, "squeeze": tvm.SqueezeNet1_1_Weights}[net]
    # lpips' linear heads ship inside its wheel; only the torchvision trunk is downloaded
    return [_torchvision(weights.IMAGENET1K_V1, f"LPIPS {net} trunk (torchvision ImageNet weights)")]


def _fid(node: dict[str, Any]) -> list[Checkpoint]:
    from pytorch_fid.inception import FID_WEIGHTS_URL

    return [Checkpoint("", "url", FID_WEIGHTS_URL, note="pytorch-fid Inception-v3 (FID weights)")]


def _segmenter(node: dict[str, Any]) -> list[Checkpoint]:
    from torchvision.models.detection import MaskRCNN_ResNet50_FPN_V2_Weights

    from benchmark.models.segmenter import D2_CONFIG, detectron2_available

    backend = node.get("backend", "auto")
    if backend == "detectron2" or (backend == "auto" and detectron2_available()):
        from detectron2 import model_zoo  # pragma: no cover - needs detectron2

        return [Checkpoint("", "url-detectron2", model_zoo.get_checkpoint_url(D2_CONFIG),  # pragma: no cover
                           note="detectron2 downloads it into its own iopath cache on first use")]
    return [_torchvision(MaskRCNN_ResNet50_FPN_V2_Weights.COCO_V1, "Mask R-CNN R50-FPN v2, COCO")]


# `_target_` of a metric model factory -> its checkpoints (read from the same keys the factory takes)
RESOLVERS: dict[str, Callable[[dict[str, Any]], list[Checkpoint]]] = {
    "benchmark.models.clip.load_clip": _clip,
    "benchmark.models.dino.load_dino": _dino,
    "benchmark.models.dino_v1.load_dino_v1": _dino_v1,
    "benchmark.models.vqa.load_vqa": _vqa,
    "benchmark.models.owlvit.load_owlvit": _owlvit,
    "benchmark.models.perceptual.load_lpips": _lpips,
    "benchmark.models.inception.load_fid_extractor": _fid,
    "benchmark.models.segmenter.build_segmenter": _segmenter,
    "benchmark.models.segmenter.load_torchvision_segmenter": _segmenter,
    "benchmark.metrics.augclip.llm.load_llm_extractor": _augclip_llm,
    "benchmark.models.instructions.LLMInstructionParser": _augclip_llm,
    "benchmark.models.grounding.load_detector": _grounding_detector,
    "benchmark.models.grounding.load_sam": _sam,
    "benchmark.models.vlm.load_score_reader": _judge_vlm,
    "benchmark.models.vlm.TextJudge": _text_judge,
    "benchmark.models.editscore.EditScoreJudge": _editscore_judge,
    "benchmark.models.editreward.EditRewardScorer": _editreward,
}


def _walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        if "_target_" in node:
            yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def resolve(plan: RunPlan, editor_name: str = "") -> list[Checkpoint]:
    """The checkpoints of the editor and of every metric model that the plan loads with pretrained weights,
    deduplicated, without loading anything."""
    from dataclasses import replace

    found: list[Checkpoint] = []
    editor = plan.editor.config
    label = f"editor {editor_name}".strip()
    if isinstance(editor, dict) and editor.get("weights") == "pretrained":
        if editor.get("checkpoint") == "single_file" and isinstance(editor.get("single_file"), dict):
            # the original checkpoint file (benchmark.models.diffusion.load_pipeline); from_single_file reads only
            # the component configs of `config`, fetched on first load
            sf = editor["single_file"]
            found.append(Checkpoint(label, "hf-file", sf["repo_id"], sf.get("revision"), (sf["filename"],),
                                    note=f"original checkpoint (from_single_file; configs of {sf.get('config')})"))
        elif "model_id" in editor:  # every hub editor today is a diffusers pipeline (benchmark.editing.base)
            found.append(Checkpoint(label, "hf-pipeline", editor["model_id"], editor.get("revision"),
                                    note="diffusers pipeline (safety checker not loaded)"))
        else:
            found.append(Checkpoint(label, "unknown", str(editor.get("_target_")),
                                    note="editor wants pretrained weights but names no model_id"))
    for path, node in _walk(plan.metrics, ""):
        if node.get("weights") != "pretrained":
            continue
        target = str(node["_target_"])
        if target not in RESOLVERS:
            found.append(Checkpoint(f"metrics {path}", "unknown", target,
                                    note="no resolver in benchmark.plan.weights.RESOLVERS: it loads on first use"))
            continue
        found += [replace(c, component=f"metrics {path}") for c in RESOLVERS[target](node)]
    unique: dict[tuple[str, str, str | None], Checkpoint] = {}
    for c in found:
        unique.setdefault(c.key, c)
    return list(unique.values())


# ----------------------------------------------------------------------------------------------- remote sizes

def _hf_listing(ck: Checkpoint) -> dict[str, int]:
    """{file: bytes} of the repo at the revision (network)."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(ck.source, revision=ck.revision, files_metadata=True)
    return {s.rfilename: int(s.size or 0) for s in info.siblings or []}


def _model_patterns(files: dict[str, int] | None) -> list[str]:
    """What transformers' from_pretrained reads: configs, processor files and safetensors, or .bin without them."""
    patterns = list(_HF_MODEL_PATTERNS)
    if files is not None and not any(f.endswith(".safetensors") for f in files):
        patterns.append("*.bin")
    return patterns


def remote_size(ck: Checkpoint) -> int | None:
    """Bytes the download would take, asked from the hub / server; None when unknown or offline."""
    if ck.size is not None or hub_offline():
        return ck.size
    from fnmatch import fnmatch

    try:
        if ck.kind == "url":
            import urllib.request

            with urllib.request.urlopen(urllib.request.Request(ck.source, method="HEAD"), timeout=10) as resp:
                n = resp.headers.get("Content-Length")
                return int(n) if n else None
        files = _hf_listing(ck)
        if ck.kind == "hf-file":
            return next((files[f] for f in ck.files if f in files), None)
        if ck.kind == "hf-model":
            pats = _model_patterns(files)
            return sum(n for f, n in files.items() if any(fnmatch(f, p) for p in pats))
        return sum(files[f] for f in _pipeline_files(files))
    except Exception:  # noqa: BLE001 - a size is a courtesy; no network means unknown
        return None


def _pipeline_files(files: dict[str, int]) -> list[str]:
    """Approximately what diffusers downloads: model_index.json and the component folders' non-variant files,
    safetensors instead of .bin where both exist; not the safety checker (the loader passes None)."""
    picked = []
    for f in files:
        folder, _, name = f.rpartition("/")
        if f == "model_index.json":
            picked.append(f)
        elif not folder or "/" in folder or folder == "safety_checker" or re.search(r"\.(fp16|non_ema|ema)\.", name):
            continue
        elif name.endswith((".ckpt", ".msgpack", ".h5", ".onnx", ".pb")):
            continue
        elif name.endswith(".bin") and any(g.startswith(folder + "/") and g.endswith(".safetensors") for g in files):
            continue
        else:
            picked.append(f)
    return picked


# --------------------------------------------------------------------------------------------------- fetching

def fetch(ck: Checkpoint, *, progress: bool = True) -> Path:
    """Download one checkpoint with its loader's own download call into the loader's cache; returns its path."""
    cache = hf_cache_dir()
    if ck.kind == "url":
        import torch

        dst = ck.cache_path()
        dst.parent.mkdir(parents=True, exist_ok=True)
        m = torch.hub.HASH_REGEX.search(dst.name)  # torchvision checks the sha256 prefix in the file name
        torch.hub.download_url_to_file(ck.source, str(dst), m.group(1) if m else None, progress=progress)
        return dst
    if ck.kind == "hf-model":
        from huggingface_hub import snapshot_download

        try:
            files: dict[str, int] | None = _hf_listing(ck)
        except Exception:  # noqa: BLE001 - snapshot_download below reports the real error
            files = None
        return Path(snapshot_download(ck.source, revision=ck.revision, allow_patterns=_model_patterns(files),
                                      cache_dir=cache))
    if ck.kind == "hf-pipeline":
        import diffusers

        # the loader passes safety_checker=None, so diffusers skips that folder here too
        return Path(diffusers.DiffusionPipeline.download(ck.source, revision=ck.revision, cache_dir=cache,
                                                         safety_checker=None))
    if ck.kind == "hf-file":
        from open_clip.pretrained import download_pretrained_from_hf

        return Path(download_pretrained_from_hf(ck.source, filename=ck.files[-1], revision=ck.revision,
                                                cache_dir=str(cache)))
    raise ValueError(f"{ck.component}: cannot download {ck.source!r} ({ck.kind}): {ck.note}")


# -------------------------------------------------------------------------------------------------------- CLI

def human(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def fix_command(editor: str, metrics: str, profile: str = "pretrained") -> str:
    """The command that downloads a run's weights (shown by preflight and by this tool)."""
    return f"editmeter weights editor={editor} metrics={metrics}" + (f" profile={profile}" if profile != "pretrained"
                                                                    else "")


def revision_label(c: Checkpoint) -> str:
    """A hub commit, a URL's sha256 prefix (torch.hub checks it), or a note that the loader takes the latest."""
    if c.revision:
        return c.revision
    if c.kind == "url":
        m = re.search(r"-([a-f0-9]{6,})\.", Path(c.source).name)
        return f"sha256 {m.group(1)}..." if m else "fixed URL"
    return "main (unpinned)"


def table_rows(checkpoints: list[Checkpoint], *, online_sizes: bool = False) -> list[dict[str, str]]:
    rows = []
    for c in checkpoints:
        have = c.present_size()
        size = have if have is not None else (remote_size(c) if online_sizes else c.size)
        rows.append({"component": c.component, "id": c.source, "revision": revision_label(c),
                     "size": human(size), "status": ("present" if have is not None else "missing") if c.fetchable
                     else "unknown",
                     "cache": str(c.cache_path()), "note": c.note})
    return rows


def markdown(checkpoints: list[Checkpoint]) -> str:
    lines = ["| component | id | revision | size | cache location |", "|---|---|---|---|---|"]
    for r in table_rows(checkpoints, online_sizes=not hub_offline()):
        rev = r["revision"] if len(r["revision"]) < 20 else f"`{r['revision'][:12]}`"
        lines.append(f"| {r['component']} | `{r['id']}` | {rev} | {r['size']} | {_portable(r['cache'])} |")
    return "\n".join(lines)


def _portable(path: str) -> str:
    """Cache paths with the user's home as `~` (the docs table must not show this machine's paths)."""
    home = str(Path.home())
    return "`" + (("~" + path[len(home):]) if path.startswith(home) else path) + "`"


USAGE = """usage: editmeter weights [--list | --markdown] [editor=NAME] [metrics=NAME] [profile=pretrained|tiny|random] ...

Download (default), list, or tabulate every checkpoint a run with these overrides will load: the editor's weights
and every metric model's. Downloads are idempotent: a second call fetches nothing.
  --list       what would be fetched: component, id, revision, size, cache path, present/missing
  --markdown   the same as a Markdown table
Example: editmeter weights editor=ip2p metrics=hatie"""


def main(argv: list[str] | None = None) -> int:
    """`editmeter weights`: returns the exit status (0 ok, 1 a download failed or is impossible, 2 usage)."""
    from benchmark.plan.config import UnknownOptionError, compose, read_plan

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    flags = {a for a in argv if a.startswith("-")}
    unknown = flags - {"--list", "--markdown"}
    if unknown:
        print(f"error: unknown option(s) {sorted(unknown)}\n{USAGE}", file=sys.stderr)
        return 2
    overrides = [a for a in argv if not a.startswith("-")]
    try:
        cfg, choices = compose(overrides)
    except UnknownOptionError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    editor, metrics = choices.get("editor", "?"), choices.get("metrics", "?")
    plan = read_plan(cfg, editor)
    profile = plan.profile
    try:
        checkpoints = resolve(plan, editor)
    except ValueError as err:  # a component that cannot be pinned (benchmark.models.dino_v1.UnpinnedRevisionError)
        print(f"error: {err}", file=sys.stderr)
        return 2
    where = f"editor={editor} metrics={metrics} profile={profile}"
    if not checkpoints:
        why = ("random weights are built locally under $EDITMETER_CACHE/tiny on first use" if profile != "pretrained"
               else "no component of this run loads pretrained weights")
        print(f"{where}: nothing to download ({why}).")
        return 0
    if "--markdown" in flags:
        print(markdown(checkpoints))
        return 0
    if "--list" in flags:
        missing = [c for c in checkpoints if c.fetchable and c.location() is None]
        # sizes are asked from the hosts only when they answer (an unreachable hub would retry for a minute)
        online = not hub_offline() and not (missing and unreachable_hosts(missing))
        for r in table_rows(checkpoints, online_sizes=online):
            print(f"{r['status']:<8} {r['component']}: {r['id']} @ {r['revision']}  [{r['size']}]\n"
                  f"         -> {r['cache']}" + (f"  ({r['note']})" if r["note"] else ""))
        n_missing = sum(c.fetchable and c.location() is None for c in checkpoints)
        print(f"{len(checkpoints)} checkpoints, {n_missing} missing"
              + (f"; download them with: {fix_command(editor, metrics, profile)}" if n_missing else ""))
        return 0
    return _fetch_missing(checkpoints, where, fix_command(editor, metrics, profile))


def _fetch_missing(checkpoints: list[Checkpoint], where: str, fix: str = "editmeter weights ...") -> int:
    for c in checkpoints:
        if not c.fetchable:
            print(f"note: {c.component}: {c.source} cannot be checked or fetched here ({c.note})")
    checkpoints = [c for c in checkpoints if c.fetchable]
    missing = [c for c in checkpoints if c.location() is None]
    if not missing:
        print(f"{where}: all {len(checkpoints)} checkpoints are present; nothing to download.")
        return 0
    if hub_offline():
        _cannot_download(missing, "HF_HUB_OFFLINE is set, so nothing can be downloaded", {},
                         f"Fix: run again with network access and HF_HUB_OFFLINE=0: HF_HUB_OFFLINE=0 {fix}")
        return 1
    bad = unreachable_hosts(missing)
    if bad:
        _cannot_download(missing, "their host does not answer (probed once, nothing downloaded)", bad,
                         f"Fix: restore network access (or set HTTPS_PROXY, or HF_ENDPOINT to a reachable hub "
                         f"mirror), then rerun: {fix}\n  or: profile=tiny (PROFILE=tiny) for an offline run on "
                         "random weights of the same architectures")
        return 1
    failed = 0
    progress = sys.stderr.isatty()
    for c in missing:
        print(f"downloading {c.component}: {c.source}" + (f" @ {c.revision}" if c.revision else "") + " ...", flush=True)
        t0 = time.perf_counter()
        try:
            fetch(c, progress=progress)
        except Exception as err:  # noqa: BLE001 - report every failed download, then exit non-zero
            failed += 1
            print(f"error: {c.component}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        if c.location() is None:  # the download returned but the loader would still not find it
            failed += 1
            print(f"error: {c.component}: downloaded, but {c.cache_path()} is still incomplete", file=sys.stderr)
            continue
        print(f"  done: {human(c.present_size())} in {time.perf_counter() - t0:.1f} s -> {c.location()}")
    n_ok = len(checkpoints) - failed
    print(f"{where}: {n_ok} of {len(checkpoints)} checkpoints present ({len(missing) - failed} downloaded now)"
          + (f", {failed} failed" if failed else ""))
    return 1 if failed else 0


def _cannot_download(missing: list[Checkpoint], why: str, hosts: dict[str, str], fix: str) -> None:
    """One line per missing checkpoint (with its host's error, if any), then the fix, on stderr."""
    print(f"error: {len(missing)} checkpoint(s) missing and {why}:", file=sys.stderr)
    for c in missing:
        host = host_of(c)
        reason = f"  [{host}: {hosts[host]}]" if host in hosts else ""
        print(f"  - {c.component}: {c.source}" + (f" @ {c.revision}" if c.revision else "") + reason, file=sys.stderr)
    print(fix, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
