"""ELECTRA QA head (finetune.qa.qa_head): shapes, masking, maths, loss and gradients, on random
tensors. Runs on the active Keras backend; one test re-runs the checks under JAX."""
import math
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from finetune.qa.qa_head import ElectraQAHead, answer_mask, qa_loss
from tests.conftest import REPO_ROOT

B, L, H, K, D = 3, 24, 16, 5, 12


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(B, L, H)).astype("float32")
    input_mask = np.ones((B, L), "int32")
    segment_ids = np.zeros((B, L), "int32")
    # example 0: question 6 tokens, context 6..20, padding after 21
    segment_ids[0, 6:21] = 1
    input_mask[0, 21:] = 0
    # example 1: full length
    segment_ids[1, 4:] = 1
    # example 2: question 9 tokens, context 9..17
    segment_ids[2, 9:18] = 1
    input_mask[2, 18:] = 0
    labels = {"start_positions": np.array([8, 0, 10], "int32"),
              "end_positions": np.array([11, 0, 12], "int32"),
              "is_impossible": np.array([0, 1, 0], "int32")}
    return h, input_mask, segment_ids, labels


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _dense(layer, x):
    return x @ _np(layer.kernel) + _np(layer.bias)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_answer_mask():
    _, im, seg, _ = _inputs()
    m = _np(answer_mask(im, seg))
    want = (im * seg).astype("float32")
    want[:, 0] = 1.0
    np.testing.assert_array_equal(m, want)


def test_training_outputs_masking_and_reference_maths():
    h, im, seg, labels = _inputs()
    head = ElectraQAHead(beam_size=K, qa_hidden_size=D)
    out = head(h, im, seg, start_positions=labels["start_positions"], training=True)
    assert set(out) == {"start_logits", "end_logits", "answerable_logit"}
    assert tuple(out["start_logits"].shape) == (B, L)
    assert tuple(out["end_logits"].shape) == (B, L)
    assert tuple(out["answerable_logit"].shape) == (B,)
    mask = _np(answer_mask(im, seg))
    penalty = (mask - 1.0) * 1000.0
    # start logits: dense(1) + mask penalty
    start = _dense(head.start_dense, h)[..., 0] + penalty
    np.testing.assert_allclose(_np(out["start_logits"]), start, rtol=1e-4, atol=1e-3)
    assert (_np(out["start_logits"])[mask == 0] < -500).all()
    # end logits: concat(h[gold start], h_j) -> dense(D, gelu) -> dense(1) + penalty
    s_feat = h[np.arange(B), labels["start_positions"]]
    cat = np.concatenate([np.repeat(s_feat[:, None], L, 1), h], -1)
    end = _dense(head.end_dense, _gelu(_dense(head.qa_hidden, cat)))[..., 0] + penalty
    np.testing.assert_allclose(_np(out["end_logits"]), end, rtol=1e-4, atol=1e-3)
    # answerability: concat(h[CLS], softmax(start)-pooled h) -> dense(D, gelu) -> dense(1)
    p = np.exp(_log_softmax(start))
    rep = np.concatenate([h[:, 0], np.einsum("bl,blh->bh", p, h)], -1)
    ans = _dense(head.answerable_dense, _gelu(_dense(head.answerable_hidden, rep)))[..., 0]
    np.testing.assert_allclose(_np(out["answerable_logit"]), ans, rtol=1e-4, atol=1e-4)
    # loss = mean((CE_start + CE_end) / 2 + 0.5 * BCE)
    ce = lambda logits, pos: -_log_softmax(logits)[np.arange(B), pos]  # noqa: E731
    z = labels["is_impossible"]
    bce = np.maximum(ans, 0) - ans * z + np.log1p(np.exp(-np.abs(ans)))
    want = np.mean((ce(start, labels["start_positions"]) + ce(end, labels["end_positions"])) / 2
                   + 0.5 * bce)
    loss = float(_np(qa_loss(out, labels)))
    assert np.isfinite(loss) and loss == pytest.approx(want, rel=1e-4)
    per_ex = _np(qa_loss(out, labels, reduction="none"))
    assert per_ex.shape == (B,) and per_ex.mean() == pytest.approx(loss, rel=1e-5)


