"""AugCLIP (docs/augclip.md): the edit's cosine with the minimal move of the source onto a weighted SVM hyperplane
that separates source attributes from target attributes in CLIP space."""
