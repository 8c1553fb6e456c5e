"""COCO instance segmenters for scoring edited images, and HATIE's selection rules.

Backends: torchvision Mask R-CNN (default) and detectron2 (`mask_rcnn_R_101_FPN_3x`, what HATIE used), chosen
automatically when `import detectron2` works. Both return raw instances; `select_detections` applies the rules
shared by every backend: score >= threshold, empty masks dropped, the best-scoring instance per class kept.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from benchmark.io.hashing import stable_hash
from benchmark.io.model_cache import WeightsUnavailableError, check_source, tiny_model_dir

# detectron2's `pred_classes` index this list (COCO's 80 classes in category-id order)
from benchmark.querysets.coco_classes import COCO_CLASSES

SCORE_THRESHOLD = 0.1  # HATIE's detectron2 SCORE_THRESH_TEST
DEGENERATE_PX = 5  # a detection whose box is narrower or shorter than this counts as degenerate (HATIE)
MASK_THRESHOLD = 0.5  # torchvision's soft masks -> binary
MAX_DETECTIONS = 100  # torchvision's and detectron2's detections per image
# COCO category ids skipped by the 80-class list (torchvision's 91-way heads label these "N/A").
_COCO_UNUSED_IDS = (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)
# The tiny stand-in is `maskrcnn_resnet50_fpn_v2`'s own layout (BatchNorm in the FPN and heads, 2-conv RPN head,
# 4-conv + FC box head, 4-conv mask head) on a shallower ResNet of the same Bottleneck blocks (one per stage instead
# of 3-4-6-3), with narrower heads, a 128 px input and fewer proposals: sizes only, so it stays fast on CPU.
TINY_MASKRCNN = {"layout": "maskrcnn_resnet50_fpn_v2", "body": "bottleneck", "blocks": [1, 1, 1, 1], "head_width": 32, "head_fc": 64, "min_size": 128,
                 "max_size": 128, "num_classes": 91, "rpn_pre_nms_top_n_test": 100, "rpn_post_nms_top_n_test": 20}
TINY_SEED = 0
# torchvision's MaskRCNN_ResNet50_FPN_V2_Weights.COCO_V1 checkpoint (file name carries its hash); checked on load.
TV_WEIGHTS_FILE = "maskrcnn_resnet50_fpn_v2_coco-73cbd019.pth"


def coco91_names() -> list[str]:
    """torchvision's label index -> class name (0 = background, unused ids = 'N/A')."""
    names, it = ["__background__"], iter(COCO_CLASSES)
    for cid in range(1, 91):
        names.append("N/A" if cid in _COCO_UNUSED_IDS else next(it))
    return names


@dataclass(frozen=True)
class Detection:
    """One kept instance: class, confidence, box `[x0, y0, x1, y1]` (inclusive min/max of the mask), mask."""

    name: str
    score: float
    bbox: tuple[int, int, int, int]
    mask: np.ndarray = field(repr=False, compare=False)  # bool (H, W)

    @property
    def degenerate(self) -> bool:
        x0, y0, x1, y1 = self.bbox
        return (x1 - x0) < DEGENERATE_PX or (y1 - y0) < DEGENERATE_PX


Segmentation = dict[str, Detection]  # class name -> its best instance


