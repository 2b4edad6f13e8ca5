"""Test-only start-up hook for a gateway subprocess: a prompt containing HANG-THE-GPU blocks the
generation thread for ever, the way a wedged CUDA context does on a Jetson (which cannot happen
on this machine). Only tests/jetson/test_systemd_notify.py puts this folder on PYTHONPATH."""

import threading


def _install() -> None:
    from edge import local_model

    original = local_model.LocalModel._run

    def _run(self, model, req, job, queue_ms):  # type: ignore[no-untyped-def]
        if any("HANG-THE-GPU" in m.content for m in req.messages):
            threading.Event().wait()
        return original(self, model, req, job, queue_ms)

    local_model.LocalModel._run = _run


_install()
