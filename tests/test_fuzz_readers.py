"""Fuzzing the readers (issue 19 item 4): whatever bytes a user's file holds, each reader either
reads it or raises our own user-facing error: one line, naming the file. Anything else (a
KeyError, a TypeError, an IndexError, a traceback the user would see) fails the test.

Property-based with hypothesis, derandomized (the same examples on every run, so CI is
reproducible) and small (`max_examples`, FUZZ_EXAMPLES), in-process. Readers: GLUE TSV, SQuAD
JSON, corpus files, vocab files, ConvBertConfig JSON, both drivers' --hparams, and the TFRecord /
protobuf decoder of the JAX path (data/tfrecord_io.py). Each crash the fuzzer found is kept as an
explicit @example above its test.
"""
import json
import os

import pytest

hypothesis = pytest.importorskip("hypothesis")   # in the test extra (setup.py)
from hypothesis import (HealthCheck, example, given, settings,  # noqa: E402
                        strategies as st)

# FUZZ_EXAMPLES=2000 for a longer hunt by hand; CI runs the default.
FUZZ = settings(derandomize=True, max_examples=int(os.environ.get("FUZZ_EXAMPLES", 60)),
                deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Pieces that make random input look like the real thing, so the fuzzer gets past the first check.
GLUE_WORDS = ["index", "sentence1", "sentence2", "label", "entailment", "not_entailment", "0",
              "1", "3.5", "-1", "nan", "inf", "", " ", "é", "\u2028", "\x00", "\r", "a b c"]
SQUAD_KEYS = ["version", "data", "title", "paragraphs", "context", "qas", "id", "question",
              "answers", "text", "answer_start", "is_impossible", "plausible_answers"]
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 10 ** 12),
                         st.floats(allow_nan=False), st.text(max_size=20),
                         st.sampled_from(["", "the", "text", "0"]))


def json_values(keys):
    return st.recursive(JSON_SCALARS, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(keys), st.text(max_size=8)), inner,
                        max_size=5)), max_leaves=25)


def raw_bytes():
    return st.one_of(st.binary(max_size=300),
                     st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))


def check_user_error(error, path, allowed):
    """The error is one of ours, one line, and names the file."""
    assert isinstance(error, allowed), f"{type(error).__name__}: {error}"
    message = str(error)
    assert "\n" not in message.strip(), message
    assert os.path.basename(str(path)) in message, message


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


# ------------------------------------------------------------------------------------ GLUE TSV
def glue_tsv():
    cell = st.one_of(st.sampled_from(GLUE_WORDS), st.text(max_size=12))
    row = st.lists(cell, min_size=0, max_size=6).map("\t".join)
    return st.one_of(st.lists(row, max_size=8).map(lambda rows: "\n".join(rows).encode()),
                     raw_bytes())


@pytest.mark.parametrize("task, folder", [("rte", "RTE"), ("sts-b", "STS-B"), ("cola", "CoLA")])
@FUZZ
@given(content=glue_tsv())
def test_glue_reader(fuzz_dir, task, folder, content):
    from data.errors import DataError
    from finetune.glue.readers import read_examples
    (fuzz_dir / folder).mkdir(exist_ok=True)
    path = fuzz_dir / folder / "train.tsv"
    path.write_bytes(content)
    try:
        read_examples(str(fuzz_dir), task, "train")
    except Exception as e:  # noqa: BLE001 -- the property: only our error, one line
        check_user_error(e, path, DataError)


