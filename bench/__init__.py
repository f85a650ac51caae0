"""Benchmarks of the free-block queue against the designs a user would otherwise copy.

Run from a checkout against the installed wheel: ``tox -e bench`` (which runs
``python -I bench/__main__.py``). Nothing here is shipped in the wheel, and no test
imports it: performance claims come from these benchmarks only.
"""
