"""TPU-ready graphs, checked on CPU (issue 21, item 4).

A TPU runs a training step only if XLA can compile it: static shapes, no host ops (strings,
py_function, prints), no IndexedSlices crossing the compiled boundary. On CPU, XLA compiles what
the training core marks `jit_compile=True` just as strictly (a must-compile function with an op
XLA cannot compile raises instead of falling back, see the first test). So here:

* pre-training (ELECTRA RTD) and fine-tuning (GLUE classification, SQuAD 2.0) are built through
  their real task code and the training core with `jit_compile=True`, at the official small and
  base widths (hidden, embedding, FFN, heads, head ratio, conv kernel, groups as released; one
  layer, a 128-token vocabulary, batch 2 x 16 tokens to keep it quick; fine-tuning at the small
  width), and train two steps with
  `core.fit()`: the traced step calls the replica's forward/backward as a must-compile (XLA)
  function that returns the gradient of every variable, it was traced once, the loss is finite
  and every parameter moved;
* the whole replica step as a TPU compiles it (what the strategy runs per replica: the global
  loss denominators, forward, backward, global-norm clipping, the AdamW update) lowers to HLO,
  i.e. holds no op XLA cannot compile: RTD at small width, and MLM pre-training and STS-B
  regression on medium-small (its grouped feed-forward) are checked this way only (their ops
  are those of the trained cases plus a head / a grouped einsum); so is SQuAD's padded
  prediction (beam search);
* the input pipelines have a static batch dimension (drop_remainder; padded prediction), so
  every step sees one shape.
"""
import dataclasses

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the training core runs on the TensorFlow backend", allow_module_level=True)

SEQ = 16
BATCH = 2
STEPS = 2
VOCAB = 128          # > the [CLS]/[SEP]/[MASK] ids 101-103 the masking uses by default
LAYERS = 1
# The released ConvBERT widths (model/config.py `_SIZES`; head_ratio 2, kernel 9 for all).
WIDTHS = {"small": dict(hidden_size=256, embedding_size=128, num_attention_heads=4,
                        intermediate_size=1024, num_groups=1),
          "medium-small": dict(hidden_size=384, embedding_size=128, num_attention_heads=8,
                               intermediate_size=1536, num_groups=2),
          "base": dict(hidden_size=768, embedding_size=768, num_attention_heads=12,
                       intermediate_size=3072, num_groups=1)}
SIZES = ("small", "base")


class RecordingStrategy(tf.distribute.OneDeviceStrategy):
    """The drivers' one-device strategy, remembering the replica function of each `run` (the
    function a TPUStrategy would hand to XLA whole)."""

    def __init__(self):
        super().__init__("/cpu:0")
        self.calls = []   # (replica function, its arguments as traced)

    def run(self, fn, args=(), kwargs=None, options=None):
        self.calls.append((fn, args))
        return super().run(fn, args=args, kwargs=kwargs, options=options)


# ------------------------------------------------------------------------------------ checks
def assert_real_width(config, size):
    for field, value in WIDTHS[size].items():
        assert getattr(config, field) == value, (size, field)
    assert (config.head_ratio, config.conv_kernel_size, config.conv_type) == (2, 9, "sdconv")
    assert config.num_hidden_layers == LAYERS and config.vocab_size == VOCAB


def assert_static_batches(dataset):
    """Every component of every batch has a fully known shape, batch dimension BATCH."""
    for name, spec in dataset.element_spec.items():
        assert spec.shape.is_fully_defined(), (name, spec)
        assert spec.shape[0] == BATCH, (name, spec)


def must_compile_calls(concrete):
    """[(FunctionDef, its op types)] of every call marked _XlaMustCompile in a traced function
    (its graph and every function of its library)."""
    graph_def = concrete.graph.as_graph_def()
    library = {f.signature.name: f for f in graph_def.library.function}

    def ops_of(name, seen):
        if name in seen or name not in library:
            return set()
        seen.add(name)
        found = set()
        for node in library[name].node_def:
            found.add(node.op)
            if "f" in node.attr and node.attr["f"].func.name:
                found |= ops_of(node.attr["f"].func.name, seen)
        return found

    calls = []
    for nodes in [graph_def.node] + [f.node_def for f in library.values()]:
        for node in nodes:
            if "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b:
                callee = library[node.attr["f"].func.name]
                calls.append((callee, ops_of(callee.signature.name, set())))
    return calls


