"""Causal (left-to-right) language modelling with ConvBERT's mixed attention: the encoder
with `causal=True` (lm/model.py), WikiText-style data (lm/data.py), a task of the training core
with perplexity and generation (lm/task.py); the driver is run_lm.py."""
