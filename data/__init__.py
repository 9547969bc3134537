"""Data: vocabularies, the tokenizer, the pre-training data builder and its input pipeline."""