def assert_static_replica_inputs(strategy):
    """Every tensor the replica functions were traced with has a fully known shape."""
    assert strategy.calls, "strategy.run was never called"
    for fn, args in strategy.calls:
        for value in tf.nest.flatten(args):
            assert value.shape.is_fully_defined(), (fn.__name__, value)


def lower_to_hlo(fn, *args):
    """HLO of `fn` as one XLA computation (fails on any op XLA cannot compile)."""
    hlo = tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")
    assert hlo.startswith("HloModule") and "ENTRY" in hlo and " dot(" in hlo
    return hlo


def lower_replica_step(strategy, batch, *args):
    """HLO of the first replica function the strategy ran (the core's whole replica step: what
    a TPU compiles), run by the strategy on a real batch (and `args`)."""
    assert_static_replica_inputs(strategy)
    replica_fn = strategy.calls[0][0]
    return lower_to_hlo(lambda *inputs: strategy.run(replica_fn, args=inputs), batch, *args)


def lower_train_step(core, strategy, batch):
    """The whole replica train step lowers to HLO, every parameter and both its Adam moments
    updated in place inside it (input/output aliases of the variables)."""
    hlo = lower_replica_step(strategy, batch, tf.constant(0, tf.int64))
    header = hlo.split("\n", 1)[0]
    assert header.count("may-alias") >= 3 * len(core.variables), header[:300]
    return hlo


def trace_only(task, core, strategy):
    """Trace the core's step (no run) and lower its whole replica step to HLO."""
    assert core.jit_compile
    assert_static_batches(task.dataset(0))
    concrete = core.train_step().get_concrete_function(core._iterator(0))
    assert len(must_compile_calls(concrete)) == 1
    return lower_train_step(core, strategy, next(iter(task.dataset(0))))


def train_under_xla(task, core, strategy):
    """Two steps of `core.fit()` with jit_compile: checks the step ran under XLA, the loss is
    finite and the parameters changed; returns the run summary."""
    assert core.jit_compile
    assert_static_batches(task.dataset(0))
    before = {name: np.array(v) for name, v in core.named_variables.items()}
    summary = core.fit()
    assert summary["jit_compile"] is True and summary["global_step"] == STEPS
    losses = [h["loss"] for h in summary["history"]]
    assert len(losses) == STEPS and np.all(np.isfinite(losses)), losses
    assert np.isfinite(summary["history"][-1]["grad_norm"])
    unchanged = [name for name, v in core.named_variables.items()
                 if np.array_equal(before[name], np.array(v))]
    assert not unchanged, unchanged[:5]
    assert_static_replica_inputs(strategy)

    # The step that ran: traced once, and its forward/backward is one must-compile (XLA)
    # function that returns a gradient for every variable.
    step_fn = core.train_step()
    assert step_fn.experimental_get_tracing_count() == 1
    concrete = step_fn.get_concrete_function(core._iterator(0))
    assert step_fn.experimental_get_tracing_count() == 1   # the graph that ran, not a new one
    calls = must_compile_calls(concrete)
    assert len(calls) == 1, [f.signature.name for f, _ in calls]
    function, ops = calls[0]
    assert len(function.signature.output_arg) >= len(core.variables)
    assert {"MatMul", "BatchMatMulV2"} & ops and "Softmax" in ops, sorted(ops)
    return summary


