"""Benchmarks: the kiosk end-to-end benchmark, the scale test and the per-part overhead benchmarks."""
