"""ELECTRA-style pre-training objective of ConvBERT (backend-agnostic, keras.ops only).

    from pretrain import ElectraPretrainer, generator_config, mask_inputs
"""
from pretrain.electra_pretrainer import ElectraPretrainer
from pretrain.generator_config import (DEFAULT_GENERATOR_HIDDEN_SIZE, default_generator_hidden_size,
                                       generator_config)
from pretrain.masking import (CLS_ID, MASK_ID, SEP_ID, default_max_predictions_per_seq,
                              gather_positions, mask_inputs, num_to_predict, scatter_update)
from pretrain.sampling import example_keys, sample_from_softmax

__all__ = ["ElectraPretrainer", "generator_config", "default_generator_hidden_size",
           "DEFAULT_GENERATOR_HIDDEN_SIZE", "mask_inputs", "num_to_predict", "scatter_update",
           "gather_positions", "default_max_predictions_per_seq", "example_keys",
           "sample_from_softmax", "CLS_ID", "SEP_ID", "MASK_ID"]
