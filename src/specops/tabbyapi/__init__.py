"""TabbyAPI (ExLlamaV2/ExLlamaV3) as a second engine: config.yml from a service profile, the Hugging Face
model-directory pair check, and the multi-GPU memory fit for EXL2/EXL3 weights.

Pinned TabbyAPI: theroyallab/tabbyAPI 79126f904c2e (2026-06-27), the last commit with the ExLlamaV2 backend
(c8b9a8f, 2026-07-14, removed it; EXL2 models such as the seed's need a TabbyAPI at or before the pin).
"""

TABBYAPI_COMMIT = "79126f904c2e00aece026b36bb70bbb87e4892b2"
