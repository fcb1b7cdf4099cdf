"""vLLM worker classes that give fastcoder's proposer the model runner (imports vLLM).

vLLM's ``custom_class`` proposer interface passes no request ids, so a request's ``vllm_xargs``
(``{"fastcoder_repo": ID}``) cannot reach the proposer through it. vLLM's documented way to extend a
worker is ``--worker-cls``: these subclasses of the platform's worker, after the model (and the
proposer) are loaded, call :meth:`engine.serving.vllm_proposer.FastCoderProposer.attach_runner` with
the worker's model runner. Nothing of vLLM is patched.

``fastcoder serve-vllm`` passes ``--worker-cls engine.serving.vllm_worker.FastCoderCPUWorker`` on a CPU
and ``...FastCoderGPUWorker`` on CUDA.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _attach(worker) -> None:
    runner = getattr(worker, "model_runner", None)
    drafter = getattr(runner, "drafter", None)
    attach = getattr(drafter, "attach_runner", None)
    if callable(attach):
        attach(runner)
        log.info("fastcoder proposer attached to the model runner (per-request repositories on)")
    else:
        log.warning("fastcoder worker: the speculative proposer is not fastcoder's; nothing attached")


try:
    from vllm.v1.worker.cpu_worker import CPUWorker as _CPUWorker
except Exception:  # pragma: no cover - a vLLM build without the CPU worker
    _CPUWorker = None

try:
    from vllm.v1.worker.gpu_worker import Worker as _GPUWorker
except Exception:  # pragma: no cover - a vLLM build without the GPU worker
    _GPUWorker = None


if _CPUWorker is not None:
    class FastCoderCPUWorker(_CPUWorker):
        """vLLM's CPU worker, plus :func:`_attach` after the model loads."""

        def load_model(self, *args, **kwargs):
            result = super().load_model(*args, **kwargs)
            _attach(self)
            return result


if _GPUWorker is not None:
    class FastCoderGPUWorker(_GPUWorker):
        """vLLM's GPU worker, plus :func:`_attach` after the model loads."""

        def load_model(self, *args, **kwargs):
            result = super().load_model(*args, **kwargs)
            _attach(self)
            return result
