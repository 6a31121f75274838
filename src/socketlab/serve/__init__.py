"""Serving experiments: start an OpenAI-compatible server under a recorded CPU placement, load it
the way vLLM's ``bench serve`` does, and compare arms.

- ``placement``: workers / workers+siblings / all -> a concrete CPU list (pure).
- ``server``: the server process group's lifecycle (start pinned, wait ready, always stop).
- ``loadgen``: asyncio + httpx streaming client, raw per-request timestamps.
- ``metrics``: TTFT/TPOT/ITL/E2E, windowed throughput, goodput (pure).
- collectors/procstats.py (``socketlab.hostside.procstats``): peak PSS of the server tree and
  CPU time per thread group (stdlib only, runs on the host beside the server).
- ``prompts``: the pinned corpus and synthetic prompts of exact token lengths.
- ``report``: the seed's comparison columns and the placement A/B table.
- ``vllm_import``: a vLLM bench-serve JSON as a run.
- ``runkind``: the serving run kind, one serving point end to end (used by the orchestrator's
  runner).
- ``scripted_server``: a scripted OpenAI-compatible endpoint with known timing and failure
  modes, for testing without a model (docs/serving.md).
"""
