"""``bitnet serve``: an OpenAI-compatible HTTP server (needs the ``server`` extra: fastapi, uvicorn)."""
