"""Test-only editors that rewrite each instruction before editing (`Editor.rewrites_instruction`), as a prompt
enhancer does: one appends a phrase and records the text, one declares the rewrite but records nothing."""

from editors.identity import IdentityEditor

PHRASE = ", in a photorealistic style"


class AppendsPhrase(IdentityEditor):
    """Edits like identity after appending PHRASE to each instruction; records the rewritten text per query."""

    rewrites_instruction = True

    def edit(self, queries, images, *, seeds):
        for q in queries:
            self.record_rewrite(q.id, q.instruction + PHRASE)
        return super().edit(queries, images, seeds=seeds)

    def info(self):
        return {"name": "appends_phrase", "phrase": PHRASE}


class ForgetsTheText(IdentityEditor):
    """Declares the rewrite and never hands back the text: each of its edits fails, naming the contract."""

    rewrites_instruction = True
