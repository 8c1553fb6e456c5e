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


class FailsItsBatches(AppendsPhrase):
    """Records a text for every query of a batch, then fails any batch of more than one: each query is retried
    alone and records its own text, which is the one its record must keep; `fail_alone` ids fail alone too, before
    recording anything."""

    def __init__(self, fail_alone=()):
        self.fail_alone = set(fail_alone)

    def edit(self, queries, images, *, seeds):
        if len(queries) > 1:
            for q in queries:
                self.record_rewrite(q.id, "from the failed batch")
            raise RuntimeError("batch: retry alone")
        if queries[0].id in self.fail_alone:
            raise ValueError(f"bad query {queries[0].id}")
        return super().edit(queries, images, seeds=seeds)
