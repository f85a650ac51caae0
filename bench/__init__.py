"""Benchmarks of the free-block queue against the designs a user would otherwise copy.

Run from a checkout: ``python -m verified_queue bench`` (or ``tox -e bench``).
Nothing here is shipped in the wheel, and no test imports it: performance
claims come from these benchmarks only.
"""
