"""The same weights give the same outputs on the TensorFlow and JAX backends (≤ 1e-5)."""
import os
import subprocess
import sys

import numpy as np

from model import ConvBertConfig, ConvBertMaskedLM
from tests.conftest import REPO_ROOT, tensorflow_pass_only
from tests.model.test_checkpoints import TINY, tiny_inputs

RUN_ON_BACKEND = """
import sys, numpy as np
from model import ConvBertMaskedLM
model = ConvBertMaskedLM.from_pretrained(sys.argv[1])
x = dict(np.load(sys.argv[2]))
out = model.convbert(x, output_hidden_states=True, output_attentions=True)
import keras
np.savez(sys.argv[3], logits=keras.ops.convert_to_numpy(model(x)),
         probs=keras.ops.convert_to_numpy(out["attention_probs"][-1]),
         **{f"h{i}": keras.ops.convert_to_numpy(h) for i, h in enumerate(out["hidden_states"])})
print(keras.backend.backend())
"""


@tensorflow_pass_only      # it runs both backends itself
def test_tensorflow_and_jax_outputs_are_identical(tmp_path):
    for conv_type, groups in (("sdconv", 2), ("lightweight", 1)):
        model = ConvBertMaskedLM(ConvBertConfig(**TINY, conv_type=conv_type, num_groups=groups))
        model.save_pretrained(tmp_path / conv_type)
        np.savez(tmp_path / "inputs.npz", **tiny_inputs(batch=3, seq=20))
        outputs = {}
        for backend in ("tensorflow", "jax"):
            env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(REPO_ROOT),
                   "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
            out_file = tmp_path / f"{conv_type}_{backend}.npz"
            done = subprocess.run([sys.executable, "-c", RUN_ON_BACKEND, str(tmp_path / conv_type),
                                   str(tmp_path / "inputs.npz"), str(out_file)],
                                  env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            assert done.stdout.strip().splitlines()[-1] == backend
            outputs[backend] = dict(np.load(out_file))
        for key, tf_value in outputs["tensorflow"].items():
            diff = np.max(np.abs(tf_value - outputs["jax"][key]))
            assert diff <= 1e-5, f"{conv_type} {key}: TF vs JAX max|diff| {diff:.3g}"
