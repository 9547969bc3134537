"""Raw-text serving SavedModel: in-graph tokenization, [CLS] text [SEP] + padding, outputs equal the
Keras model's (sequence output and classifier logits)."""
import numpy as np
import pytest

from tests.conftest import keras_backend, shared_path

pytestmark = pytest.mark.skipif(keras_backend() != "tensorflow", reason="SavedModel export is TF-only")

TINY = dict(vocab_size=30522, hidden_size=32, embedding_size=16, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)


def test_savedmodel_from_raw_text_matches_keras(tmp_path):
    import keras
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops for loading)

    from data.tokenization import Tokenizer
    from model import ConvBertConfig, ConvBertModel
    from model.export import export_savedmodel

    tokenizer = Tokenizer(shared_path("data", "vocab", "bert-uncased-vocab.txt"), do_lower_case=True)
    keras.utils.set_random_seed(0)
    model = ConvBertModel(ConvBertConfig(**TINY), conv_implementation="auto")
    classifier = keras.Sequential([keras.layers.Lambda(lambda x: x[:, 0]), keras.layers.Dense(3)])
    classifier.build((None, 16, 32))
    max_len = 16
    export_savedmodel(model, tokenizer, tmp_path / "serving", max_seq_length=max_len,
                      classifier=classifier)

    texts = ["Hello world!", "ConvBERT replaces some attention heads with span-based dynamic "
             "convolutions, and this sentence is long enough to be truncated."]
    loaded = tf.saved_model.load(str(tmp_path / "serving"))
    out = loaded.signatures["serving_default"](text=tf.constant(texts))

    # The same inputs built in Python with the same tokenizer.
    ids = np.full((2, max_len), tokenizer.pad_id, np.int32)
    mask = np.zeros((2, max_len), np.int32)
    for i, pieces in enumerate(tokenizer.tokenize(texts)):
        row = [tokenizer.cls_id] + pieces[:max_len - 2] + [tokenizer.sep_id]
        ids[i, :len(row)], mask[i, :len(row)] = row, 1
    np.testing.assert_array_equal(out["input_ids"].numpy(), ids)
    np.testing.assert_array_equal(out["input_mask"].numpy(), mask)
    assert mask[1].all() and not mask[0].all()          # second text truncated, first padded

    inputs = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}
    want = model(inputs, training=False)
    np.testing.assert_allclose(out["sequence_output"].numpy(), np.asarray(want), atol=1e-5)
    np.testing.assert_allclose(out["logits"].numpy(), np.asarray(classifier(want)), atol=1e-5)
