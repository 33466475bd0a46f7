"""`lfm-chat serve`: the engine behind an OpenAI-compatible HTTP API, with vLLM's Prometheus metrics.

    app.py          the Starlette app: routes, the worker's lifetime, the API key, errors as JSON
    completions.py  the two generation endpoints: parse, render the prompt, stream or collect, cancel
    protocol.py     request bodies -> messages / prompt + SamplingParams, every mistake a 400
    tools.py        tools and tool_choice, tool turns, the reply's calls (message.tool_calls)
    structured_outputs.py  response_format and vLLM's structured_outputs -> the engine's Structure
    responses.py    OpenAI's response and stream-chunk shapes
    bridge.py       admission (503 when full); events reach the loop by EngineWorker.stream
    metrics.py      /metrics text: vLLM's names from engine snapshots and token events
    errors.py       ApiError and OpenAI's error object
    config.py       ServerConfig
    connections.py  uvicorn's h11 protocol with a connection cap and header/body deadlines
    limits.py       those limits' defaults (importable without the serve extra)

Its command line is cli/serve.py. It uses the engine through its public API only (`from engine
import ...`) and never imports the app. Starlette and uvicorn are the optional `serve` extra.
"""
