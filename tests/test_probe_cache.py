"""The load-time timing probes' cache (engine/probe_cache.py): a second load reads the first one's timings instead of
timing again, under a key with everything the timings depend on; the kernels' correctness checks still run; bad
files, an unwritable folder and ``$FASTCODER_PROBE_CACHE=0`` fall back to probing."""

from __future__ import annotations

import json

import pytest
import torch

from engine import native_attention, packed_linear, probe_cache
from engine.native.attention import attention_library
from engine.native.linear import gemm_library
from tests.conftest import random_model

needs_kernel = pytest.mark.skipif(attention_library() is None or gemm_library() is None,
                                  reason="no native kernels on this machine")


class Probe:
    """A measure() that counts its calls and returns a new result each time."""

    def __init__(self):
        self.calls = 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"max_rows": 8 * self.calls, "probe_ms": {"1": [0.5, 0.4]}}


def test_a_result_is_measured_once_then_read_for_the_same_key(tmp_path):
    probe = Probe()
    first, cached = probe_cache.cached_probe("kind", {"model": "m"}, probe, folder=tmp_path)
    assert (first["max_rows"], cached, probe.calls) == (8, False, 1)
    again, cached = probe_cache.cached_probe("kind", {"model": "m"}, probe, folder=tmp_path)
    assert (again, cached, probe.calls) == (first, True, 1)
    other, cached = probe_cache.cached_probe("kind", {"model": "other"}, probe, folder=tmp_path)
    assert (other["max_rows"], cached, probe.calls) == (16, False, 2)
    other_kind, cached = probe_cache.cached_probe("kind2", {"model": "m"}, probe, folder=tmp_path)
    assert (other_kind["max_rows"], cached) == (24, False)
    stored = json.loads(next(tmp_path.glob("kind-*.json")).read_text())
    assert stored["key"]["machine"] == probe_cache.machine_key() and stored["key"]["model"] in ("m", "other")


