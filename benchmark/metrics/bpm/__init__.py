"""BPM (docs/bpm.md): region-aware (position, size) and semantic-aware (modification in the edited object's box,
preservation outside the objects' masks) judgement of an instruction-guided edit."""
