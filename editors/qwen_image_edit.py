"""`qwen_image_edit`: Qwen-Image-Edit-2509 (Qwen team 2025), a 20B MMDiT conditioned on Qwen2.5-VL."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

from benchmark.editing.dit import DiTEditor

# The pipeline module's own constants: the areas (pixels) it resizes the source to for Qwen2.5-VL (the condition
# image) and for the VAE (the reference latents), whatever the output size.
_PIPELINE_MODULE = "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus"
_AREAS = {"condition_side": "CONDITION_IMAGE_SIZE", "vae_side": "VAE_IMAGE_SIZE"}
_LOCK = threading.Lock()


class QwenImageEditEditor(DiTEditor):
    """`QwenImageEditPlusPipeline`: the source enters twice, through Qwen2.5-VL (semantics, with the instruction)
    and as VAE latents beside the noise tokens (appearance); true classifier-free guidance with a negative prompt.

    Args (besides DiTEditor's): true_cfg_scale, negative_prompt, max_sequence_length,
    condition_side / vae_side: sides (px) of the square areas the pipeline resizes the source to for Qwen2.5-VL and
    for the VAE. diffusers hard-codes them (384^2 and 1024^2) as module constants; the editor sets them for the
    duration of its call, so the tiny profile can shrink them like any other size. Recorded in `info()`.
    The pipeline reads a list of images as several references for one prompt, so queries run one at a time.
    """

    name: ClassVar[str] = "qwen_image_edit"
    kind: ClassVar[str] = "qwen_image_edit"
    batched: ClassVar[bool] = False

    def __init__(self, *, true_cfg_scale: float, negative_prompt: str, max_sequence_length: int,
                 condition_side: int, vae_side: int, **common: Any) -> None:
        """Loads the pipeline (DiTEditor) and checks that diffusers still has the constants it sets."""
        import importlib

        super().__init__(**common)
        self.true_cfg_scale, self.negative_prompt = float(true_cfg_scale), str(negative_prompt)
        self.max_sequence_length = int(max_sequence_length)
        self.sides = {"condition_side": int(condition_side), "vae_side": int(vae_side)}
        self._module = importlib.import_module(_PIPELINE_MODULE)
        missing = [c for c in _AREAS.values() if not hasattr(self._module, c)]
        if missing:
            raise RuntimeError(f"editor 'qwen_image_edit': {_PIPELINE_MODULE} has no {', '.join(missing)}; this "
                               f"diffusers version sizes the reference images another way (the editor was written "
                               f"for diffusers 0.42)")

    @contextlib.contextmanager
    def _areas(self) -> Iterator[None]:
        with _LOCK:
            saved = {c: getattr(self._module, c) for c in _AREAS.values()}
            try:
                for key, const in _AREAS.items():
                    setattr(self._module, const, self.sides[key] ** 2)
                yield
            finally:
                for const, value in saved.items():
                    setattr(self._module, const, value)

    def _call(self, prompts: list[str], images: list[Any], generators: list[Any]) -> Any:
        r = self.resolution
        with self._areas():
            return self.pipe(image=images[0], prompt=prompts[0], negative_prompt=self.negative_prompt,
                             true_cfg_scale=self.true_cfg_scale, height=r, width=r, num_inference_steps=self.steps,
                             generator=generators, max_sequence_length=self.max_sequence_length,
                             output_type="np").images

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings that shape the output (merged into `info()`)."""
        return {"steps": self.steps, "true_cfg_scale": self.true_cfg_scale, "negative_prompt": self.negative_prompt,
                "max_sequence_length": self.max_sequence_length, **self.sides}