def test_the_machine_is_part_of_the_key(tmp_path, monkeypatch):
    probe = Probe()
    probe_cache.cached_probe("kind", {}, probe, folder=tmp_path)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        _, cached = probe_cache.cached_probe("kind", {}, probe, folder=tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert not cached and probe.calls == 2
    monkeypatch.setattr(probe_cache, "_cpu_name", lambda: "another CPU")
    assert probe_cache.cached_probe("kind", {}, probe, folder=tmp_path)[1] is False


def test_bad_files_an_unwritable_folder_and_the_switch_probe_again(tmp_path, monkeypatch):
    probe = Probe()
    probe_cache.cached_probe("kind", {}, probe, folder=tmp_path)
    path = next(tmp_path.glob("kind-*.json"))
    path.write_text("{not json")
    result, cached = probe_cache.cached_probe("kind", {}, probe, folder=tmp_path)
    assert (result["max_rows"], cached) == (16, False)
    assert json.loads(path.read_text())["result"] == result  # rewritten whole
    path.write_text(json.dumps({"key": {"kind": "kind"}, "result": {"max_rows": 99}}))  # another key's file
    assert probe_cache.cached_probe("kind", {}, probe, folder=tmp_path) == ({"max_rows": 24, "probe_ms": {"1": [
        0.5, 0.4]}}, False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert probe_cache.cached_probe("kind", {}, probe, folder=blocker / "sub")[1] is False  # logged, not raised
    monkeypatch.setenv(probe_cache.PROBE_CACHE_ENV, "0")
    empty = tmp_path / "off"
    assert probe_cache.cached_probe("kind", {}, probe, folder=empty)[1] is False
    assert probe_cache.cached_probe("kind", {}, probe, folder=empty)[1] is False and not empty.exists()


def test_a_result_the_caller_does_not_keep_is_timed_again(tmp_path):
    probe = Probe()
    result, cached = probe_cache.cached_probe("kind", {}, probe, keep=lambda r: r["max_rows"] >= 16, folder=tmp_path)
    assert (result["max_rows"], cached) == (8, False) and not list(tmp_path.glob("*.json"))
    result, cached = probe_cache.cached_probe("kind", {}, probe, keep=lambda r: r["max_rows"] >= 16, folder=tmp_path)
    assert (result["max_rows"], cached) == (16, False) and len(list(tmp_path.glob("*.json"))) == 1
    assert probe_cache.cached_probe("kind", {}, probe, keep=lambda r: r["max_rows"] >= 16, folder=tmp_path) == (
        result, True)


def _fake_attention_probe(rows: int):
    def probe(model, report):
        report.probe_ms = {m: [1.0, 2.0] for m in native_attention.PROBE_ROWS}
        return rows
    return probe


def not_again(*_):
    raise AssertionError("timed again")


@needs_kernel
def test_a_second_load_reads_the_attention_probe_and_still_checks_the_kernel(tmp_path, monkeypatch):
    """A load whose attention probe finds the kernel no slower at every probed row count keeps that result; the
    second load of the same model reads it (nothing timed) and still runs the kernel's correctness check; another key
    times again; a lower limit is not kept."""
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(native_attention.ROWS_ENV, raising=False)
    key = {"model": "random-llama", "params": 1}
    monkeypatch.setattr(native_attention, "_probe_forwards", _fake_attention_probe(max(native_attention.PROBE_ROWS)))
    first = native_attention.install_native_attention(random_model("llama", vocab_size=256), probe_key=key)
    assert not first.probe_cached and first.installed and first.max_rows == max(native_attention.PROBE_ROWS)
    checks = []
    agrees = native_attention._kernel_agrees
    monkeypatch.setattr(native_attention, "_probe_forwards", not_again)
    monkeypatch.setattr(native_attention, "_kernel_agrees", lambda *a: checks.append(a) or agrees(*a))
    second = native_attention.install_native_attention(random_model("llama", vocab_size=256), probe_key=key)
    assert second.probe_cached and checks
    assert (second.max_rows, second.installed, second.probe_ms) == (first.max_rows, first.installed, first.probe_ms)
    assert second.as_dict()["probe_cached"] is True
    with pytest.raises(AssertionError, match="timed again"):
        native_attention.install_native_attention(random_model("llama", vocab_size=256), probe_key={**key, "params": 2})
    partial = {**key, "params": 3}
    monkeypatch.setattr(native_attention, "_probe_forwards", _fake_attention_probe(8))
    lower = native_attention.install_native_attention(random_model("llama", vocab_size=256), probe_key=partial)
    assert lower.max_rows == 8 and not lower.probe_cached
    monkeypatch.setattr(native_attention, "_probe_forwards", not_again)
    with pytest.raises(AssertionError, match="timed again"):
        native_attention.install_native_attention(random_model("llama", vocab_size=256), probe_key=partial)


@needs_kernel
def test_a_second_packing_reads_the_timing_but_a_failed_check_still_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).eval()

    full = max(packed_linear.PROBE_ROWS)
    timings = {r: [1.0, 0.5] for r in packed_linear.PROBE_ROWS}
    monkeypatch.setattr(packed_linear, "_time_native", lambda *a: (full, timings))
    first = packed_linear.pack_linear_weights(model(), budget_bytes=2**30, probe_key={"model": "seq"})
    assert not first.probe_cached and first.kernel == "native" and first.max_rows == full
    monkeypatch.setattr(packed_linear, "_time_native", not_again)
    second = packed_linear.pack_linear_weights(model(), budget_bytes=2**30, probe_key={"model": "seq"})
    assert second.probe_cached and second.as_dict()["probe_cached"] is True
    assert (second.kernel, second.max_rows, second.probe_ms) == (first.kernel, first.max_rows, first.probe_ms)
    monkeypatch.setattr(packed_linear, "_check_native", lambda *a: "native product differs from F.linear")
    third = packed_linear.pack_linear_weights(model(), budget_bytes=2**30, probe_key={"model": "seq"})
    assert third.kernel != "native" and not third.probe_cached


@needs_kernel
def test_packing_times_the_real_kernel_through_the_cache(tmp_path, monkeypatch):
    """The real timing probe behind the cache: its limit is one of the probed counts, and it is read back at the next
    packing only when it was the largest."""
    monkeypatch.setenv("FASTCODER_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).eval()
    first = packed_linear.pack_linear_weights(layers, budget_bytes=2**30, probe_key={"model": "real"})
    assert first.max_rows in (0, *packed_linear.PROBE_ROWS) and 1 in first.probe_ms and not first.probe_cached
    torch.manual_seed(0)
    again = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).eval()
    second = packed_linear.pack_linear_weights(again, budget_bytes=2**30, probe_key={"model": "real"})
    assert second.probe_cached is (first.max_rows == max(packed_linear.PROBE_ROWS))