# ---------------------------------------------------------------------------------- SQuAD JSON
def squad_json():
    answer = st.fixed_dictionaries({"text": JSON_SCALARS, "answer_start": JSON_SCALARS})
    qa = st.fixed_dictionaries({"id": JSON_SCALARS, "question": JSON_SCALARS,
                                "answers": st.one_of(st.lists(answer, max_size=2), JSON_SCALARS)},
                               optional={"is_impossible": JSON_SCALARS})
    paragraph = st.fixed_dictionaries({"context": JSON_SCALARS,
                                       "qas": st.one_of(st.lists(qa, max_size=2), JSON_SCALARS)})
    article = st.fixed_dictionaries({"title": JSON_SCALARS, "paragraphs": st.one_of(
        st.lists(paragraph, max_size=2), JSON_SCALARS)})
    shaped = st.fixed_dictionaries({"version": JSON_SCALARS, "data": st.one_of(
        st.lists(article, max_size=2), JSON_SCALARS)}).map(lambda d: json.dumps(d).encode())
    return st.one_of(shaped, json_values(SQUAD_KEYS).map(lambda v: json.dumps(v).encode()),
                     raw_bytes())


@pytest.mark.parametrize("is_training", [True, False])
@FUZZ
@given(content=squad_json())
def test_squad_reader(fuzz_dir, is_training, content):
    from data.errors import DataError
    from finetune.qa.squad_data import read_squad_examples
    from finetune.qa.squad_eval import SquadFormatError
    path = fuzz_dir / "train-v2.0.json"
    path.write_bytes(content)
    try:
        read_squad_examples(str(path), is_training=is_training)
    except Exception as e:  # noqa: BLE001
        check_user_error(e, path, (SquadFormatError, DataError))


# --------------------------------------------------------------------------------- corpus files
@FUZZ
@given(content=st.one_of(raw_bytes(), st.text(alphabet="ab \n\r\t\x00\u00e9\u2028",
                                              max_size=200).map(str.encode)))
def test_corpus_reader(fuzz_dir, content):
    from data import corpus_reader
    from data.errors import CorpusError
    path = fuzz_dir / "corpus.txt"
    path.write_bytes(content)
    try:
        lines = corpus_reader.stripped_lines(corpus_reader.read_corpus_file(str(path)))
        assert all(isinstance(line, str) and "\n" not in line for line in lines)
    except Exception as e:  # noqa: BLE001
        check_user_error(e, path, CorpusError)


# ---------------------------------------------------------------------------------- vocab files
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


@FUZZ
@given(content=st.one_of(
    st.lists(st.one_of(st.sampled_from(SPECIALS + ["the", "##s", "", " ", "\t"]),
                       st.text(max_size=6)), max_size=12).map(lambda t: "\n".join(t).encode()),
    raw_bytes()))
def test_vocab_reader(fuzz_dir, content):
    from data.errors import VocabError
    from data.vocab import load_vocab
    path = fuzz_dir / "vocab.txt"
    path.write_bytes(content)
    try:
        tokens = load_vocab(str(path))
        assert set(SPECIALS) <= set(tokens) and len(set(tokens)) == len(tokens)
    except Exception as e:  # noqa: BLE001
        check_user_error(e, path, VocabError)


# ------------------------------------------------------------------------- configs and hparams
CONFIG_KEYS = ["vocab_size", "hidden_size", "embedding_size", "num_hidden_layers",
               "num_attention_heads", "head_ratio", "conv_kernel_size", "num_groups",
               "intermediate_size", "hidden_act", "conv_type", "max_position_embeddings",
               "type_vocab_size", "hidden_dropout_prob", "layer_norm_eps", "causal",
               "num_heads_per_kind"]


def config_json():
    value = st.one_of(JSON_SCALARS, st.integers(-3, 64), st.sampled_from(
        ["gelu", "relu", "sdconv", "none", "dynamic", "lightweight"]), st.lists(JSON_SCALARS,
                                                                               max_size=3))
    shaped = st.dictionaries(st.sampled_from(CONFIG_KEYS), value, max_size=8)
    return st.one_of(shaped.map(lambda d: json.dumps(d).encode()),
                     json_values(CONFIG_KEYS).map(lambda v: json.dumps(v).encode()), raw_bytes())


