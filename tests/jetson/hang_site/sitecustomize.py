"""Test-only start-up hook for a gateway subprocess: a prompt containing HANG-THE-GPU blocks the
generation thread for ever, the way a wedged CUDA context does on a Jetson (which cannot happen
on this machine). Both runners are covered: the one-at-a-time runner hangs in its generation call,
the batched one in the compute thread's next batch step after such a request was submitted. Only
tests/jetson/test_systemd_notify.py puts this folder on PYTHONPATH."""

import threading


def _install() -> None:
    from edge import batch_runner, local_model

    wedged = threading.Event()
    original_run = local_model.LocalModel._run
    original_batched = local_model.LocalModel._generate_batched
    original_step = batch_runner.BatchEngine.step

    def _run(self, model, req, job, queue_ms):  # type: ignore[no-untyped-def]
        if any("HANG-THE-GPU" in m.content for m in req.messages):
            threading.Event().wait()
        return original_run(self, model, req, job, queue_ms)

    def _generate_batched(self, model, req):  # type: ignore[no-untyped-def]
        if any("HANG-THE-GPU" in m.content for m in req.messages):
            wedged.set()
        return original_batched(self, model, req)

    def step(self):  # type: ignore[no-untyped-def]
        if wedged.is_set():
            threading.Event().wait()
        return original_step(self)

    local_model.LocalModel._run = _run
    local_model.LocalModel._generate_batched = _generate_batched
    batch_runner.BatchEngine.step = step


_install()