def test_inference_beam_consistent_with_teacher_forcing():
    h, im, seg, labels = _inputs(1)
    head = ElectraQAHead(beam_size=K, qa_hidden_size=D)
    out = head(h, im, seg, training=False)
    assert "end_logits" not in out
    s_idx, s_lp = _np(out["start_top_index"]), _np(out["start_top_log_probs"])
    e_idx, e_lp = _np(out["end_top_index"]), _np(out["end_top_log_probs"])
    assert s_idx.shape == (B, K) and e_idx.shape == (B, K, K) and e_lp.shape == (B, K, K)
    mask = _np(answer_mask(im, seg))
    for b in range(B):
        assert mask[b, s_idx[b]].all() and mask[b][e_idx[b]].all()  # beams stay in the mask
    assert (np.diff(s_lp, axis=1) <= 1e-6).all() and (np.diff(e_lp, axis=2) <= 1e-6).all()
    # start log-probs are the top-k of log_softmax(start_logits)
    ls = _log_softmax(_np(out["start_logits"]))
    np.testing.assert_allclose(np.sort(ls, 1)[:, ::-1][:, :K], s_lp, rtol=1e-4, atol=1e-4)
    # the beam's end scores for start k equal teacher forcing with start_positions = that start
    for k in (0, K - 1):
        tf_out = head(h, im, seg, start_positions=s_idx[:, k], training=False, return_beam=False)
        le = _log_softmax(_np(tf_out["end_logits"]))
        np.testing.assert_allclose(np.take_along_axis(le, e_idx[:, k], 1), e_lp[:, k],
                                   rtol=1e-4, atol=1e-4)


def test_plain_head_and_options():
    h, im, seg, labels = _inputs(2)
    head = ElectraQAHead(joint_prediction=False, answerable_classifier=False)
    out = head(h, im, seg, training=False)
    assert set(out) == {"start_logits", "end_logits"}
    mask = _np(answer_mask(im, seg))
    assert (_np(out["end_logits"])[mask == 0] < -500).all()
    loss = _np(qa_loss(out, labels))
    assert np.isfinite(loss)
    head2 = ElectraQAHead(beam_size=K, answerable_uses_start_logits=False, qa_hidden_size=D)
    out2 = head2(h, im, seg, start_positions=labels["start_positions"], training=True)
    assert tuple(out2["answerable_logit"].shape) == (B,)
    with pytest.raises(ValueError, match="start_positions"):
        head2(h, im, seg, training=True)
    # beam wider than the sequence is clipped to L
    head3 = ElectraQAHead(beam_size=L + 10, qa_hidden_size=D)
    out3 = head3(h, im, seg, training=False)
    assert tuple(out3["end_top_index"].shape) == (B, L, L)
    cfg = head2.get_config()
    clone = ElectraQAHead.from_config(cfg)
    assert clone.get_config() == cfg
    built = head.weight_map()
    assert set(built) == {"dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias"}
    assert set(head2.weight_map()) >= {"qa_hidden/kernel", "dense_2/kernel"}