# What the fuzzer found (each crashed with another exception, fixed in model/config.py):
@FUZZ
@example(content=b"\xff{}")                                  # not UTF-8: UnicodeDecodeError
@example(content=b'{"a\\nb": 1}')                           # a field name that breaks the line
@example(content=b'{"conv_type": []}')                       # unhashable: TypeError
@example(content=b'{"layer_norm_eps": null}')                # None > 0: TypeError
@example(content=b'{"initializer_range": "0.02"}')           # str > 0: TypeError
@given(content=config_json())
def test_config_reader(fuzz_dir, content):
    from model.config import ConfigError, ConvBertConfig
    path = fuzz_dir / "config.json"
    path.write_bytes(content)
    try:
        ConvBertConfig.from_json(str(path))
    except Exception as e:  # noqa: BLE001
        check_user_error(e, path, ConfigError)


PRETRAIN_KEYS = ["learning_rate", "train_batch_size", "num_train_steps", "max_seq_length",
                 "mask_prob", "disc_weight", "temperature", "generator_hidden_size",
                 "model_size", "model_hparam_overrides", "precision", "seed", "not_a_key"]
FINETUNE_KEYS = ["learning_rate", "train_batch_size", "num_train_epochs", "max_seq_length",
                 "model_size", "model_hparam_overrides", "layerwise_lr_decay", "seed",
                 "save_finetuned_model", "not_a_key"]


def hparams_json(keys):
    value = st.one_of(JSON_SCALARS, st.dictionaries(st.sampled_from(CONFIG_KEYS),
                                                    JSON_SCALARS, max_size=3))
    return st.one_of(st.dictionaries(st.sampled_from(keys), value, max_size=5).map(json.dumps),
                     json_values(keys).map(json.dumps), st.text(max_size=40))


# What the fuzzer found (each a TypeError, fixed in pretrain/hparams.py):
@FUZZ
@example(text='{"learning_rate": "1e-4"}')
@example(text='{"mask_prob": null}')
@example(text='{"generator_hidden_size": "64"}')
@given(text=hparams_json(PRETRAIN_KEYS))
def test_pretraining_hparams(fuzz_dir, text):
    from model.config import ConfigError
    from pretrain.hparams import HParamsError, make_hparams, parse_overrides
    path = fuzz_dir / "pretrain_hparams.json"
    path.write_text(text)
    try:
        make_hparams(overrides=parse_overrides(str(path)))
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, (HParamsError, ConfigError)), f"{type(e).__name__}: {e}"
        assert "\n" not in str(e).strip()


@FUZZ
@example(text='{"a\\nb": 1}')      # found: the unknown key's newline broke the line (fixed)
@given(text=hparams_json(FINETUNE_KEYS))
def test_finetuning_hparams(fuzz_dir, text):
    from finetune.hparams import HParamsError, load_hparams
    from model.config import ConfigError
    path = fuzz_dir / "finetune_hparams.json"
    path.write_text(text)
    try:
        load_hparams(str(path))
    except Exception as e:  # noqa: BLE001
        assert isinstance(e, (HParamsError, ConfigError)), f"{type(e).__name__}: {e}"
        assert "\n" not in str(e).strip()


# ------------------------------------------------------------- TFRecord shards (the JAX reader)
def _varint(n):
    n &= (1 << 64) - 1                      # negatives as protobuf writes them: ten bytes
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number, wire, payload):
    """One protobuf field; payload = bytes (wire 2, 1, 5) or an int (wire 0)."""
    key = _varint(number << 3 | wire)
    if wire == 0:
        return key + _varint(payload)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _frame(record):
    """TFRecord framing: length, its CRC, the record, its CRC (the reader does not check CRCs)."""
    import struct
    return struct.pack("<Q", len(record)) + b"\0" * 4 + record + b"\0" * 4


FEATURE_NAMES = ["input_ids", "input_mask", "segment_ids", "label", "", "\xe9"]
INT64 = st.one_of(st.integers(-3, 40), st.integers(-(1 << 63), (1 << 63) - 1))


