"""vLLM as it ships, read at test time: not a specification of ours, but the engine we follow.

``wheel`` loads vLLM's free-block code out of its wheel (nothing installed) for the
conformance tests and the benchmark; ``fetch`` downloads the wheel into a cache
directory (standard library only, so it runs before anything is installed).
"""
