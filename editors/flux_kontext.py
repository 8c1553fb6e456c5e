"""`flux_kontext`: FLUX.1 Kontext [dev] (Black Forest Labs 2025), instruction editing by in-context generation."""

from __future__ import annotations

from typing import Any, ClassVar

from benchmark.editing.dit import DiTEditor


class FluxKontextEditor(DiTEditor):
    """`FluxKontextPipeline`: the source's latents join the noise tokens as context; guidance is distilled into the
    transformer (`guidance_scale` is an input of the model, one forward pass per step, no CFG).

    Args (besides DiTEditor's): guidance_scale (the distilled guidance), max_sequence_length (T5 tokens).
    The source is resized to the square `resolution` (at 1024 px what the pipeline's own auto-resize picks for a
    square image: (1024, 1024) is one of Kontext's preferred resolutions), so `_auto_resize` is off and the output
    is `resolution` x `resolution`.
    """

    name: ClassVar[str] = "flux_kontext"
    kind: ClassVar[str] = "flux_kontext"
    batched: ClassVar[bool] = True

    def __init__(self, *, guidance_scale: float, max_sequence_length: int, **common: Any) -> None:
        """Loads the pipeline (DiTEditor) and keeps the sampler settings."""
        super().__init__(**common)
        self.guidance_scale, self.max_sequence_length = float(guidance_scale), int(max_sequence_length)

    def _call(self, prompts: list[str], images: list[Any], generators: list[Any]) -> Any:
        r = self.resolution
        return self.pipe(image=images, prompt=prompts, height=r, width=r, max_area=r * r, _auto_resize=False,
                         num_inference_steps=self.steps, guidance_scale=self.guidance_scale, generator=generators,
                         max_sequence_length=self.max_sequence_length, output_type="np").images

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings that shape the output (merged into `info()`)."""
        return {"steps": self.steps, "guidance_scale": self.guidance_scale,
                "max_sequence_length": self.max_sequence_length, "auto_resize": False}