@st.composite
def examples(draw):
    """A tf.train.Example, well formed or nearly: int64 lists (packed or not) of any length and
    range, bytes lists, wrong wire types, stray fields, cut short or with a byte changed."""
    entries = b""
    for _ in range(draw(st.integers(0, 4))):
        values = draw(st.lists(INT64, max_size=6))
        if draw(st.booleans()):
            int64_list = _field(1, 2, b"".join(_varint(v) for v in values))      # packed
        else:
            int64_list = b"".join(_field(1, 0, v) for v in values)
        feature = draw(st.sampled_from([
            _field(3, 2, int64_list), _field(1, 2, _field(1, 2, b"abc")),       # bytes_list
            _field(3, 0, 7), _field(3, 5, b"\0\0\0\0"), int64_list]))
        key = draw(st.one_of(st.sampled_from(FEATURE_NAMES).map(str.encode),
                             st.binary(max_size=4)))
        entry = draw(st.sampled_from([_field(1, 2, key) + _field(2, 2, feature),
                                      _field(2, 2, feature) + _field(1, 2, key),
                                      _field(1, 0, 5) + _field(2, 2, feature),
                                      _field(1, 2, key) + _field(2, 0, 9)]))
        entries += _field(draw(st.sampled_from([1, 1, 1, 2])), 2, entry)
    record = draw(st.sampled_from([_field(1, 2, entries), _field(1, 0, 3) + _field(1, 2, entries),
                                   entries]))
    cut = draw(st.integers(0, len(record)))
    if record and draw(st.booleans()):
        record = record[:cut]
    elif record and draw(st.booleans()):
        record = record[:cut % len(record)] + bytes([draw(st.integers(0, 255))]) + \
            record[cut % len(record) + 1:]
    return record


def tfrecord_files():
    import struct
    framed = st.lists(examples(), max_size=3).map(lambda rs: b"".join(map(_frame, rs)))
    return st.one_of(
        framed,
        framed.flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),     # truncated
        st.tuples(framed, st.integers(0, (1 << 64) - 1)).map(                       # wild length
            lambda t: t[0] + struct.pack("<Q", t[1]) + b"\0" * 8),
        st.lists(raw_bytes().map(_frame), max_size=3).map(b"".join),
        raw_bytes())


def _int32_overflow():
    entries = b"".join(_field(1, 2, _field(1, 2, name.encode()) + _field(2, 2, _field(
        3, 2, _field(1, 2, _varint(1 << 40) * 2)))) for name in ("input_ids", "input_mask",
                                                                 "segment_ids"))
    return _frame(_field(1, 2, entries))


# What the fuzzer found (each was a crash other than DataError, fixed in data/tfrecord_io.py):
@FUZZ
@example(content=b"\0" * 7 + b"\x01" + b"\0" * 4)       # a 2**56-byte length: MemoryError
@example(content=_frame(b"\x08\x03\n\x00"))             # a varint where a message is: TypeError
@example(content=_frame(b'\n"\n\x0f\n\tinput_ids\x12\x02\x1a\x00\n\x0f\x12\x02'))  # keyless entry
@example(content=_int32_overflow())                      # ids beyond int32: OverflowError
@given(content=tfrecord_files())
def test_tfrecord_reader(fuzz_dir, content):
    from data import tfrecord_io
    from data.errors import DataError
    path = fuzz_dir / "shard.tfrecord"
    path.write_bytes(content)
    for read in (lambda: tfrecord_io.read_examples(str(path), 2),
                 lambda: tfrecord_io.check_shard(str(path), 2),
                 lambda: tfrecord_io.count_records(str(path)),
                 lambda: tfrecord_io.largest_token_id(str(path))):
        try:
            read()
        except Exception as e:  # noqa: BLE001
            check_user_error(e, path, DataError)
