"""vLLM as it ships, read at test time: the engine we are a drop-in for.

Repository-only, beside ``specs/`` and ``bench/``: the plugin it serves is
:mod:`verified_queue.vllm`, its tests are ``tests/vllm/``. Supporting a new vLLM release
means these three places and ``tox.ini``'s ``vllm*`` environments.

``wheel`` loads vLLM's free-block code out of its wheel (nothing installed) for the
conformance tests and the benchmark; ``fetch`` downloads a release's wheel or sdist into a
cache directory, or names the newest release on the index (standard library only, so it
runs before anything is installed); ``latest`` runs the conformance on the newest release
and prints what changed in vLLM's shapes (``tox -e vllm-latest``); ``engine`` runs vLLM's
own tests on the installed engine as shipped and with the plugin (``tox -e vllm-engine``),
through the pytest plugin ``engine_pytest``.
"""
