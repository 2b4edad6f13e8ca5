"""Test-only crash injection: ``EDGECLOUD_FAULT_KILL_AT=<step>`` SIGKILLs this process at that step.

SIGKILL is the closest a test can get to a power cut: no ``finally``, no flush, no atexit. The
crash tests run the device CLI in a subprocess with this variable set and then check that the store
is consistent and that the next run finishes or cleans up. Unset (always, in production) it is a
no-op costing one environment lookup.

Steps: ``download_part`` (after a chunk of a target is written), ``staged`` (all files verified in
staging), ``before_switch`` (installed and journaled, pointer not moved), ``after_switch`` (pointer
moved, gateway not yet swapped/health-checked).
"""

from __future__ import annotations

import os
import signal

ENV = "EDGECLOUD_FAULT_KILL_AT"
STEPS = ("download_part", "staged", "before_switch", "after_switch")


def maybe_kill(step: str) -> None:
    if os.environ.get(ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