# ------------------------------------------------------------------------------------ tests
def test_must_compile_rejects_host_ops():
    """The check has teeth: on this machine a must-compile function with a host op fails, so a
    step that ran under jit_compile was compiled by XLA (it did not fall back to TF kernels)."""
    host = tf.function(lambda x: tf.py_function(lambda v: v + 1, [x], tf.float32),
                       jit_compile=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="compile"):
        host(tf.constant(1.0))
    assert must_compile_calls(tf.function(lambda x: host(x)).get_concrete_function(
        tf.TensorSpec([], tf.float32)))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Pre-training shards: 7 examples of SEQ tokens (batches of 2 leave a remainder)."""
    from data.shard_writer import serialize_example
    path = tmp_path_factory.mktemp("xla_shards") / "pretrain_data.tfrecord-0-of-1"
    rng = np.random.default_rng(0)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for _ in range(7):
            n = int(rng.integers(6, SEQ + 1))
            first = int(rng.integers(2, n - 2))
            ids = [101] + list(rng.integers(110, VOCAB, n - 2)) + [102] + [0] * (SEQ - n)
            ids[first] = 102
            segments = [0] * (first + 1) + [1] * (n - first - 1) + [0] * (SEQ - n)
            writer.write(serialize_example(ids, [1] * n + [0] * (SEQ - n), segments))
    return str(path)


def pretraining_hparams(size, electra_objective=True):
    from pretrain.hparams import make_hparams
    return make_hparams(size, overrides=dict(
        model_hparam_overrides={"num_hidden_layers": LAYERS}, vocab_size=VOCAB,
        electra_objective=electra_objective, train_batch_size=BATCH, max_seq_length=SEQ,
        num_train_steps=STEPS, num_warmup_steps=0, jit_compile=True, shuffle_buffer=4,
        log_every_n_steps=1, save_checkpoints_steps=STEPS))


def test_input_pipelines_have_static_batches(shards):
    """drop_remainder everywhere: 7 pre-training examples and 5 fine-tuning examples in batches
    of 2 still give only [2, ...] batches (training from the start and after a resume skip, and
    the pre-training eval pass)."""
    from data.pretraining_input import pretraining_dataset
    from finetune.finetuner import FinetuneTask
    from pretrain.task import PretrainingTask
    task = PretrainingTask(pretraining_hparams("small"), shards, VOCAB)
    for skip in (0, 3):
        dataset = task.dataset(skip)
        assert_static_batches(dataset)
        assert set(dataset.element_spec) == {"input_ids", "input_mask", "segment_ids",
                                             "example_id"}
    assert_static_batches(pretraining_dataset(shards, BATCH, SEQ, is_training=False,
                                              check_files=False))
    finetune = FinetuneTask(None, None, None, None, {}, "test")
    finetune.features = {"input_ids": np.zeros((5, SEQ), np.int32),
                         "label_ids": np.zeros(5, np.float32)}
    finetune.batch_size = BATCH
    for skip in (0, 3):
        assert_static_batches(finetune.dataset(skip))


def pretraining_core(size, shards, electra_objective=True):
    from pretrain.task import make_core
    strategy = RecordingStrategy()
    task, core = make_core(pretraining_hparams(size, electra_objective), shards, strategy, VOCAB,
                           log=lambda line: None)
    assert_real_width(task.disc_config, size)
    return task, core, strategy


@pytest.mark.parametrize("size", SIZES)
def test_rtd_pretraining_step_compiles_with_xla(size, shards):
    task, core, strategy = pretraining_core(size, shards)
    summary = train_under_xla(task, core, strategy)
    record = summary["history"][-1]
    assert record["gen_loss"] > 0 and record["disc_loss"] > 0
    if size == "small":   # the op set does not depend on the width
        lower_train_step(core, strategy, next(iter(task.dataset(0))))


def test_mlm_pretraining_step_lowers_to_hlo(shards):
    """BERT's MLM objective (electra_objective=False): the full-size model as the generator."""
    trace_only(*pretraining_core("small", shards, electra_objective=False))


