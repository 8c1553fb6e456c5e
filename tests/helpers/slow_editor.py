"""Test-only editor: identity with a per-batch delay, so a subprocess can be killed mid edit stage."""

import time

from editors.identity import IdentityEditor


class SlowIdentity(IdentityEditor):
    def __init__(self, delay_s: float = 0.05):
        self.delay_s = delay_s

    def edit(self, queries, images, *, seeds):
        time.sleep(self.delay_s)
        return super().edit(queries, images, seeds=seeds)
