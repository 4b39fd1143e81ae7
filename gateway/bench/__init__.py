"""Benchmarks: they measure and print figures; tests never assert on timings."""
