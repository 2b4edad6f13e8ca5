"""Client of OpenAI-compatible cloud chat APIs: pooled HTTP/2, retries, breakers, phase timing.

This package imports nothing from ``edge``: the gateway hands it the settings it needs.
"""
