"""One inversion per source for the editors whose inversion depends only on the source (P2P, LEDITS++, DiffEdit,
and the rectified-flow editors rf_solver and fireflow).

The run's `InversionStore` (benchmark.editing.inversion_store) keeps each inversion, so the queries of a source, a
rerun, another shard and a sweep of an editing-only setting compute it once. P2P's null-text inversion draws
nothing. LEDITS++'s edit-friendly inversion draws one noise per step, and DiffEdit's samples the VAE posterior:
drawn from each query's generator, the inversion of one source would differ from query to query and could not be
shared, so these draw it from a generator seeded from the source instead (`source_seed`: the run's seed, the
source's pixels as the model sees them, its caption; `seeded_inversion` puts the run's seed in the key). What is
drawn per query (DiffEdit's mask) still comes from the query's own generator.

Every inversion is computed one source at a time (`_compute_each`: batch 1), whatever batch the inversion pass or
the edit pass hands over: batched kernels sum in another order, so a source inverted beside another came out up to
1e-3 away from the same source inverted alone, and a resume that recomputed one missing inversion of a batch gave
PNGs one level off the uninterrupted run's. Alone, an inversion depends only on its key's parts; the edits stay
batched (their batches are fixed by the plan: benchmark.stages.edit.fixed_batches). The store's key says so
(`inversion_store.BATCHING`), so inversions stored batched by an earlier editmeter are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from benchmark.editing.base import Item
from benchmark.editing.editor import query_seed


def source_seed(seed: int, image_digest: str, source_caption: str) -> int:
    """The seed of a source's inversion: a hash of the run's seed, the source's pixel digest and its caption (not of
    the device or the library versions, so a CPU and a GPU draw the same noise)."""
    return query_seed(seed, f"source:{image_digest}:{source_caption}")


def scheduler_settings(config: Any) -> dict[str, Any]:
    """A scheduler's configuration as an inversion key holds it: its public entries only. diffusers' private ones
    (`_use_default_values` is built from a set, so its order changes from process to process; `_diffusers_version`)
    would give one inversion other keys in other processes."""
    return {k: v for k, v in dict(config).items() if not str(k).startswith("_")}


def device_class(module: Any) -> str:
    """'cpu', or the GPU's name: where `module`'s parameters live, as an inversion key records it."""
    import torch

    dev = torch.device(module.device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else dev.type


class SourceInversions:
    """Mixin of a DiffusionEditor (listed before it) whose inversion is shared per source.

    A subclass sets `inversion_kind`, calls `_init_source_inversions(reuse_inversions)` in its __init__, and
    implements `_inversion_settings()` (every setting of the inversion, JSON-able), `_inversion_tensors()`
    ({name: (shape, dtype)} of one stored inversion) and `_compute_inversions(items)` (one dict of those tensors per
    item, drawing from `source_generator(item)` only). The run sets `inversion_store` when `reuse_inversions` is on
    (benchmark.commands.run), and the edit stage sets `run_seed` to the run's seed (benchmark.stages.edit). The inversion
    is shared by queries whose per-query seeds differ, so its noise cannot come from `seeds`: a direct `edit()`
    call outside a run inverts with `run_seed` (0 unless set), as docs/editors.md says."""

    shares_inversions: ClassVar[bool] = True  # one inversion per source (image, caption): benchmark.plan.budget
    inversion_kind: ClassVar[str] = ""
    seeded_inversion: ClassVar[bool] = True  # the inversion draws from `source_generator` (false: draws nothing)

    def _init_source_inversions(self, reuse_inversions: bool) -> None:
        self.reuse_inversions = bool(reuse_inversions)
        self.inversion_store: Any = None  # an InversionStore, set by the run when reuse_inversions is on
        self.run_seed = 0  # the run's seed, set by the edit stage: each source's inversion noise derives from it
        self.work.update({"inversions_computed": 0, "inversions_reused": 0})  # a rerun that edits nothing says 0

    def source_generator(self, item: Item) -> Any:
        """A CPU generator seeded from `item`'s source (`source_seed`), the same for every query of that source."""
        import torch

        from benchmark.editing.imagic import image_digest

        seed = source_seed(self.run_seed, image_digest(item.image), item.query.source_caption or "")
        return torch.Generator(device="cpu").manual_seed(seed)

    def invert_sources(self, queries: Sequence[Any], images: Sequence[Any], *, seeds: Sequence[int]) -> None:
        """Compute and store the inversions of these sources (`images` prepared by `prepare`) that the store lacks;
        the edit stage's inversion pass calls this before editing. `seeds` (per query) are not used: the inversion
        draws from `source_generator`. A no-op without a store."""
        from benchmark.editing.determinism import deterministic_algorithms

        if self.inversion_store is None:
            return
        items = [Item(q, im, int(s)) for q, im, s in zip(queries, images, seeds, strict=True)]
        keys = [self.inversion_key(it) for it in items]  # each hashes the source's pixels: once per item
        missing = set(self.inversion_store.missing(keys, self.inversion_kind, self._inversion_tensors()))
        items = [it for it, k in zip(items, keys, strict=True) if k in missing]  # a rerun reads no stored values here
        if items:
            with deterministic_algorithms(self.deterministic):
                self.runner(lambda chunk: [None] * len(self._inversions(chunk, count_reuse=False)), items)

    def inversion_key(self, item: Item) -> str:
        """The store key of `item`'s inversion: its source's pixels and caption, the run's seed (the inversion's
        noise), the weights, device class, library versions and every setting of the inversion (never an editing
        setting, so a sweep of one shares it)."""
        import diffusers
        import torch

        from benchmark.editing.imagic import image_digest
        from benchmark.editing.inversion_store import inversion_key

        return inversion_key(
            self.inversion_kind, image=image_digest(item.image), source_caption=item.query.source_caption,
            seed=int(self.run_seed) if self.seeded_inversion else None, weights={k: v for k, v in self.provenance.items() if k != "device"},
            device_class=device_class(_denoiser(self.pipe)), settings=self._inversion_settings(),
            deterministic=self.deterministic, versions={"torch": torch.__version__, "diffusers": diffusers.__version__})

    def _inversions(self, items: Sequence[Item], count_reuse: bool = True) -> list[dict[str, Any]]:
        """One dict of inversion tensors per item: read from the store, or computed now (and stored when there is a
        store). `work` counts the inversions computed and, with `count_reuse`, the items served from the store."""
        if self.inversion_store is None:
            self.work["inversions_computed"] += len(items)
            return self._compute_each(items)
        per_item, computed, reused = self.inversion_store.get_or_compute(
            [self.inversion_key(it) for it in items], self.inversion_kind, self._inversion_tensors(),
            lambda idx: self._compute_each([items[i] for i in idx]))
        self.work["inversions_computed"] += computed
        if count_reuse:
            self.work["inversions_reused"] += reused
        return per_item

    def _compute_each(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        """`_compute_inversions` on one source at a time (batch 1), so an inversion never depends on the sources it
        was handed with: a resume, a shard or an OOM-halved batch recomputes it bit for bit (module docstring)."""
        out: list[dict[str, Any]] = []
        for it in items:
            one = self._compute_inversions([it])
            if len(one) != 1:
                raise ValueError(f"{type(self).__name__}._compute_inversions returned {len(one)} inversions for 1 "
                                 "source")
            out += one
        return out

    def _inversion_settings(self) -> dict[str, Any]:
        raise NotImplementedError

    def _inversion_tensors(self) -> dict[str, tuple[tuple[int, ...], str]]:
        raise NotImplementedError

    def _compute_inversions(self, items: Sequence[Item]) -> list[dict[str, Any]]:
        raise NotImplementedError


def _denoiser(pipe: Any) -> Any:
    """The pipeline's denoising network: its UNet (Stable Diffusion), else its transformer (FLUX.1)."""
    unet = getattr(pipe, "unet", None)
    return unet if unet is not None else pipe.transformer


def dtype_name(dtype: Any) -> str:
    """'float32' for torch.float32: the dtype names the store validates against."""
    return str(dtype).removeprefix("torch.")
