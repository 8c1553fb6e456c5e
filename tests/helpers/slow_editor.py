"""Test-only editor: identity with a per-batch delay, so a subprocess can be killed mid edit stage."""

import time

from editors.identity import IdentityEditor
from editors.overedit import OverEditEditor


class SlowIdentity(IdentityEditor):
    def __init__(self, delay_s: float = 0.05):
        self.delay_s = delay_s

    def edit(self, queries, images, *, seeds):
        time.sleep(self.delay_s)
        return super().edit(queries, images, seeds=seeds)


class SlowOverEdit(OverEditEditor):
    """overedit (every turn changes the image, so a chained turn differs from a single-turn one) with a per-batch
    delay, so a subprocess can be killed in the middle of a multi-turn session."""

    def __init__(self, delay_s: float = 0.05, **kw):
        super().__init__(**kw)
        self.delay_s = delay_s

    def edit(self, queries, images, *, seeds):
        time.sleep(self.delay_s)
        return super().edit(queries, images, seeds=seeds)