# ------------------------------------------------------------------------------------ fine-tuning
def finetuning_core(size, task_name, num_examples=5):
    """The fine-tuning task (finetune/trainer.py) of `task_name` on synthetic features, with the
    trainer's own core settings but jit_compile on."""
    from model import ConvBertConfig, ConvBertModel
    from finetune.hparams import FinetuneHParams
    from finetune.hparams import train_settings
    from finetune.trainer import Trainer
    from training import TrainingCore
    rng = np.random.default_rng(1)
    n = num_examples
    ids = rng.integers(110, VOCAB, (n, SEQ)).astype(np.int32)
    ids[:, 0], ids[:, 5], ids[:, -1] = 101, 102, 102
    features = {"input_ids": ids, "input_mask": np.ones((n, SEQ), np.int32),
                "segment_ids": (np.arange(SEQ) > 5).astype(np.int32)[None].repeat(n, 0)}
    hp = FinetuneHParams(model_size=size, train_batch_size=BATCH).for_task(task_name)
    strategy = RecordingStrategy()
    keras.utils.set_random_seed(0)
    with strategy.scope():
        config = ConvBertConfig.from_size(size, num_hidden_layers=LAYERS, vocab_size=VOCAB)
        assert_real_width(config, size)
        encoder = ConvBertModel(config)
        if task_name == "squad":
            from finetune import squad_task
            head = squad_task.make_head(hp, config, "2.0")
            forward, loss, _ = squad_task.model_fns(hp, "2.0")
            start = rng.integers(6, SEQ - 3, n).astype(np.int32)
            features.update(start_positions=start, end_positions=start + 2,
                            is_impossible=np.zeros(n, np.int32))
        else:
            from finetune.classification_head import ClassificationHead
            from finetune.glue.tasks import get_task
            from finetune.glue_task import glue_model_fns
            spec = get_task(task_name)
            head = ClassificationHead(spec.num_labels, spec.is_regression, dropout_rate=0.1,
                                      initializer_range=config.initializer_range,
                                      name=f"{task_name}_head")
            head.build((None, None, config.hidden_size))
            forward, loss = glue_model_fns(task_name)
            features["label_ids"] = (rng.uniform(0, 5, n).astype(np.float32)
                                     if spec.is_regression
                                     else rng.integers(0, spec.num_labels, n).astype(np.int32))
        output_keys = ("logits",)
        if task_name == "squad":
            from finetune.squad_task import BEAM_KEYS
            output_keys = tuple(BEAM_KEYS) + ("answerable_logit",)
        trainer = Trainer(encoder, head, forward, loss, hp, task_name, output_keys,
                          log=lambda line: None)
    task = trainer.task
    task.features, task.batch_size, task.seed = features, BATCH, 0
    settings = dataclasses.replace(train_settings(hp, LAYERS, STEPS), jit_compile=True,
                                   log_every=1)
    core = TrainingCore(task, settings, strategy, log=lambda line: None).build()
    return trainer, core, strategy


# At the small width only: the base encoder (no embedding projection) is compiled by the RTD test
# above, and a head's ops are the same at every width.
@pytest.mark.parametrize("size", ["small"])
@pytest.mark.parametrize("task_name", ["mrpc", "squad"])
def test_finetuning_step_compiles_with_xla(size, task_name):
    """GLUE classification (MRPC) and SQuAD 2.0 (joint end prediction, answerability)."""
    trainer, core, strategy = finetuning_core(size, task_name)
    train_under_xla(trainer.task, core, strategy)
    if (size, task_name) == ("small", "squad"):
        check_padded_prediction(trainer, strategy)


def check_padded_prediction(trainer, strategy):
    """Padded eval: 3 examples in batches of 2 are padded to 2 full batches, so the predict step
    sees one static shape; SQuAD's beam search (top-k starts, top-k ends per start) lowers to
    HLO as the replica computation a TPU would compile."""
    from finetune.squad_task import BEAM_KEYS
    features = {k: v[:3] for k, v in trainer.task.features.items()}
    keys = list(BEAM_KEYS) + ["answerable_logit"]
    strategy.calls.clear()
    with strategy.scope():
        out = trainer.predict(features, batch_size=BATCH)
    assert {k: len(v) for k, v in out.items()} == {k: 3 for k in keys}
    assert np.all(np.isfinite(out["start_top_log_probs"]))
    assert len(strategy.calls) == 1   # one trace: both batches have the one static shape
    assert_static_replica_inputs(strategy)
    lower_replica_step(strategy, {k: tf.constant(v[:BATCH]) for k, v in features.items()
                                  if k in ("input_ids", "input_mask", "segment_ids")})


def test_regression_finetuning_step_lowers_to_hlo():
    """STS-B's regression head, on medium-small: the released size with a grouped feed-forward
    (num_groups 2). The whole fine-tuning replica step (layer-wise learning rates, clipping, the
    AdamW update) lowers to HLO."""
    trainer, core, strategy = finetuning_core("medium-small", "sts")
    trace_only(trainer.task, core, strategy)
