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


class RequeueAtExit(IdentityEditor):
    """identity that, in Slurm array task 0's first start, asks Slurm to requeue that task in its last seconds:
    when its process exits, after submitit has written the result file (an `atexit` hook; then it lingers
    `linger_s`, so the requeue lands while the task is still running), as a preemption that lands while a task
    completes does."""

    def __init__(self, linger_s: float = 3.0):
        import atexit
        import os

        if os.environ.get("SLURM_ARRAY_TASK_ID") == "0" and not os.environ.get("SLURM_RESTART_COUNT"):
            task = f"{os.environ['SLURM_ARRAY_JOB_ID']}_0"
            atexit.register(_requeue, task, linger_s)


def _requeue(task, linger_s):
    import subprocess

    subprocess.run(["scontrol", "requeue", task], check=False, capture_output=True, timeout=30)
    time.sleep(linger_s)
