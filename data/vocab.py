"""Vocabularies: load and validate WordPiece vocab files, learn WordPiece or SentencePiece ones.

Every file access goes through tf.io.gfile, so vocabularies may live on gs:// as well.
"""
import os
import tempfile

import tensorflow as tf

from data.errors import VocabError

# The tokens every vocabulary must contain (BERT names); the builder and masking rely on them.
REQUIRED_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BERT_NUM_UNUSED = 99  # BERT puts [unused0..98] between [PAD] and [UNK].


def bert_reserved_tokens(num_unused=BERT_NUM_UNUSED):
    """The special tokens in BERT order: [PAD] [unused0..] [UNK] [CLS] [SEP] [MASK]."""
    return (["[PAD]"] + [f"[unused{i}]" for i in range(num_unused)]
            + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"])


def load_vocab(vocab_file):
    """Reads a one-token-per-line vocab file and checks it; returns the list of tokens."""
    vocab_file = str(vocab_file)
    if not tf.io.gfile.exists(vocab_file) or tf.io.gfile.isdir(vocab_file):
        raise VocabError(f"vocab file {vocab_file}: not found")
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
        raw = f.read()
    if b"\x00" in raw:
        raise VocabError(f"vocab file {vocab_file}: binary data, expected one token per line")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VocabError(
            f"vocab file {vocab_file}: invalid UTF-8 at byte offset {e.start}") from None
    # Tolerate CRLF files and a missing final newline; keep tokens otherwise verbatim.
    tokens = text.replace("\r\n", "\n").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    check_vocab(tokens, vocab_file)
    return tokens


def check_vocab(tokens, source):
    """Raises VocabError naming `source` unless `tokens` is a usable WordPiece vocabulary."""
    if not tokens:
        raise VocabError(f"vocab file {source}: empty")
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in set(tokens)]
    if missing:
        raise VocabError(f"vocab file {source}: missing special token(s) {' '.join(missing)}")
    blank = [i for i, t in enumerate(tokens) if not t.strip()]
    if blank:
        raise VocabError(f"vocab file {source}: blank token on line {blank[0] + 1}")
    if len(set(tokens)) != len(tokens):
        seen = set()
        duplicate = next(t for t in tokens if t in seen or seen.add(t))
        raise VocabError(f"vocab file {source}: duplicate token {duplicate!r}")


def write_vocab(tokens, vocab_file):
    """Writes tokens one per line, atomically (temp name, then rename)."""
    vocab_file = str(vocab_file)
    parent = os.path.dirname(vocab_file)
    if parent:
        tf.io.gfile.makedirs(parent)
    tmp = vocab_file + ".incomplete"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write("".join(t + "\n" for t in tokens))
    tf.io.gfile.rename(tmp, vocab_file, overwrite=True)
    return vocab_file


def learn_wordpiece_vocab(texts, vocab_size, do_lower_case=True, num_unused=BERT_NUM_UNUSED,
                          min_count=10, batch_size=1024):
    """Learns a WordPiece vocabulary with tensorflow-text's BERT vocabulary learner.

    `texts` is an iterable of strings (lines); the result starts with the BERT special tokens
    in BERT positions and has at most about `vocab_size` entries (the learner treats the size
    as a target, not an exact count). `min_count` is the learner's lowest token-frequency
    threshold: lower it for small corpora, or the vocabulary stays small.
    """
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as learner

    texts = [t for t in texts if t.strip()]
    if not texts:
        raise VocabError("cannot learn a vocabulary from an empty corpus")
    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string)).batch(batch_size)
    reserved = bert_reserved_tokens(num_unused)
    tokens = learner.bert_vocab_from_dataset(
        dataset,
        vocab_size=vocab_size,
        reserved_tokens=reserved,
        bert_tokenizer_params=dict(lower_case=do_lower_case),
        learn_params=dict(lower_thresh=min_count),
    )
    check_vocab(tokens, "<learned vocabulary>")
    return tokens


