"""The ChatTTS engine, one module per part.

- ``options``: every ChatTTS setting, declared once (no torch: the CLI imports it);
- ``checkpoint``: the model directory in ChatTTS's layout, loaded through
  ``Chat.load(source="custom")``, and random-weight checkpoints for tests and benchmarks;
- ``engine``: :class:`~server.engines.chattts.engine.ChatTTSEngine`, the ``Engine``;
- ``decoder``: our streaming decoder (incremental GPT, windowed vocoding);
- ``static_cache``: the GPT on a preallocated KV cache, with CUDA graphs.

Import the modules themselves: this package imports nothing, so that reading the options
does not load torch.
"""
