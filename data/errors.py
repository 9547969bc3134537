"""Error types for bad user input, reported by the command-line tools as one line."""


class DataError(ValueError):
    """Bad input data (corpus, vocabulary, shards, flags); the message names the file."""


class VocabError(DataError):
    """A vocabulary or SentencePiece model file is missing or malformed."""


class CorpusError(DataError):
    """A corpus file or directory cannot be used (empty, binary, not UTF-8)."""
