"""A default corpus and vocabulary that need no download: Python's own English documentation.

Every CPython install ships `pydoc_data.topics.topics` (the language reference topics that
`help()` shows, about 0.5 MB of English prose). We turn it into a small corpus (one file per
topic = one document, one sentence per line) and learn a WordPiece vocabulary from it, both
cached under `$CONVBERT_CACHE_DIR` or `~/.cache/convbert_toolkit`, so that pre-training with no
flags works on a fresh machine. The cache key is a hash of the text, so results are
deterministic for a given Python version.
"""
import hashlib
import os
import re
import shutil
import tempfile


from data.vocab import learn_wordpiece_vocab, write_vocab

DEFAULT_VOCAB_SIZE = 4000
_RULE_LINE = re.compile(r"^\s*([*=\-~^\"'`#+])\1{3,}\s*$")  # reST title under/over-lines
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def cache_dir():
    path = os.environ.get("CONVBERT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "convbert_toolkit")
    os.makedirs(path, exist_ok=True)
    return path


def default_documents():
    """[(topic, [sentence, ...])] from pydoc_data, in a fixed (sorted) order."""
    from pydoc_data.topics import topics

    documents = []
    for topic in sorted(topics):
        sentences = []
        for paragraph in re.split(r"\n\s*\n", topics[topic]):
            lines = [line for line in paragraph.splitlines() if not _RULE_LINE.match(line)]
            text = " ".join(" ".join(lines).split())
            if text:
                sentences.extend(s for s in _SENTENCE_END.split(text) if s)
        if sentences:
            documents.append((topic, sentences))
    return documents


def _corpus_key(documents):
    digest = hashlib.sha256()
    for topic, sentences in documents:
        digest.update(topic.encode("utf-8"))
        digest.update("\n".join(sentences).encode("utf-8"))
    return digest.hexdigest()[:12]


def default_corpus_dir():
    """A directory of text files (one document each, one sentence per line); built once."""
    documents = default_documents()
    target = os.path.join(cache_dir(), f"default_corpus-{_corpus_key(documents)}")
    if os.path.isdir(target):
        return target
    # Build in a temp dir beside the target, then rename: concurrent callers never see half.
    staging = tempfile.mkdtemp(prefix=".default_corpus-", dir=cache_dir())
    for index, (topic, sentences) in enumerate(documents):
        name = f"{index:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', topic)}.txt"
        with open(os.path.join(staging, name), "w", encoding="utf-8") as f:
            f.write("\n".join(sentences) + "\n")
    try:
        os.rename(staging, target)
    except OSError:  # another process won the race
        shutil.rmtree(staging, ignore_errors=True)
    return target


def default_vocab_file(vocab_size=DEFAULT_VOCAB_SIZE):
    """A lower-cased WordPiece vocab learned from the default corpus (BERT special-token ids)."""
    documents = default_documents()
    path = os.path.join(cache_dir(), f"default_vocab-{vocab_size}-{_corpus_key(documents)}.txt")
    if not os.path.exists(path):
        sentences = [s for _, doc in documents for s in doc]
        # A small corpus: keep pieces seen at least twice, or the learner stops far below size.
        write_vocab(learn_wordpiece_vocab(sentences, vocab_size=vocab_size, min_count=2), path)
    return path


def build_default_pretraining_data(output_dir, max_seq_length=128, vocab_size=DEFAULT_VOCAB_SIZE,
                                   num_shards=4, seed=12345):
    """Builds shards from the default corpus with the default vocab; returns the shard paths."""
    from data.pretraining_builder import BuildConfig, build_pretraining_dataset

    config = BuildConfig(corpus_dir=default_corpus_dir(), output_dir=str(output_dir),
                         vocab_file=default_vocab_file(vocab_size),
                         max_seq_length=max_seq_length, num_shards=num_shards, seed=seed,
                         blanks_separate_docs=True, progress=False)
    return build_pretraining_dataset(config)["shard_paths"]
