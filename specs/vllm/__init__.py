"""vLLM as it ships, read at test time: not a specification of ours, but the engine we follow.

``wheel`` loads vLLM's free-block code out of its wheel (nothing installed) for the
conformance tests and the benchmark; ``fetch`` downloads a release's wheel or sdist into a
cache directory, or names the newest release on the index (standard library only, so it
runs before anything is installed); ``latest`` runs the conformance on the newest release
and prints what changed in vLLM's shapes (``tox -e vllm-latest``); ``engine`` runs vLLM's
own tests on the installed engine as shipped and with the plugin (``tox -e vllm-engine``),
through the pytest plugin ``engine_pytest``.
"""
