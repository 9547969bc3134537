"""ELECTRA-style pre-training objective of ConvBERT (backend-agnostic, keras.ops only).

    from pretrain import ElectraPretrainer, generator_config, mask_inputs
"""
import sys

if sys.argv[:1] == ["-m"]:     # `python -m pretrain.<command>` is importing this package first
    from base.command import quiet_tensorflow   # (Python sets argv[0] to "-m" while it does)
    quiet_tensorflow()   # no TensorFlow start-up lines (CONVBERT_TF_LOGS=1 shows them)

from pretrain.electra_pretrainer import ElectraPretrainer  # noqa: E402
from pretrain.generator_config import (DEFAULT_GENERATOR_HIDDEN_SIZE,  # noqa: E402
                                       default_generator_hidden_size, generator_config)
from pretrain.masking import (CLS_ID, MASK_ID, SEP_ID,  # noqa: E402
                              default_max_predictions_per_seq, gather_positions, mask_inputs,
                              num_to_predict, scatter_update)
from pretrain.sampling import example_keys, sample_from_softmax  # noqa: E402

__all__ = ["ElectraPretrainer", "generator_config", "default_generator_hidden_size",
           "DEFAULT_GENERATOR_HIDDEN_SIZE", "mask_inputs", "num_to_predict", "scatter_update",
           "gather_positions", "default_max_predictions_per_seq", "example_keys",
           "sample_from_softmax", "CLS_ID", "SEP_ID", "MASK_ID"]
