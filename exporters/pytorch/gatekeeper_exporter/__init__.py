"""gatekeeper's allocator exporter for PyTorch processes.

Serves the CUDA caching allocator's figures as gatekeeper's memory_blocks
JSON (GET /memory_blocks) and as Prometheus text (GET /metrics), and, only
when started with empty_cache=True, the relief hook POST
/v1/internal/empty_cache (gatekeeper_exporter.relief):

    import gatekeeper_exporter
    handle = gatekeeper_exporter.start(port=8001)   # after CUDA is in use
    ...
    handle.stop()

Importing this package never imports torch and never touches CUDA; the
exporter reads the torch the host process has imported, once CUDA is
initialised there. In vLLM, the plugin in gatekeeper_exporter.vllm_plugin
starts it in each GPU worker (see the package README).
"""

from .server import Exporter, start

__all__ = ["Exporter", "start", "__version__"]

__version__ = "0.1.0"
