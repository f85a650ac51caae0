"""The vLLM adapters: the plugin that swaps vLLM's free-block queue, and the queues it installs.

``plugin`` is vLLM's ``vllm.general_plugins`` entry point
(``verified_queue.vllm.plugin:register``), switched by ``VERIFIED_QUEUE_VLLM``;
``checked`` and ``traced`` hold the check-mode and trace-level queues it installs for
``checked`` and ``trace``. The package imports none of them here, so that vLLM loading
the plugin loads nothing else: check mode is loaded only for the modes that use it.
The repository's tooling for vLLM's wheels and tests is ``conformance/``, its tests
``tests/vllm/``.
"""
