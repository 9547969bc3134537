"""Inference export: a SavedModel that takes raw text and tokenizes in-graph (TF backend only).

    from data.tokenization import Tokenizer
    module = export_savedmodel(model, Tokenizer(vocab_file), "/tmp/convbert_serving",
                               max_seq_length=128, classifier=None)
    loaded = tf.saved_model.load("/tmp/convbert_serving")
    out = loaded.signatures["serving_default"](text=tf.constant(["hello world"]))
    out["sequence_output"]   # [B, max_seq_length, H]
    out["logits"]            # only when a classifier head was given

The serving function builds `[CLS] text [SEP]` (text truncated to max_seq_length - 2 word pieces),
pads with [PAD] to max_seq_length, input_mask 1 on real tokens, segment_ids 0, and runs the encoder
with training=False. The tokenizer is `data.tokenization.Tokenizer` (tensorflow-text), so loading
the SavedModel needs `import tensorflow_text` (it registers the tokenizer ops).

`classifier`: any Keras layer/model mapping the sequence output [B, T, H] to logits (for example a
fine-tuning head that reads the [CLS] vector); its output is returned under "logits".
"""
import tensorflow as tf

SIGNATURE_KEY = "serving_default"


class ServingModule(tf.Module):
    def __init__(self, model, tokenizer, max_seq_length=128, classifier=None, name="convbert_serving"):
        super().__init__(name=name)
        if max_seq_length < 2:
            raise ValueError("max_seq_length must leave room for [CLS] and [SEP]")
        self.model = model
        self.classifier = classifier
        self.max_seq_length = int(max_seq_length)
        self.cls_id, self.sep_id, self.pad_id = int(tokenizer.cls_id), int(tokenizer.sep_id), int(
            tokenizer.pad_id)
        # Track the tokenizer's TF resources (vocab tables / model buffers) with the module.
        self._tokenizer_op = getattr(tokenizer, "_op", None)
        self._tokenizer = tokenizer
        self.serve = tf.function(self._serve, input_signature=[
            tf.TensorSpec([None], tf.string, name="text")])

    def encode(self, text):
        """[B] strings -> input_ids, input_mask, segment_ids, each int32 [B, max_seq_length]."""
        pieces = self._tokenizer.tf_tokenize(text)                              # ragged [B, None]
        pieces = tf.cast(pieces[:, :self.max_seq_length - 2], tf.int32)
        batch = tf.shape(text)[0]
        cls = tf.fill([batch, 1], self.cls_id)
        sep = tf.fill([batch, 1], self.sep_id)
        ids = tf.concat([cls, pieces, sep], axis=1)                             # ragged
        input_ids = ids.to_tensor(default_value=self.pad_id, shape=[None, self.max_seq_length])
        lengths = ids.row_lengths()
        input_mask = tf.sequence_mask(lengths, self.max_seq_length, dtype=tf.int32)
        return {"input_ids": input_ids, "input_mask": input_mask,
                "segment_ids": tf.zeros_like(input_ids)}

    def _serve(self, text):
        inputs = self.encode(text)
        sequence_output = self.model(inputs, training=False)
        out = {"sequence_output": sequence_output, "input_ids": inputs["input_ids"],
               "input_mask": inputs["input_mask"]}
        if self.classifier is not None:
            out["logits"] = self.classifier(sequence_output, training=False)
        return out


def export_savedmodel(model, tokenizer, export_dir, max_seq_length=128, classifier=None):
    """Write a SavedModel whose `serving_default` signature takes `text` [B] strings."""
    import keras
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError("SavedModel export needs KERAS_BACKEND=tensorflow")
    module = ServingModule(model, tokenizer, max_seq_length, classifier)
    tf.saved_model.save(module, str(export_dir),
                        signatures={SIGNATURE_KEY: module.serve.get_concrete_function()})
    return module
