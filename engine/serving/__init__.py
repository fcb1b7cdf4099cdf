"""fastcoder's drafter inside serving engines (issue #14).

- :mod:`engine.serving.vllm_proposer`: a vLLM ``custom_class`` proposer (chains only), importable
  without vLLM.
- :mod:`engine.serving.vllm_worker`: vLLM worker classes that hand the proposer the model runner, so
  it can read each row's request id and ``vllm_xargs`` (imports vLLM: only loaded inside vLLM).
- :mod:`engine.serving.serve_vllm`: ``fastcoder serve-vllm`` (vLLM in its own venv).
- :mod:`engine.serving.bench_serving`: ``fastcoder bench-serving`` (simulated editors against an
  OpenAI-compatible endpoint).
"""