def learn_sentencepiece_model(texts, model_prefix, vocab_size, model_type="unigram",
                              do_lower_case=True, character_coverage=1.0, seed=0):
    """Trains a SentencePiece model (unigram or bpe) with BERT-style special tokens.

    Ids: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.  Writes `<model_prefix>.model` and
    `.vocab` (through tf.io.gfile) and returns the .model path.
    """
    import sentencepiece as spm

    if model_type not in ("unigram", "bpe"):
        raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
    texts = [t.strip() for t in texts if t.strip()]
    if not texts:
        raise VocabError("cannot learn a SentencePiece model from an empty corpus")
    if do_lower_case:
        texts = [t.lower() for t in texts]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        local_prefix = os.path.join(tmp, "sp")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=local_prefix, vocab_size=vocab_size,
            model_type=model_type, character_coverage=character_coverage,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            pad_piece="[PAD]", unk_piece="[UNK]",
            user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
            # Deterministic training: one thread, fixed seed sentence order.
            num_threads=1, seed_sentencepiece_size=1000000, shuffle_input_sentence=False,
            hard_vocab_limit=False, minloglevel=2,
        )
        model_prefix = str(model_prefix)
        parent = os.path.dirname(model_prefix)
        if parent:
            tf.io.gfile.makedirs(parent)
        for suffix in (".vocab", ".model"):   # the .model last: its presence means complete
            tmp = model_prefix + suffix + ".incomplete"
            tf.io.gfile.copy(local_prefix + suffix, tmp, overwrite=True)
            tf.io.gfile.rename(tmp, model_prefix + suffix, overwrite=True)
    return model_prefix + ".model"


VOCAB_TYPES = ("wordpiece", "sentencepiece")


def build_vocab(corpus_dirs, output, vocab_type="wordpiece", vocab_size=30522,
                do_lower_case=True, min_count=10, sp_model_type="unigram", log=print):
    """Learns a vocabulary from every file of `corpus_dirs` and writes it (build_vocab.py).

    wordpiece: `output` is the vocab file (BERT layout: [PAD] [unused..] [UNK] [CLS] [SEP]
    [MASK] first; `min_count` is the learner's lowest token frequency). sentencepiece: `output`
    is the model path (`<prefix>.model`, with `<prefix>.vocab` beside it; [PAD]=0 [UNK]=1
    [CLS]=2 [SEP]=3 [MASK]=4). Both are written atomically; returns the path written.
    """
    import time

    from data import corpus_reader
    if vocab_type not in VOCAB_TYPES:
        raise VocabError(f"unknown vocab type {vocab_type!r}; choose {' or '.join(VOCAB_TYPES)}")
    if vocab_size < 8:
        raise VocabError(f"vocab size {vocab_size} is too small")
    output = str(output)
    if vocab_type == "sentencepiece" and not output.endswith(".model"):
        raise VocabError(f"{output}: a SentencePiece model path must end in .model")
    files = [path for d in corpus_dirs for path in corpus_reader.list_corpus_files(d)]
    start = time.time()
    lines = []
    for i, path in enumerate(files, 1):
        lines += [line for line in corpus_reader.stripped_lines(
            corpus_reader.read_corpus_file(path)) if line]
        if i == len(files) or time.time() - start > 5 * (1 + i // 50) or i % 50 == 0:
            log(f"read {i}/{len(files)} files, {len(lines):,} lines "
                f"({time.time() - start:.0f}s)")
    log(f"learning a {vocab_size:,}-token {vocab_type} vocabulary from {len(lines):,} lines ...")
    if vocab_type == "wordpiece":
        tokens = learn_wordpiece_vocab(lines, vocab_size, do_lower_case=do_lower_case,
                                       min_count=min_count)
        write_vocab(tokens, output)
        size = len(tokens)
    else:
        prefix = output[:-len(".model")]
        learn_sentencepiece_model(lines, prefix, vocab_size, model_type=sp_model_type,
                                  do_lower_case=do_lower_case)
        with tf.io.gfile.GFile(prefix + ".vocab") as f:   # a small corpus gives fewer pieces
            size = sum(1 for line in f if line.strip())
    log(f"wrote {output}: {size:,} tokens ({time.time() - start:.0f}s)")
    return output
