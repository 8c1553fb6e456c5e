"""AugCLIP's arithmetic on CLIP features (numpy; no model): attribute weights, the weighted linear SVM, the minimal
move of the source onto its hyperplane, and the score (docs/augclip.md, "Definition").

Every vector here is a CLIP feature; callers pass L2-normalised ones (`ClipEncoder` does), but nothing below relies
on it except where said.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# |w|^2 below this means the SVM found no direction at all (e.g. identical sets): v would be 0 / 0
MIN_W_SQ = 1e-12


class AugClipError(ValueError):
    """A query's feature sets cannot define AugCLIP (recorded as a failure row with this message)."""


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def attribute_weights(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """alpha(v) = importance(v) + collision(v) for every row of `source` (n_s, d) and `target` (n_t, d).

    importance(v) = sum over the *other* members u of v's own set of cs(u, v);
    collision(v) = - sum over the members w of the opposite set of cs(v, w) (spec: sums, not means)."""
    s, t = _unit(np.asarray(source, np.float64)), _unit(np.asarray(target, np.float64))
    ss, tt, st = s @ s.T, t @ t.T, s @ t.T
    imp_s = ss.sum(axis=1) - np.diag(ss)
    imp_t = tt.sum(axis=1) - np.diag(tt)
    return imp_s - st.sum(axis=1), imp_t - st.sum(axis=0)


@dataclass(frozen=True)
class Hyperplane:
    """The fitted classifier g(x) = w . x + b (target side: g > 0) and what the fit had to do."""

    w: np.ndarray
    b: float
    n_clipped: int        # sample weights below `min_weight` (negative alpha) raised to it so the solver accepts them
    misclassified: int    # training points on the wrong side of the hyperplane (the sets overlap)


def fit_hyperplane(source: np.ndarray, target: np.ndarray, weights: np.ndarray, *, C: float,
                   min_weight: float) -> Hyperplane:
    """Weighted linear SVM (hinge loss + L2 on w, intercept unpenalised: libsvm through `sklearn.svm.SVC`):
    labels source = -1, target = +1, sample weights = alpha clipped from below at `min_weight`."""
    from sklearn.svm import SVC

    if min_weight <= 0:
        raise ValueError(f"min_weight must be > 0 (the solver drops samples with weight <= 0), not {min_weight}")
    x = np.concatenate([source, target]).astype(np.float64)
    y = np.concatenate([-np.ones(len(source)), np.ones(len(target))])
    weights = np.asarray(weights, np.float64)
    clipped = weights < min_weight
    svm = SVC(kernel="linear", C=C)
    svm.fit(x, y, sample_weight=np.where(clipped, min_weight, weights))
    w = np.asarray(svm.coef_, np.float64).ravel()
    b = float(np.asarray(svm.intercept_).ravel()[0])
    wrong = int(np.sum(np.sign(x @ w + b) != y))
    return Hyperplane(w, b, int(clipped.sum()), wrong)


def modification_vector(plane: Hyperplane, source_image: np.ndarray) -> np.ndarray:
    """v = -(w . s + b) / |w|^2 * w: the shortest move of `source_image` onto the hyperplane (paper Eq. 10). When
    the source already lies on the target side, v points back towards the hyperplane (the paper's formula, kept)."""
    w_sq = float(plane.w @ plane.w)
    if w_sq < MIN_W_SQ:
        raise AugClipError("the SVM found no separating direction (|w| = 0): the source and target feature sets "
                           "are indistinguishable")
    return -(float(plane.w @ source_image) + plane.b) / w_sq * plane.w


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return float("nan")
    return float(a @ b) / (na * nb)


@dataclass(frozen=True)
class AugClipResult:
    score: float
    v: np.ndarray
    plane: Hyperplane
    source_margin: float   # g(source image): < 0 when the source lies on the source side (the usual case)
    n_source: int          # size of the source set ({source image} + D_S)
    n_target: int          # size of the target set ({target anchor} + D_T)


def augclip(source_image: np.ndarray, edit_image: np.ndarray, target_anchor: np.ndarray,
            source_attrs: np.ndarray, target_attrs: np.ndarray, *, C: float = 1.0,
            min_weight: float = 1e-3) -> AugClipResult:
    """AugCLIP of one query from CLIP features (docs/augclip.md): the source set is {source image} + D_S, the
    target set {target anchor} + D_T (the anchor: the target text's feature, or the edit's under
    `target_anchor: edit`); score = cs(edit, source + v)."""
    s = np.asarray(source_image, np.float64).ravel()
    e = np.asarray(edit_image, np.float64).ravel()
    d = s.shape[0]
    src = np.concatenate([s[None], np.asarray(source_attrs, np.float64).reshape(-1, d)])
    tgt = np.concatenate([np.asarray(target_anchor, np.float64).reshape(1, d),
                          np.asarray(target_attrs, np.float64).reshape(-1, d)])
    a_s, a_t = attribute_weights(src, tgt)
    plane = fit_hyperplane(src, tgt, np.concatenate([a_s, a_t]), C=C, min_weight=min_weight)
    v = modification_vector(plane, s)
    return AugClipResult(cosine(e, s + v), v, plane, float(plane.w @ s + plane.b), len(src), len(tgt))
