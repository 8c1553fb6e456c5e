"""Test-only editors that fail: on every query, on chosen queries, or at chosen steps (prepare / model / finish)."""

import os

from editors.identity import IdentityEditor


class AlwaysFails(IdentityEditor):
    """Raises what a broken new diffusion editor raised on every query."""

    def edit(self, queries, images, *, seeds):
        raise RuntimeError("torch.cat(): expected a non-empty list")


class FailsEvery(IdentityEditor):
    """Fails the queries at positions 0, k, 2k, ... of the order it sees them (ValueError), edits the others."""

    def __init__(self, every: int = 10):
        self.every, self.seen = int(every), 0

    def edit(self, queries, images, *, seeds):
        if len(queries) > 1:  # force one-by-one retries so positions are per query, whatever the batch size
            raise RuntimeError("batch: retry alone")
        k, self.seen = self.seen, self.seen + 1
        if k % self.every == 0:
            raise ValueError(f"bad query {queries[0].id}")
        return super().edit(queries, images, seeds=seeds)


class FailsOnInstruction(IdentityEditor):
    """Identity that fails every query whose instruction contains the word in $EDITMETER_TEST_FAIL_WORD (ValueError
    naming the query); outside the config, so a rerun with the cause fixed works in the same run folder."""

    def edit(self, queries, images, *, seeds):
        word = os.environ.get("EDITMETER_TEST_FAIL_WORD", "")
        bad = [q.id for q in queries if word and word in (q.instruction or "")]
        if bad:
            raise ValueError(f"cannot edit {bad[0]}")
        return super().edit(queries, images, seeds=seeds)
