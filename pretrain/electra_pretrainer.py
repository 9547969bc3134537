"""`ElectraPretrainer`: the replaced-token-detection objective of ELECTRA / ConvBERT as a Keras model.

    pretrainer = ElectraPretrainer(ConvBertConfig.from_size("small"),
                                   generator_config(disc_config, 0.25))
    out = pretrainer(batch, step)   # batch: input_ids, input_mask, segment_ids, example_id ([B])
    out["total_loss"]               # gen_weight * gen_loss + disc_weight * disc_loss

Faithful to the official code (yitu-opensource/ConvBert / google-research/electra run_pretraining.py):
masking (pretrain.masking), generator = small ConvBERT sharing the discriminator's embeddings (own
`embeddings_project`) + MLM head tied to the word embeddings, Gumbel-max sampling of replacements
(no gradient), discriminator = ConvBERT + per-token head, BCE averaged over `input_mask` tokens.
`electra_objective=False` trains a plain MLM with the full-size model (scope `electra`).

All randomness is a function of (seed, step, example_id): see pretrain.sampling. Written only with
keras.ops, so it runs unchanged on TensorFlow and JAX.

Multi-replica training: the official losses are ratios of batch sums (sum w*CE / sum w). To make a
global batch split over R replicas give exactly the single-device loss and gradients, all-reduce
the denominators first (`loss_denominators(batch)`, cheap, no forward pass) and call
`pretrainer(batch, step, gen_denominator=..., disc_denominator=...)` on every replica: each
replica's loss is then its share of the global loss, and the replicas' losses and gradients *sum*
to the single-device ones.
"""
import keras
from keras import ops

from model.config import ConvBertConfig
from model.encoder import ConvBertModel
from model.heads import DiscriminatorHead, MaskedLMHead
from pretrain import masking, sampling
from pretrain.generator_config import generator_config as _default_generator_config

EPS = 1e-6


class _Exportable:
    """Anything `model.checkpoints.save_pretrained` can write: a config and named weights."""

    def __init__(self, config, names):
        self.config = config
        self._names = names

    def weight_map(self):
        return dict(self._names)


