"""Test-only metric: L1 with a per-batch delay, so a subprocess can be killed inside the score stage.

With `EDITMETER_TEST_PART_ROWS=<n>` in the environment it also makes the score stage write parts of n rows, so a
kill of a small test run lands between parts (the real part size, 512 rows, would leave a 14-query run one part).
"""

import os
import time

from benchmark.metrics.pixel import PixelMetric

if os.environ.get("EDITMETER_TEST_PART_ROWS"):
    import benchmark.stages.score as _score

    _score.PART_ROWS = int(os.environ["EDITMETER_TEST_PART_ROWS"])


class SlowL1(PixelMetric):
    def __init__(self, delay_s: float = 0.05):
        super().__init__("l1", name="slow_l1")
        self.delay_s = delay_s

    def score(self, batch):
        time.sleep(self.delay_s)
        return super().score(batch)
