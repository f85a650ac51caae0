"""The block-pool client: a prefix-caching KV-cache block pool on the free-block queue.

``pool`` holds :class:`~verified_queue.kvcache.pool.BlockPool`, vLLM v1's block pool
on :class:`~verified_queue.FreeBlockQueue`; ``keys`` the prefix-cache keys it caches
blocks under. The package imports neither here, so that loading one module of it loads
nothing else. The vLLM adapters, which use none of this, are
:mod:`verified_queue.vllm`.
"""