def bbox_from_mask(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Inclusive min/max column and row of the nonzero pixels (HATIE's convention)."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]), int(rows[-1])


def select_detections(names: Sequence[str], scores: Sequence[float], masks: Sequence[np.ndarray],
                      threshold: float = SCORE_THRESHOLD) -> Segmentation:
    """HATIE's rules: drop instances under `threshold` or with empty masks, keep the best instance per class.
    Ties keep the first instance (as HATIE's strict `>`)."""
    out: Segmentation = {}
    for name, score, mask in zip(names, scores, masks, strict=True):
        score = float(score)
        if score < threshold or name in ("N/A", "__background__") or not mask.any():
            continue
        if name not in out or score > out[name].score:
            out[name] = Detection(name, score, bbox_from_mask(mask), mask.astype(bool))
    return out


def restrict(seg: Segmentation, classes: Sequence[str]) -> Segmentation:
    """Only the query's relevant classes."""
    return {k: v for k, v in seg.items() if k in set(classes)}


class Segmenter(Protocol):
    signature: str  # changes whenever outputs could change (backend, weights, threshold)

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        """uint8 RGB (H, W, 3) images -> one selection per image (every class, best instance each)."""
        ...


class TorchvisionSegmenter:
    """torchvision Mask R-CNN. Batched: one forward pass per `batch_size` images.

    Masks are computed only for instances the selection can keep: per class the best-scoring box, and the next one
    only if that mask came out empty. `select_detections` would discard every other mask, and the mask head treats
    each box on its own, so the selection equals the one made from the full model output (tested) while the mask
    head runs on a few boxes instead of up to 100 per image.
    """

    def __init__(self, model: Any, *, threshold: float = SCORE_THRESHOLD, batch_size: int = 4, device: str = "cpu",
                 signature: str = "") -> None:
        self.model, self.threshold, self.batch_size, self.device = model, threshold, batch_size, device
        self.names = coco91_names()
        self.signature = signature or f"torchvision/custom/t{threshold}"

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        import torch

        out: list[Segmentation] = []
        for chunk in self._chunks(images):
            with torch.inference_mode():
                out += self._segment_chunk(chunk)
        return out

    def _chunks(self, images: Sequence[np.ndarray]) -> Iterator[list[Any]]:
        """uint8 (H, W, 3) images -> lists of float (3, H, W) tensors in [0, 1] on the device, `batch_size` each."""
        import torch

        for start in range(0, len(images), self.batch_size):
            yield [torch.from_numpy(np.ascontiguousarray(im)).permute(2, 0, 1).float().div(255).to(self.device)
                   for im in images[start : start + self.batch_size]]

    def _segment_chunk(self, chunk: list[Any]) -> list[Segmentation]:
        """`GeneralizedRCNN.forward` in inference, with the mask branch run only on candidate boxes."""
        from collections import OrderedDict

        model, heads = self.model, self.model.roi_heads
        original_sizes = [(int(im.shape[-2]), int(im.shape[-1])) for im in chunk]
        batch, _ = model.transform(chunk)
        features = model.backbone(batch.tensors)
        if not isinstance(features, dict):
            features = OrderedDict([("0", features)])
        proposals, _ = model.rpn(batch, features)
        box_features = heads.box_head(heads.box_roi_pool(features, proposals, batch.image_sizes))
        logits, regression = heads.box_predictor(box_features)
        boxes, scores, labels = heads.postprocess_detections(logits, regression, proposals, batch.image_sizes)
        scores_l, labels_l = [s.tolist() for s in scores], [lb.tolist() for lb in labels]
        # per image: class -> candidate rows in output order (scores descending; ties keep the first, as the rules)
        pending: list[dict[int, list[int]]] = []
        for sc, lb in zip(scores_l, labels_l, strict=True):
            per_class: dict[int, list[int]] = {}
            for row, (score, c) in enumerate(zip(sc, lb, strict=True)):
                if score >= self.threshold and self.names[c] not in ("N/A", "__background__"):
                    per_class.setdefault(c, []).append(row)
            pending.append(per_class)
        found: list[dict[int, np.ndarray]] = [{} for _ in chunk]  # row -> bool mask at the input size
        take = 1  # the best box per class first; for classes whose best mask was empty, all the rest at once
        while any(pending):
            wanted = []
            for per_class in pending:
                rows = []
                for c in per_class:
                    rows += per_class[c][:take]
                    per_class[c] = per_class[c][take:]
                wanted.append(sorted(rows))
            take = MAX_DETECTIONS
            masks = self._masks(features, batch.image_sizes, original_sizes, boxes, labels, wanted)
            for i, (rows, image_masks) in enumerate(zip(wanted, masks, strict=True)):
                for row, mask in zip(rows, image_masks, strict=True):
                    found[i][row] = mask
                    if mask.any():  # the class is settled: its best non-empty instance is this one
                        pending[i].pop(labels_l[i][row], None)
                pending[i] = {c: rows_left for c, rows_left in pending[i].items() if rows_left}
        out = []
        for i, rows_masks in enumerate(found):
            rows = sorted(rows_masks)
            out.append(select_detections([self.names[labels_l[i][r]] for r in rows], [scores_l[i][r] for r in rows],
                                         [rows_masks[r] for r in rows], self.threshold))
        return out

    def _masks(self, features: Any, model_sizes: list, original_sizes: list, boxes: list, labels: list,
               wanted: list[list[int]]) -> list[np.ndarray]:
        """Binary masks at the input image size for the `wanted` rows of each image's detections."""
        import torch
        from torchvision.models.detection.roi_heads import maskrcnn_inference

        heads = self.model.roi_heads
        index = [torch.as_tensor(rows, dtype=torch.long, device=b.device) for rows, b in zip(wanted, boxes, strict=True)]
        sel_boxes = [b[ix] for b, ix in zip(boxes, index, strict=True)]
        sel_labels = [lb[ix] for lb, ix in zip(labels, index, strict=True)]
        logits = heads.mask_predictor(heads.mask_head(heads.mask_roi_pool(features, sel_boxes, model_sizes)))
        probs = maskrcnn_inference(logits, sel_labels)
        dets = [{"boxes": b, "labels": lb, "scores": torch.ones_like(lb, dtype=torch.float32), "masks": p}
                for b, lb, p in zip(sel_boxes, sel_labels, probs, strict=True)]
        dets = self.model.transform.postprocess(dets, model_sizes, original_sizes)
        return [(d["masks"][:, 0] >= MASK_THRESHOLD).cpu().numpy() for d in dets]

    def segment_full(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        """Reference path: the model's own forward (masks for every box) on the same batches, then the selection."""
        import torch

        out: list[Segmentation] = []
        for chunk in self._chunks(images):
            with torch.inference_mode():
                preds = self.model(chunk)
            for p in preds:
                masks = (p["masks"][:, 0] >= MASK_THRESHOLD).cpu().numpy()
                out.append(select_detections([self.names[int(i)] for i in p["labels"].cpu()],
                                             p["scores"].cpu().tolist(), list(masks), self.threshold))
        return out


def convert_detectron2(instances: Any, class_names: Sequence[str] = COCO_CLASSES) -> tuple[list[str], list[float], list[np.ndarray]]:
    """detectron2 `Instances` (pred_classes, scores, pred_masks on any device) -> (names, scores, bool masks)."""
    classes = instances.pred_classes.cpu().numpy().tolist()
    scores = instances.scores.cpu().numpy().astype(float).tolist()
    masks = instances.pred_masks.cpu().numpy().astype(bool)
    return [class_names[c] for c in classes], scores, list(masks)


class Detectron2Segmenter:
    """detectron2's DefaultPredictor (expects BGR uint8); same selection rules as every backend."""

    def __init__(self, predictor: Any, *, threshold: float = SCORE_THRESHOLD, signature: str = "") -> None:
        self.predictor, self.threshold = predictor, threshold
        self.signature = signature or f"detectron2/custom/t{threshold}"

    def segment(self, images: Sequence[np.ndarray]) -> list[Segmentation]:
        out = []
        for im in images:
            names, scores, masks = convert_detectron2(self.predictor(np.ascontiguousarray(im[:, :, ::-1]))["instances"])
            out.append(select_detections(names, scores, masks, self.threshold))
        return out


def _tiny_maskrcnn(cfg: dict[str, Any], threshold: float) -> Any:
    """`maskrcnn_resnet50_fpn_v2`'s construction (torchvision's builder, step by step) with `cfg`'s sizes."""
    from torch import nn
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import _resnet_fpn_extractor
    from torchvision.models.detection.faster_rcnn import (
        FastRCNNConvFCHead,
        FastRCNNPredictor,
        RPNHead,
        _default_anchorgen,
    )
    from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
    from torchvision.models.resnet import Bottleneck, ResNet

    if cfg["body"] != "bottleneck":
        raise ValueError(f"unknown tiny Mask R-CNN body {cfg['body']!r}")
    body = ResNet(Bottleneck, list(cfg["blocks"]))  # resnet50 = ResNet(Bottleneck, [3, 4, 6, 3])
    backbone = _resnet_fpn_extractor(body, 5, norm_layer=nn.BatchNorm2d)
    anchors = _default_anchorgen()
    width = cfg["head_width"]
    return MaskRCNN(
        backbone, rpn_anchor_generator=anchors,  # the predictors are MaskRCNN's defaults at the heads' widths
        box_predictor=FastRCNNPredictor(cfg["head_fc"], cfg["num_classes"]),
        mask_predictor=MaskRCNNPredictor(width, width, cfg["num_classes"]),
        rpn_head=RPNHead(backbone.out_channels, anchors.num_anchors_per_location()[0], conv_depth=2),
        box_head=FastRCNNConvFCHead((backbone.out_channels, 7, 7), [width] * 4, [cfg["head_fc"]],
                                    norm_layer=nn.BatchNorm2d),
        mask_head=MaskRCNNHeads(backbone.out_channels, [width] * 4, 1, norm_layer=nn.BatchNorm2d),
        min_size=cfg["min_size"], max_size=cfg["max_size"], rpn_pre_nms_top_n_test=cfg["rpn_pre_nms_top_n_test"],
        rpn_post_nms_top_n_test=cfg["rpn_post_nms_top_n_test"], box_score_thresh=threshold)


def _save_tiny(path: Path) -> None:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        torch.save(_tiny_maskrcnn(TINY_MASKRCNN, SCORE_THRESHOLD).state_dict(), path / "maskrcnn.pt")


@functools.lru_cache(maxsize=4)
def load_torchvision_segmenter(weights: str = "pretrained", threshold: float = SCORE_THRESHOLD, batch_size: int = 4,
                               device: str = "cpu") -> TorchvisionSegmenter:
    """Mask R-CNN R50-FPN v2 with COCO weights (pretrained), a small random Mask R-CNN (tiny) or the real shape
    with random weights (random). Weights always go through `load_state_dict`."""
    import torch
    from torchvision.models.detection import MaskRCNN_ResNet50_FPN_V2_Weights, maskrcnn_resnet50_fpn_v2

    source = check_source(weights)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        if source == "tiny":
            model = _tiny_maskrcnn(TINY_MASKRCNN, threshold)
            state = torch.load(tiny_model_dir("maskrcnn", TINY_MASKRCNN, _save_tiny) / "maskrcnn.pt", weights_only=True)
        else:
            model = maskrcnn_resnet50_fpn_v2(weights=None, weights_backbone=None, box_score_thresh=threshold)
            state = model.state_dict()
    if source == "pretrained":
        w = MaskRCNN_ResNet50_FPN_V2_Weights.COCO_V1
        if Path(w.url).name != TV_WEIGHTS_FILE:  # the identity recorded in signatures must be what loads
            raise RuntimeError(f"torchvision's COCO_V1 weights are {Path(w.url).name}, expected {TV_WEIGHTS_FILE}")
        try:
            state = w.get_state_dict(progress=False, check_hash=True)
        except Exception as err:  # urllib / hash errors
            raise WeightsUnavailableError("the Mask R-CNN segmenter", w.url, err) from err
    model.load_state_dict(state)
    if device == "cpu":  # oneDNN's convolutions are faster in NHWC (2.79 -> 2.40 s per 512 px image, 2 threads)
        model = model.to(memory_format=torch.channels_last)
    return TorchvisionSegmenter(model.to(device).eval(), threshold=threshold, batch_size=batch_size, device=device,
                                signature=resolve_segmenter("torchvision", source, threshold).signature)


D2_CONFIG = "COCO-InstanceSegmentation/mask_rcnn_R_101_FPN_3x.yaml"


@functools.lru_cache(maxsize=2)
def load_detectron2_segmenter(config: str = D2_CONFIG, threshold: float = SCORE_THRESHOLD,
                              device: str = "cpu", signature: str = "") -> Detectron2Segmenter:  # pragma: no cover - needs detectron2
    from detectron2 import model_zoo
    from detectron2.config import get_cfg
    from detectron2.engine import DefaultPredictor

    cfg = get_cfg()
    cfg.merge_from_file(model_zoo.get_config_file(config))
    cfg.MODEL.ROI_HEADS.SCORE_THRESH_TEST = threshold
    cfg.MODEL.WEIGHTS = model_zoo.get_checkpoint_url(config)
    cfg.MODEL.DEVICE = device
    return Detectron2Segmenter(DefaultPredictor(cfg), threshold=threshold, signature=signature)


def detectron2_available() -> bool:
    return importlib.util.find_spec("detectron2") is not None


@dataclass(frozen=True)
class SegmenterIdentity:
    """The segmenter a configuration resolves to, known before any weights load: `backend: auto` picks detectron2
    or torchvision by what is installed, so two machines can resolve one config differently. `signature` goes into
    the metric signature, the `components` column and the segmentation cache folder's name."""

    backend: str  # "torchvision" or "detectron2"
    weights: str  # identity of the weights: checkpoint file name (with its hash), or the tiny config's hash
    threshold: float

    @property
    def signature(self) -> str:
        return f"{self.backend}/{self.weights}/t{self.threshold}"


def _d2_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("detectron2")
    except PackageNotFoundError:
        return "unknown"


def resolve_segmenter(backend: str = "auto", weights: str = "pretrained",
                      threshold: float = SCORE_THRESHOLD) -> SegmenterIdentity:
    """Which segmenter `build_segmenter(backend, weights, threshold)` builds, without building it.

    `auto`: detectron2 (HATIE's exact segmenter) when it is installed and real weights are wanted, else torchvision.
    """
    if backend not in ("auto", "torchvision", "detectron2"):
        raise ValueError(f"unknown segmenter backend {backend!r}; expected auto, torchvision or detectron2")
    source = check_source(weights)
    use_d2 = backend == "detectron2" or (backend == "auto" and source == "pretrained" and detectron2_available())
    if use_d2:
        if source != "pretrained":
            raise ValueError("the detectron2 backend has no tiny/random weights; use backend=torchvision")
        # detectron2's model zoo maps a config name to one fixed checkpoint URL
        return SegmenterIdentity("detectron2", f"{D2_CONFIG}@model_zoo/detectron2-{_d2_version()}", float(threshold))
    if source == "pretrained":
        ident = f"maskrcnn_resnet50_fpn_v2/{TV_WEIGHTS_FILE}"
    elif source == "tiny":
        ident = f"maskrcnn-tiny-{stable_hash({'config': TINY_MASKRCNN, 'seed': TINY_SEED})[:12]}"
    else:
        ident = f"maskrcnn_resnet50_fpn_v2/random-seed{TINY_SEED}"
    return SegmenterIdentity("torchvision", ident, float(threshold))


def build_segmenter(backend: str = "auto", weights: str = "pretrained", threshold: float = SCORE_THRESHOLD,
                    batch_size: int = 4, device: str = "cpu") -> Segmenter:
    """The segmenter `resolve_segmenter` names (its `signature` equals the identity's)."""
    ident = resolve_segmenter(backend, weights, threshold)
    if ident.backend == "detectron2":
        if not detectron2_available():
            raise ImportError("segmenter backend 'detectron2' needs detectron2 (install it from source: "
                              "https://github.com/facebookresearch/detectron2); or use backend=torchvision")
        return load_detectron2_segmenter(threshold=threshold, device=device, signature=ident.signature)
    return load_torchvision_segmenter(weights, threshold, batch_size, device)


SEG_CACHE_FORMAT = 2  # bump when the npz layout changes: older files are then quarantined and recomputed
_SEG_KEYS = frozenset({"format", "names", "scores", "boxes", "masks", "height", "width", "edit_sha256", "segmenter"})


class SegmentationCacheError(ValueError):
    """A cached segmentation cannot be trusted; the message says why (the caller moves the file aside)."""


def save_segmentation(seg: Segmentation, path: Path, *, edit_sha256: str, segmenter: str,
                      shape: tuple[int, int]) -> None:
    """Cache one image's selection as a compressed npz of plain arrays (no pickles), keyed inside the file by the
    edit's sha256 and the segmenter signature so a file made for another edit or segmenter is never trusted."""
    from benchmark.io.fileio import atomic_path

    names = sorted(seg)
    h, w = shape
    masks = np.stack([seg[n].mask for n in names]) if names else np.zeros((0, h, w), bool)
    if masks.shape[1:] != (h, w):
        raise ValueError(f"segmentation masks are {masks.shape[1:]}, expected {(h, w)}")
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, format=np.array(SEG_CACHE_FORMAT, dtype=np.int64),
                            names=np.array(names, dtype="<U32"),
                            scores=np.array([seg[n].score for n in names], dtype=np.float64),
                            boxes=np.array([seg[n].bbox for n in names], dtype=np.int64).reshape(-1, 4),
                            masks=np.packbits(masks, axis=-1), height=np.array(h, dtype=np.int64),
                            width=np.array(w, dtype=np.int64), edit_sha256=np.array(edit_sha256),
                            segmenter=np.array(segmenter))


def _read_members(z: Any, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """Every member of the archive as an array, each .npy header read (once) and checked before its data: sizes no
    real segmentation has are refused, so a planted archive cannot make the reader decompress gigabytes."""
    from benchmark.io.npy_header import read_npy_header

    h, w = shape
    limit = {"masks": len(COCO_CLASSES) * h * ((w + 7) // 8), "names": len(COCO_CLASSES), "scores": len(COCO_CLASSES),
             "boxes": 4 * len(COCO_CLASSES)}
    out = {}
    for key in z.files:
        with z.zip.open(f"{key}.npy") as fh:
            dims, fortran, dtype = read_npy_header(fh)  # not numpy's reader: its ast parse is not thread-safe
            count = int(np.prod(dims, dtype=np.int64)) if dims else 1
            if dtype.hasobject or count > limit.get(key, 1) or dtype.itemsize > 512:
                raise SegmentationCacheError(f"member {key!r} is {dtype} {dims}: too large or not plain data")
            data = fh.read(count * dtype.itemsize)  # what np.load would read after parsing the header again
        if len(data) != count * dtype.itemsize:
            raise SegmentationCacheError(f"member {key!r} is truncated")
        out[key] = np.frombuffer(data, dtype=dtype, count=count).reshape(dims, order="F" if fortran else "C")
    return out


def _scalar(arr: dict[str, np.ndarray], key: str, kind: str) -> Any:
    a = arr[key]
    if a.shape != () or a.dtype.kind not in kind:
        raise SegmentationCacheError(f"{key!r} must be a scalar of kind {kind!r}, got {a.dtype} {a.shape}")
    return a.item()


def load_segmentation(path: Path, *, edit_sha256: str, segmenter: str, shape: tuple[int, int]) -> Segmentation:
    """Read a cached segmentation, checking everything before trusting it: plain arrays only (no pickles), the
    expected keys, dtypes and shapes (masks of the image's `shape`), known class names, scores in [0, 1], boxes
    equal to their masks' boxes, and the edit sha256 and segmenter signature it was made for. Anything else raises
    `SegmentationCacheError` with the reason."""
    import zipfile

    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise SegmentationCacheError("not an npz archive")
            keys = set(z.files)
            if keys != _SEG_KEYS:
                raise SegmentationCacheError(f"keys {sorted(keys)} != expected {sorted(_SEG_KEYS)}")
            arr = _read_members(z, shape)
            if _scalar(arr, "format", "i") != SEG_CACHE_FORMAT:
                raise SegmentationCacheError(f"format {arr['format']} != {SEG_CACHE_FORMAT}")
            if _scalar(arr, "edit_sha256", "U") != edit_sha256:
                raise SegmentationCacheError("made for another edit (edit sha256 differs)")
            if _scalar(arr, "segmenter", "U") != segmenter:
                raise SegmentationCacheError(f"made by another segmenter ({_scalar(arr, 'segmenter', 'U')!r})")
            h, w = _scalar(arr, "height", "i"), _scalar(arr, "width", "i")
            if (h, w) != tuple(shape):
                raise SegmentationCacheError(f"masks are {h}x{w}, the image is {shape[0]}x{shape[1]}")
            names, scores, boxes, packed = arr["names"], arr["scores"], arr["boxes"], arr["masks"]
            n = len(names) if names.ndim == 1 else -1
            if names.dtype.kind != "U" or n < 0:
                raise SegmentationCacheError(f"names must be a 1-d string array, got {names.dtype} {names.shape}")
            if scores.dtype.kind != "f" or scores.shape != (n,):
                raise SegmentationCacheError(f"scores must be float ({n},), got {scores.dtype} {scores.shape}")
            if boxes.dtype.kind not in "iu" or boxes.shape != (n, 4):
                raise SegmentationCacheError(f"boxes must be int ({n}, 4), got {boxes.dtype} {boxes.shape}")
            if packed.dtype != np.uint8 or packed.shape != (n, h, (w + 7) // 8):
                raise SegmentationCacheError(f"masks must be packed uint8 ({n}, {h}, {(w + 7) // 8}), got "
                                             f"{packed.dtype} {packed.shape}")
            masks = np.unpackbits(packed, axis=-1, count=w).view(bool)  # 0 / 1 bytes: the bools, no copy
    except SegmentationCacheError:
        raise
    except (OSError, ValueError, EOFError, KeyError, TypeError, AttributeError, zipfile.BadZipFile,
            RuntimeError) as err:
        raise SegmentationCacheError(f"unreadable ({type(err).__name__}: {err})") from None
    out: Segmentation = {}
    known = set(COCO_CLASSES)
    for name, score, box, mask in zip(names.tolist(), scores.tolist(), boxes.tolist(), masks, strict=True):
        if name not in known or name in out:
            raise SegmentationCacheError(f"class {name!r} is unknown or repeated")
        if not (0.0 <= score <= 1.0):
            raise SegmentationCacheError(f"score {score!r} of {name!r} is outside [0, 1]")
        mask_box = bbox_from_mask(mask) if mask.any() else None
        if mask_box is None or tuple(box) != mask_box:
            raise SegmentationCacheError(f"box {box} of {name!r} does not match its mask")
        out[name] = Detection(name, float(score), mask_box, mask)
    return out


def detector_masks(image: Any, boxes: Sequence[tuple[float, float, float, float]],
                   class_names: Sequence[str]) -> list[np.ndarray | None]:
    """The GQA builder's detector check (`--mask-fn benchmark.models.segmenter:detector_masks`): the best mask of
    each object's class in `image` (PIL or uint8 array), or None. Weights: $EDITMETER_WEIGHTS (default pretrained)."""
    import os

    seg = build_segmenter(weights=os.environ.get("EDITMETER_WEIGHTS", "pretrained"))
    found = seg.segment([np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, dtype=np.uint8)])[0]
    return [found[n].mask if n in found else None for n in class_names]