def _grads(head, h, im, seg, labels):
    """Gradient of qa_loss w.r.t. the head weights and the encoder output, on any backend."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf
        x = tf.Variable(h)
        with tf.GradientTape() as tape:
            out = head(x, im, seg, start_positions=labels["start_positions"], training=True)
            loss = qa_loss(out, labels)
        grads = tape.gradient(loss, head.trainable_variables + [x])
        return [g.numpy() for g in grads]
    if backend == "jax":
        import jax

        def f(tv, x):
            out, _ = head.stateless_call(tv, [], x, im, seg,
                                         start_positions=labels["start_positions"], training=True)
            return qa_loss(out, labels)
        tv = [v.value for v in head.trainable_variables]
        g_tv, g_x = jax.jit(jax.grad(f, argnums=(0, 1)))(tv, h)
        return [np.asarray(g) for g in g_tv] + [np.asarray(g_x)]
    pytest.skip(f"no gradient helper for backend {backend}")


def test_gradients_flow_to_every_weight_and_input():
    h, im, seg, labels = _inputs(3)
    head = ElectraQAHead(beam_size=K, qa_hidden_size=D)
    head(h, im, seg, start_positions=labels["start_positions"], training=True)  # build
    grads = _grads(head, h, im, seg, labels)
    assert len(grads) == len(head.trainable_variables) + 1 == 11
    for v, g in zip(head.trainable_variables + [None], grads):
        assert np.isfinite(g).all()
        if v is not None and v.path.endswith(("start_logits/bias", "end_logits/bias")):
            # softmax is shift invariant: the bias of a position-logit layer gets no gradient
            assert np.abs(g).max() < 1e-6, v.path
        else:
            assert np.abs(g).sum() > 0, getattr(v, "path", "sequence_output")
    # padding positions get no gradient through the encoder output (masked everywhere)
    g_h = grads[-1]
    assert np.abs(g_h[0, 21:]).max() < 1e-6


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="already running under JAX")
def test_same_checks_under_jax_backend():
    pytest.importorskip("jax")
    script = textwrap.dedent("""
        import keras, numpy as np
        assert keras.backend.backend() == "jax"
        from tests.finetune import test_squad_qa_head as t
        t.test_training_outputs_masking_and_reference_maths()
        t.test_inference_beam_consistent_with_teacher_forcing()
        t.test_gradients_flow_to_every_weight_and_input()
        print("JAX-OK")
    """)
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "JAX-OK" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="uses tf.GradientTape")
def test_pipeline_features_head_postprocess_eval(tmp_path):
    """features -> (toy encoder + head) -> a few training steps -> beam outputs ->
    write_predictions -> squad_eval: the pieces fit together and the loss goes down."""
    import tensorflow as tf

    from finetune.qa import postprocess, squad_data, squad_eval
    from tests.finetune.test_squad_data import FakeTokenizer, _long_paragraph, _squad

    data = _squad([_long_paragraph(44)])
    tok = FakeTokenizer()
    examples = squad_data.read_squad_examples(data, is_training=True)
    feats = squad_data.convert_examples_to_features(examples, tok, max_seq_length=24,
                                                    doc_stride=6, max_query_length=5,
                                                    is_training=True)
    batch = feats.model_inputs()
    keras.utils.set_random_seed(0)
    emb = keras.layers.Embedding(len(tok.vocab) + 8, 16)
    pos = keras.layers.Embedding(24, 16)
    head = ElectraQAHead(beam_size=4, qa_hidden_size=16)
    opt = keras.optimizers.Adam(1e-2)

    def encode(ids):
        return emb(ids) + pos(np.arange(24))[None]

    losses = []
    for _ in range(30):
        with tf.GradientTape() as tape:
            out = head(encode(batch["input_ids"]), batch["input_mask"], batch["segment_ids"],
                       start_positions=batch["start_positions"], training=True)
            loss = qa_loss(out, batch)
        variables = emb.trainable_variables + pos.trainable_variables + head.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    out = head(encode(batch["input_ids"]), batch["input_mask"], batch["segment_ids"],
               training=False)
    results = {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
    paths = postprocess.write_predictions(examples, feats, results, str(tmp_path),
                                          version_2_with_negative=True, n_best_size=5)
    got = squad_eval.evaluate_files("2.0", _write(tmp_path, data), paths["predictions"],
                                    paths["null_odds"], -2.75)
    assert got["total"] == len(examples) and 0.0 <= got["exact"] <= 100.0


def _write(tmp_path, obj):
    import json
    p = tmp_path / "data.json"
    p.write_text(json.dumps(obj))
    return str(p)
