"""Vocabularies: load and validate WordPiece vocab files and SentencePiece models, learn either.

Every file access goes through base/fileio.py, so vocabularies may live on gs:// as well.
Reading needs no TensorFlow (the JAX path uses `special_token_ids`); learning a WordPiece
vocabulary does (tensorflow-text).
"""
import os
import tempfile

from data.errors import VocabError
from base import fileio

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
    if not fileio.exists(vocab_file) or fileio.isdir(vocab_file):
        raise VocabError(f"vocab file {vocab_file}: not found")
    raw = fileio.read_bytes(vocab_file)
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
        first = {}
        for line, token in enumerate(tokens, 1):
            if token in first:
                raise VocabError(f"vocab file {source}: duplicate token {token!r} on line {line} "
                                 f"(first on line {first[token]})")
            first[token] = line


def write_vocab(tokens, vocab_file):
    """Writes tokens one per line, atomically (temp name, then rename)."""
    vocab_file = str(vocab_file)
    parent = fileio.dirname(vocab_file)
    if parent:
        fileio.makedirs(parent)
    fileio.write_text_atomic(vocab_file, "".join(t + "\n" for t in tokens))
    return vocab_file


SPECIAL_ID_NAMES = {"[PAD]": "pad_id", "[UNK]": "unk_id", "[CLS]": "cls_id", "[SEP]": "sep_id",
                    "[MASK]": "mask_id"}


def load_sentencepiece(sp_model):
    """(processor, model bytes, {token: id}) of a SentencePiece model; VocabError naming the file
    unless it loads and defines the BERT special tokens ([CLS] [SEP] [MASK] as user-defined
    symbols, as `learn_sentencepiece_model` writes them; its pad / unk pieces count as [PAD] /
    [UNK] under any name)."""
    import sentencepiece as spm
    sp_model = str(sp_model)
    if not fileio.exists(sp_model) or fileio.isdir(sp_model):
        raise VocabError(f"SentencePiece model {sp_model}: not found")
    model_bytes = fileio.read_bytes(sp_model)
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_bytes)
    except Exception:  # sentencepiece raises RuntimeError/OSError depending on version
        raise VocabError(f"SentencePiece model {sp_model}: not a valid model file") from None
    token_ids = {processor.IdToPiece(i): i for i in range(processor.GetPieceSize())}
    for name, index in (("[PAD]", processor.pad_id()), ("[UNK]", processor.unk_id())):
        if index >= 0:
            token_ids.setdefault(name, index)
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in token_ids]
    if missing:
        raise VocabError(f"SentencePiece model {sp_model}: missing special token(s) "
                         f"{' '.join(missing)}")
    return processor, model_bytes, token_ids


def special_token_ids(vocab_file=None, sp_model=None):
    """(vocabulary size, {cls_id, sep_id, mask_id}) of a WordPiece vocab file or a SentencePiece
    model: what pre-training needs to know of the tokenizer the shards were built with."""
    if sp_model:
        processor, _, token_ids = load_sentencepiece(sp_model)
        size = processor.GetPieceSize()
    else:
        tokens = load_vocab(vocab_file)
        token_ids, size = {t: i for i, t in enumerate(tokens)}, len(tokens)
    return size, {SPECIAL_ID_NAMES[t]: token_ids[t] for t in ("[CLS]", "[SEP]", "[MASK]")}


def learn_wordpiece_vocab(texts, vocab_size, do_lower_case=True, num_unused=BERT_NUM_UNUSED,
                          min_count=10, batch_size=1024):
    """Learns a WordPiece vocabulary with tensorflow-text's BERT vocabulary learner.

    `texts` is an iterable of strings (lines); the result starts with the BERT special tokens
    in BERT positions and has at most about `vocab_size` entries (the learner treats the size
    as a target, not an exact count). `min_count` is the learner's lowest token-frequency
    threshold: lower it for small corpora, or the vocabulary stays small.
    """
    import tensorflow as tf
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
    `.vocab` (through base/fileio.py) and returns the .model path.
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
        parent = fileio.dirname(model_prefix)
        if parent:
            fileio.makedirs(parent)
        for suffix in (".vocab", ".model"):   # the .model last: its presence means complete
            with open(local_prefix + suffix, "rb") as f:   # our own temporary file
                fileio.write_bytes_atomic(model_prefix + suffix, f.read())
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
    if fileio.isdir(output):
        raise VocabError(f"--output {output}: is a directory (give the file to write)")
    blocked = fileio.not_a_directory(fileio.dirname(output) or ".")
    if blocked:
        raise VocabError(f"--output {output}: {blocked} is a file, not a directory")
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
        # a small corpus gives fewer pieces
        size = sum(1 for line in fileio.read_text(prefix + ".vocab").splitlines()
                   if line.strip())
    log(f"wrote {output}: {size:,} tokens ({time.time() - start:.0f}s)")
    return output
