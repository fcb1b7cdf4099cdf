"""Device set-up at model load that a CPU-only machine can still check: the attention backends chosen for a GPU."""

from __future__ import annotations

import pytest
import torch

from engine.model import CUDNN_SDPA_ENV, avoid_per_shape_attention_plans


@pytest.fixture
def cudnn_switch(monkeypatch):
    """Record calls of torch.backends.cuda.enable_cudnn_sdp instead of changing this process's backends."""
    calls: list[bool] = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", calls.append, raising=False)
    monkeypatch.delenv(CUDNN_SDPA_ENV, raising=False)
    return calls


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_gpu_model_turns_cudnn_attention_off(cudnn_switch, dtype):
    assert avoid_per_shape_attention_plans(torch.device("cuda"), dtype) is True
    assert cudnn_switch == [False]


@pytest.mark.parametrize("device, dtype", [("cuda", torch.float32), ("cpu", torch.bfloat16), ("cpu", torch.float32),
                                           ("mps", torch.float16)])
def test_other_devices_and_float32_keep_the_backends(cudnn_switch, device, dtype):
    assert avoid_per_shape_attention_plans(torch.device(device), dtype) is False
    assert cudnn_switch == []


def test_the_variable_keeps_cudnn_attention(cudnn_switch, monkeypatch):
    monkeypatch.setenv(CUDNN_SDPA_ENV, "1")
    assert avoid_per_shape_attention_plans(torch.device("cuda"), torch.bfloat16) is False
    assert cudnn_switch == []
