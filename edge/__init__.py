"""The on-device gateway: OpenAI-compatible app, router, cache, local model runner, metrics, CLI."""

__version__ = "0.1.0"
