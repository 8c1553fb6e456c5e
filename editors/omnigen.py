"""`omnigen`: OmniGen v1 (Xiao et al. 2024), one transformer for text and images, editing by instruction."""

from __future__ import annotations

from typing import Any, ClassVar

from benchmark.editing.dit import DiTEditor


class OmniGenEditor(DiTEditor):
    """`OmniGenPipeline`: the instruction follows the source's placeholder (`prompt_template`, OmniGen's editing
    format), and three passes per step give text and image classifier-free guidance.

    Args (besides DiTEditor's): guidance_scale (text CFG), img_guidance_scale (image CFG), prompt_template (where
    the instruction goes; must hold `<img><|image_1|></img>` and `{instruction}`).
    The output has the input's size (`use_input_image_size_as_output`): the square `resolution`.

    diffusers' `OmniGenPipeline.encode_input_images` samples the source's VAE posterior from PyTorch's global RNG, so
    two calls with the same generator differ. The editor replaces it (on its own pipeline instance) by the same
    computation drawing from the query's generator, and runs queries one at a time so each draw is the query's own.
    """

    name: ClassVar[str] = "omnigen"
    kind: ClassVar[str] = "omnigen"
    batched: ClassVar[bool] = False

    def __init__(self, *, guidance_scale: float, img_guidance_scale: float, prompt_template: str,
                 **common: Any) -> None:
        """Loads the pipeline (DiTEditor) and checks the prompt template."""
        if "<img><|image_1|></img>" not in prompt_template or "{instruction}" not in prompt_template:
            raise ValueError(f"editor 'omnigen': prompt_template {prompt_template!r} must contain the source's "
                             f"placeholder <img><|image_1|></img> and {{instruction}}")
        super().__init__(**common)
        self.guidance_scale, self.img_guidance_scale = float(guidance_scale), float(img_guidance_scale)
        self.prompt_template = str(prompt_template)
        self._source_generator: Any = None
        self.pipe.encode_input_images = self._encode_input_images

    def _encode_input_images(self, input_pixel_values: list[Any], device: Any = None, dtype: Any = None) -> list[Any]:
        """diffusers' encode_input_images, sampling the VAE posterior from the current query's generator."""
        vae = self.pipe.vae
        device, dtype = device or self.pipe._execution_device, dtype or vae.dtype
        return [vae.encode(img.to(device, dtype)).latent_dist.sample(generator=self._source_generator)
                .mul_(vae.config.scaling_factor) for img in input_pixel_values]

    def _call(self, prompts: list[str], images: list[Any], generators: list[Any]) -> Any:
        r = self.resolution
        self._source_generator = generators[0]  # one query per call (batched = False); the source is encoded first
        return self.pipe(prompt=[self.prompt_template.format(instruction=p) for p in prompts],
                         input_images=[[im] for im in images], height=r, width=r, max_input_image_size=r,
                         num_inference_steps=self.steps, guidance_scale=self.guidance_scale,
                         img_guidance_scale=self.img_guidance_scale, use_input_image_size_as_output=True,
                         generator=generators, output_type="np").images

    def hyperparameters(self) -> dict[str, Any]:
        """Sampler settings that shape the output (merged into `info()`)."""
        return {"steps": self.steps, "guidance_scale": self.guidance_scale,
                "img_guidance_scale": self.img_guidance_scale, "prompt_template": self.prompt_template}
