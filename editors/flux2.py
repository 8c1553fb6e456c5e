"""`flux2`: FLUX.2 [klein] 4B (Black Forest Labs 2026), text-to-image with reference images, used as an editor."""

from __future__ import annotations

from typing import Any, ClassVar

from benchmark.editing.dit import DiTEditor


class Flux2KleinEditor(DiTEditor):
    """`Flux2KleinPipeline` with the source as its one reference image. The distilled checkpoint samples in 4 steps
    without classifier-free guidance (`guidance_scale` 1.0; the pipeline ignores larger values when distilled).

    Args (besides DiTEditor's): guidance_scale, max_sequence_length (Qwen3 tokens).
    The pipeline reads a list of images as several references for one prompt, so queries run one at a time.
    """

    name: ClassVar[str] = "flux2"
    kind: ClassVar[str] = "flux2"
    batched: ClassVar[bool] = False

    def __init__(self, *, guidance_scale: float, max_sequence_length: int, **common: Any) -> None:
        """Loads the pipeline (DiTEditor) and keeps the sampler settings."""
        super().__init__(**common)
        self.guidance_scale, self.max_sequence_length = float(guidance_scale), int(max_sequence_length)

    def _call(self, prompts: list[str], images: list[Any], generators: list[Any]) -> Any:
        r = self.resolution
        return self.pipe(image=images[0], prompt=prompts[0], height=r, width=r, num_inference_steps=self.steps,
                         guidance_scale=self.guidance_scale, generator=generators,
                         max_sequence_length=self.max_sequence_length, output_type="np").images

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings that shape the output (merged into `info()`)."""
        return {"steps": self.steps, "guidance_scale": self.guidance_scale,
                "max_sequence_length": self.max_sequence_length}
