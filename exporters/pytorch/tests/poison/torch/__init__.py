raise ImportError("gatekeeper_exporter must not import torch (tests/poison/torch)")