class ElectraPretrainer(keras.Model):
    def __init__(self, disc_config, gen_config=None, electra_objective=True, mask_prob=0.15,
                 max_predictions_per_seq=19, gen_weight=1.0, disc_weight=50.0, temperature=1.0,
                 disallow_correct=False, seed=0, cls_id=masking.CLS_ID, sep_id=masking.SEP_ID,
                 mask_id=masking.MASK_ID, conv_implementation="auto", **kwargs):
        kwargs.setdefault("name", "electra_pretrainer")
        super().__init__(**kwargs)
        if isinstance(disc_config, dict):
            disc_config = ConvBertConfig.from_dict(disc_config)
        if isinstance(gen_config, dict):
            gen_config = ConvBertConfig.from_dict(gen_config)
        self.config = disc_config
        self.electra_objective = bool(electra_objective)
        if self.electra_objective and gen_config is None:
            gen_config = _default_generator_config(disc_config)
        if not self.electra_objective:
            gen_config = disc_config
        self.gen_config = gen_config
        self.mask_prob = float(mask_prob)
        self.max_predictions_per_seq = int(max_predictions_per_seq)
        self.gen_weight = float(gen_weight)
        self.disc_weight = float(disc_weight)
        self.temperature = float(temperature)
        self.disallow_correct = bool(disallow_correct)
        self.seed = int(seed)
        self.cls_id, self.sep_id, self.mask_id = int(cls_id), int(sep_id), int(mask_id)
        self.conv_implementation = conv_implementation

        self.discriminator = ConvBertModel(disc_config, conv_implementation=conv_implementation,
                                           name="electra")
        if self.electra_objective:
            if (gen_config.vocab_size, gen_config.embedding_size) != (
                    disc_config.vocab_size, disc_config.embedding_size):
                raise ValueError("the generator shares the discriminator's embeddings: vocab_size and "
                                 "embedding_size must match")
            self.generator = ConvBertModel(gen_config, embeddings=self.discriminator.embeddings,
                                           conv_implementation=conv_implementation,
                                           name="generator")
            self.disc_head = DiscriminatorHead(disc_config.hidden_size, disc_config.hidden_act,
                                               disc_config.initializer_range,
                                               name="discriminator_predictions")
            self.disc_head.build((None, None, disc_config.hidden_size))
        else:  # plain MLM: one full-size model under scope "electra"
            self.generator = self.discriminator
            self.disc_head = None
        # The official head uses the discriminator config's activation / init.
        self.mlm_head = MaskedLMHead(self.discriminator.embeddings, disc_config.hidden_act,
                                     disc_config.layer_norm_eps, disc_config.initializer_range,
                                     name="generator_predictions")
        self.mlm_head.build((None, None, gen_config.hidden_size))
        self.built = True

    # ------------------------------------------------------------------------------ objective
    def __call__(self, batch, step=0, **kwargs):
        # Keras only takes tensors positionally; let `pretrainer(batch, 5)` work with a Python int.
        return super().__call__(batch, step=step, **kwargs)

    def loss_denominators(self, batch):
        """{"gen": sum of MLM weights, "disc": sum of input_mask} of this (local) batch, float32.

        Depends on input_mask only; all-reduce (sum) over replicas and pass to `call`.
        """
        input_mask = batch["input_mask"]
        n = masking.num_to_predict(input_mask, self.mask_prob, self.max_predictions_per_seq)
        # Examples without candidates get no weight (see pretrain.masking).
        ids = ops.cast(batch["input_ids"], "int32")
        cand = ops.cast(input_mask, "int32") * ops.cast(
            (ids != self.cls_id) & (ids != self.sep_id) & (ids != self.mask_id), "int32")
        n = n * ops.cast(ops.sum(cand, axis=-1) > 0, "int32")
        return {"gen": ops.cast(ops.sum(n), "float32"),
                "disc": ops.sum(ops.cast(input_mask, "float32"))}

    def call(self, batch, step=0, training=True, gen_denominator=None, disc_denominator=None):
        input_ids = ops.cast(batch["input_ids"], "int32")
        input_mask = ops.cast(batch["input_mask"], "int32")
        segment_ids = batch.get("segment_ids")
        segment_ids = (ops.zeros_like(input_ids) if segment_ids is None
                       else ops.cast(segment_ids, "int32"))
        example_id = batch.get("example_id")
        if example_id is None:  # position in the batch: fine on one device, not across replicas
            example_id = ops.arange(ops.shape(input_ids)[0], dtype="int32")

        masked = masking.mask_inputs(input_ids, input_mask, example_id, step, self.seed,
                                     self.mask_prob, self.max_predictions_per_seq, self.cls_id,
                                     self.sep_id, self.mask_id)
        positions = masked["masked_lm_positions"]
        lm_ids = masked["masked_lm_ids"]
        weights = masked["masked_lm_weights"]

        # Generator / MLM.
        gen_hidden = self.generator({"input_ids": masked["input_ids"], "input_mask": input_mask,
                                     "segment_ids": segment_ids}, training=training)
        logits = ops.cast(self.mlm_head(masking.gather_positions(gen_hidden, positions)), "float32")
        log_probs = ops.log_softmax(logits, axis=-1)
        label_log_probs = ops.squeeze(
            ops.take_along_axis(log_probs, ops.expand_dims(lm_ids, -1), axis=-1), -1)
        gen_loss_sum = -ops.sum(weights * label_log_probs)
        gen_weight_sum = ops.sum(weights)
        gen_den = gen_weight_sum if gen_denominator is None else ops.cast(gen_denominator, "float32")
        gen_loss = gen_loss_sum / (gen_den + EPS)
        gen_preds = ops.cast(ops.argmax(logits, axis=-1), "int32")
        gen_accuracy = ops.sum(weights * ops.cast(gen_preds == lm_ids, "float32")) / (
            gen_weight_sum + EPS)

        # Fake data: original ids, sampled tokens at every chosen position.
        disallow = None
        if self.disallow_correct:
            disallow = ops.one_hot(lm_ids, self.config.vocab_size, dtype="float32")
        sampled = sampling.sample_from_softmax(logits, masked["keys"], self.temperature, disallow)
        fake_ids, updated = masking.scatter_update(input_ids, sampled, positions)
        fake_ids = ops.stop_gradient(fake_ids)
        disc_labels = updated * ops.cast(fake_ids != input_ids, "int32")
        sampled_accuracy = ops.sum(weights * ops.cast(sampled == lm_ids, "float32")) / (
            gen_weight_sum + EPS)

        maskf = ops.cast(input_mask, "float32")
        disc_weight_sum = ops.sum(maskf)
        out = {"gen_loss": gen_loss, "gen_accuracy": gen_accuracy,
               "sampled_accuracy": sampled_accuracy,
               "gen_loss_sum": gen_loss_sum, "gen_weight_sum": gen_weight_sum,
               "masked_input_ids": masked["input_ids"], "masked_lm_positions": positions,
               "masked_lm_ids": lm_ids, "masked_lm_weights": weights, "gen_preds": gen_preds,
               "sampled_ids": sampled, "fake_input_ids": fake_ids,
               "disc_labels": disc_labels, "input_mask": input_mask,
               "disc_weight_sum": disc_weight_sum}
        if not self.electra_objective:
            zero = ops.zeros((), "float32")
            out.update(total_loss=self.gen_weight * gen_loss, disc_loss=zero, disc_accuracy=zero,
                       disc_loss_sum=zero, disc_probs=ops.zeros_like(maskf),
                       disc_logits=ops.zeros_like(maskf), disc_preds=ops.zeros_like(input_mask))
            return out

        # Discriminator / replaced-token detection.
        disc_hidden = self.discriminator({"input_ids": fake_ids, "input_mask": input_mask,
                                          "segment_ids": segment_ids}, training=training)
        disc = self.rtd_loss(self.disc_head(disc_hidden), disc_labels, input_mask,
                             disc_denominator)
        disc_logits = disc["disc_logits"]
        out.update(total_loss=self.gen_weight * gen_loss + self.disc_weight * disc["disc_loss"],
                   disc_probs=ops.sigmoid(disc_logits), **disc)
        return out

    def rtd_loss(self, disc_logits, disc_labels, input_mask, disc_denominator=None):
        """Replaced-token detection of discriminator head logits [B, T] against `disc_labels`
        (1 = replaced), averaged over `input_mask` tokens (the global `disc_denominator` when
        given): {disc_loss, disc_loss_sum, disc_accuracy, disc_logits (float32), disc_preds}.
        The one home of the RTD loss (elastic/pretrain.py applies it to sub-networks too)."""
        disc_logits = ops.cast(disc_logits, "float32")
        maskf = ops.cast(input_mask, "float32")
        disc_weight_sum = ops.sum(maskf)
        labelsf = ops.cast(disc_labels, "float32")
        # sigmoid cross-entropy, numerically stable (= tf.nn.sigmoid_cross_entropy_with_logits)
        bce = (ops.maximum(disc_logits, 0.0) - disc_logits * labelsf
               + ops.log1p(ops.exp(-ops.abs(disc_logits))))
        disc_loss_sum = ops.sum(maskf * bce)
        disc_den = (disc_weight_sum if disc_denominator is None
                    else ops.cast(disc_denominator, "float32"))
        disc_loss = disc_loss_sum / (disc_den + EPS)
        disc_preds = ops.cast(disc_logits > 0, "int32")
        disc_accuracy = ops.sum(maskf * ops.cast(disc_preds == ops.cast(disc_labels, "int32"),
                                                 "float32")) / (disc_weight_sum + EPS)
        return {"disc_loss": disc_loss, "disc_loss_sum": disc_loss_sum,
                "disc_accuracy": disc_accuracy, "disc_logits": disc_logits,
                "disc_preds": disc_preds}

    # ------------------------------------------------------------------------------ weights
    def weight_map(self):
        """Official TF1 name -> variable for everything the pre-training checkpoint holds."""
        names = self.discriminator.weight_map("electra")
        if self.electra_objective:
            names.update(self.generator.weight_map("generator", include_embeddings=False))
            names.update({f"discriminator_predictions/{k}": v
                          for k, v in self.disc_head.weight_map().items()})
        names.update({f"generator_predictions/{k}": v for k, v in self.mlm_head.weight_map().items()})
        return names

    def generator_weight_map(self):
        """The generator as a stand-alone masked LM (`ConvBertMaskedLM` names, scope `electra`)."""
        names = self.generator.weight_map("electra")  # shared embeddings + own projection/layers
        names.update({f"generator_predictions/{k}": v for k, v in self.mlm_head.weight_map().items()})
        return names

    def export_discriminator(self, directory, format="keras", include_head=None):
        """Write the discriminator so `ConvBertModel.from_pretrained(directory)` loads it.

        The `discriminator_predictions` head is added for the "keras" and "tf1" formats (loaders of
        the bare encoder ignore it); Hugging Face has no ConvBERT class for it.
        """
        from model import checkpoints
        if include_head is None:
            include_head = format != "hf"
        names = self.discriminator.weight_map("electra")
        if include_head and self.disc_head is not None:
            names.update({f"discriminator_predictions/{k}": v
                          for k, v in self.disc_head.weight_map().items()})
        return checkpoints.save_pretrained(_Exportable(self.config, names), directory, format=format)

    def export_generator(self, directory, format="keras"):
        """Write the generator + MLM head so `ConvBertMaskedLM.from_pretrained(directory)` loads it.

        The "hf" format raises for generators Hugging Face cannot express (the official small
        generator's 128-wide attention output).
        """
        from model import checkpoints
        return checkpoints.save_pretrained(_Exportable(self.gen_config, self.generator_weight_map()),
                                           directory, format=format)

    def get_config(self):
        return {"name": self.name, "disc_config": self.config.to_dict(),
                "gen_config": self.gen_config.to_dict(), "electra_objective": self.electra_objective,
                "mask_prob": self.mask_prob, "max_predictions_per_seq": self.max_predictions_per_seq,
                "gen_weight": self.gen_weight, "disc_weight": self.disc_weight,
                "temperature": self.temperature, "disallow_correct": self.disallow_correct,
                "seed": self.seed, "cls_id": self.cls_id, "sep_id": self.sep_id,
                "mask_id": self.mask_id, "conv_implementation": self.conv_implementation}
