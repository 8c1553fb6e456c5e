"""AugCLIP's LLM attribute extractor on the shared local language model (`benchmark.models.llm`): the config's
factory `load_llm_extractor`, and `llm_signature`, its signature without loading the model."""

from __future__ import annotations

from typing import Any

from benchmark.metrics.augclip.attributes import LLMExtractor
from benchmark.models.llm import LLM_ID, LLM_REVISION, llm_name, load_causal_lm


def llm_signature(weights: str = "pretrained", model_id: str = LLM_ID, revision: str = LLM_REVISION, *,
                  max_new_tokens: int = 128, max_attributes: int = 16, **_: Any) -> str:
    """`LLMExtractor.signature` of what `load_llm_extractor(**same kwargs)` builds, without loading it."""
    return LLMExtractor.signature_of(llm_name(weights, model_id, revision), max_new_tokens, max_attributes)


def load_llm_extractor(weights: str = "pretrained", model_id: str = LLM_ID, revision: str = LLM_REVISION, *,
                       max_new_tokens: int = 128, max_attributes: int = 16, batch_size: int = 8,
                       device: str = "cpu") -> Any:
    """An `LLMExtractor` on `load_causal_lm`'s model (the config's `_partial_` factory calls this with device=)."""
    model, tok, name = load_causal_lm(weights, model_id, revision, device)
    return LLMExtractor(model, tok, name=name, max_new_tokens=max_new_tokens, max_attributes=max_attributes,
                        batch_size=batch_size, device=device)
