"""The training core (training/) on a toy task: a linear regression small enough to train in
milliseconds, so the loop, resume, keep-N, the non-finite guard, progress lines, TensorBoard
scalars and bucket paths (TensorFlow's in-memory ram:// filesystem) are checked in seconds.
The objectives themselves are checked end to end in tests/pretrain and tests/finetune."""
import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the training core runs on the TensorFlow backend", allow_module_level=True)

from training import Task, TrainingCore, TrainingError, TrainSettings  # noqa: E402
from training.progress import StepRate, format_duration  # noqa: E402
from training.state import write_json_atomic  # noqa: E402
from training.summaries import ScalarWriter  # noqa: E402

FEATURES = 4


class LinearTask(Task):
    """y = x . w_true, MSE; metric: the summed absolute error (to check window sums)."""
    label = "toy"
    scalar_prefix = "train/"

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(64, FEATURES)).astype("float32")
        self.y = self.x @ np.arange(1, FEATURES + 1, dtype="float32")
        self.exported = []

    def build(self):
        self.dense = keras.layers.Dense(1, name="dense")
        self.dense.build((None, FEATURES))
        return tf.train.Checkpoint(dense=self.dense)

    def named_variables(self):
        return {"task_specific/toy/dense/kernel": self.dense.kernel,
                "task_specific/toy/dense/bias": self.dense.bias}

    def dataset(self, skip_batches):
        ds = tf.data.Dataset.from_tensor_slices({"x": self.x, "y": self.y}).repeat().batch(8)
        return ds.skip(skip_batches)

    def compute(self, batch, step, denominators):
        pred = tf.squeeze(self.dense(batch["x"]), -1)
        err = pred - batch["y"]
        return tf.reduce_mean(err ** 2), {"abs_error": tf.reduce_sum(tf.abs(err))}

    def export(self, model_dir):
        self.exported.append(model_dir)


def settings(**kw):
    base = dict(total_steps=12, batch_size=8, learning_rate=0.1, warmup_steps=0,
                weight_decay_rate=0.0, clip_norm=1.0, log_every=4, save_every=4,
                keep_checkpoints=2)
    base.update(kw)
    return TrainSettings(**base)


def new_core(log, **kw):
    keras.utils.set_random_seed(1)
    task = LinearTask()
    return task, TrainingCore(task, settings(**kw), log=log.append).build()


def weights(task):
    return [np.asarray(v) for v in task.named_variables().values()]


def test_fit_trains_logs_and_summarizes(tmp_path):
    lines = []
    task, core = new_core(lines)
    summary = core.fit(checkpoint_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "tb"),
                       export_dir=str(tmp_path), summary_path=str(tmp_path / "summary.json"),
                       summary_extra={"name": "toy"})
    assert summary["global_step"] == 12 and summary["steps_this_run"] == 12
    history = summary["history"]
    assert [h["step"] for h in history] == [4, 8, 12]
    assert history[-1]["loss"] < history[0]["loss"]
    # the window's metrics are sums over its steps; the default summary averages them per step
    assert history[0]["abs_error"] > 0 and np.isfinite(history[0]["grad_norm"])
    assert json.loads((tmp_path / "summary.json").read_text())["name"] == "toy"
    progress = [line for line in lines if "step 12/12" in line][0]
    assert progress.startswith("toy: step 12/12 (100.0%) loss ")
    for word in ("| lr ", "seq/s", "elapsed", "ETA"):
        assert word in progress
    # keep-N checkpoints, an export per save
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith("ckpt-12")
    assert len(tf.io.gfile.glob(str(tmp_path / "ckpt" / "ckpt-*.index"))) == 2
    assert task.exported == [str(tmp_path)] * 3
    tags = set()
    for path in tf.io.gfile.glob(str(tmp_path / "tb" / "events.out.tfevents*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags.update(v.tag for v in event.summary.value)
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "train/abs_error",
            "train/sequences_per_second"} <= tags


def test_resume_continues_exactly(tmp_path):
    """6 steps, a new process-like core restores and finishes: same weights as 12 in one go."""
    whole_task, whole = new_core([])
    whole.fit()
    lines = []
    first_task, first = new_core(lines, total_steps=12, save_every=6)
    first.settings.total_steps = 6
    first.fit(checkpoint_dir=str(tmp_path))
    task, core = new_core(lines, save_every=6)
    restored = core.restore(str(tmp_path))
    assert restored.endswith("ckpt-6") and int(core.step.numpy()) == 6
    assert int(core.examples.numpy()) == 48
    summary = core.fit(checkpoint_dir=str(tmp_path), last_checkpoint=restored)
    assert summary["resumed_from_step"] == 6 and summary["global_step"] == 12
    for a, b in zip(weights(task), weights(whole_task)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("steps_per_loop", [4, 3])
def test_steps_per_loop_gives_the_same_parameters(tmp_path, steps_per_loop):
    """k steps inside one compiled call (a tf.while): after 2k steps (and after 12 steps with
    logs and saves every 4) the parameters, logs and checkpoints equal those of k = 1."""
    results = {}
    for k in (1, steps_per_loop):
        lines = []
        task, core = new_core(lines, steps_per_loop=k, total_steps=2 * steps_per_loop,
                              log_every=2 * steps_per_loop, save_every=None)
        step_fn, calls = core.train_step(), []
        core._train_step = lambda *args: calls.append(args) or step_fn(*args)
        core.fit()
        results[k] = weights(task)
        assert len(calls) == (2 * steps_per_loop if k == 1 else 2)   # 2 calls of k steps
    for a, b in zip(results[1], results[steps_per_loop]):
        np.testing.assert_array_equal(a, b)

    runs = {}
    for k in (1, steps_per_loop):
        lines = []
        task, core = new_core(lines, steps_per_loop=k)
        summary = core.fit(checkpoint_dir=str(tmp_path / f"k{k}"))
        runs[k] = (weights(task), [h["step"] for h in summary["history"]],
                   [round(h["loss"], 5) for h in summary["history"]],
                   sorted(p.split("/")[-1] for p in tf.io.gfile.glob(
                       str(tmp_path / f"k{k}" / "ckpt-*.index"))))
    (w1, *rest1), (wk, *restk) = runs[1], runs[steps_per_loop]
    for a, b in zip(w1, wk):
        np.testing.assert_array_equal(a, b)
    assert rest1 == restk and rest1[0] == [4, 8, 12]


def test_non_finite_loss_stops_before_saving(tmp_path):
    task, core = new_core([])
    core.fit(checkpoint_dir=str(tmp_path))
    before = (tmp_path / "checkpoint").read_bytes()
    task, core = new_core([], total_steps=20, learning_rate=1e30, clip_norm=None)
    task.y[:] = np.inf
    restored = core.restore(str(tmp_path))
    with pytest.raises(TrainingError) as error:
        core.fit(checkpoint_dir=str(tmp_path), last_checkpoint=restored)
    message = str(error.value)
    assert message.startswith("toy: non-finite loss") and "ckpt-12" in message
    assert "\n" not in message
    assert (tmp_path / "checkpoint").read_bytes() == before


def test_restore_of_another_shape_is_one_line_error(tmp_path):
    task, core = new_core([])
    core.fit(checkpoint_dir=str(tmp_path))

    class Wider(LinearTask):
        def build(self):
            self.dense = keras.layers.Dense(2, name="dense")
            self.dense.build((None, FEATURES))
            return tf.train.Checkpoint(dense=self.dense)

    other = TrainingCore(Wider(), settings()).build()
    with pytest.raises(TrainingError, match="does not match this configuration"):
        other.restore(str(tmp_path))


def test_reset_zeroes_optimizer_and_counters():
    task, core = new_core([])
    core.fit()
    assert int(core.optimizer.iterations.numpy()) == 12
    step_fn = core.train_step()
    core.reset()
    assert int(core.optimizer.iterations.numpy()) == 0 and int(core.step.numpy()) == 0
    assert all(not np.any(np.asarray(v)) for v in core.optimizer.variables
               if v.name != "learning_rate")
    core.fit()
    assert core.train_step() is step_fn   # the traced step is reused


def test_bucket_paths_ram_filesystem():
    """Checkpoints, summary, TensorBoard and atomic JSON on a non-local filesystem."""
    root = "ram://training_core_test"
    task, core = new_core([])
    core.fit(checkpoint_dir=f"{root}/ckpt", log_dir=f"{root}/tb",
             summary_path=f"{root}/summary.json")
    assert tf.train.latest_checkpoint(f"{root}/ckpt").endswith("ckpt-12")
    with tf.io.gfile.GFile(f"{root}/summary.json") as f:
        assert json.load(f)["global_step"] == 12
    assert tf.io.gfile.glob(f"{root}/tb/events.out.tfevents*")
    write_json_atomic({"a": 1}, f"{root}/sub/x.json")
    with tf.io.gfile.GFile(f"{root}/sub/x.json") as f:
        assert json.load(f) == {"a": 1}
    assert tf.io.gfile.listdir(f"{root}/sub") == ["x.json"]   # no temporary file left


def test_scalar_writer_skips_non_numbers(tmp_path):
    writer = ScalarWriter(str(tmp_path))
    writer.write({"a": 1.0, "b": float("nan"), "c": "text", "d": True}, 3, prefix="p/")
    writer.close()
    tags = []
    for path in tf.io.gfile.glob(str(tmp_path / "events*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            tags += [(v.tag, event.step) for v in event.summary.value]
    assert tags == [("p/a", 3)]
    ScalarWriter(None).write({"a": 1.0}, 1)   # a non-chief writer writes nothing


def test_format_duration_and_step_rate():
    assert format_duration(0) == "0:00:00"
    assert format_duration(3725.4) == "1:02:05"
    assert format_duration(-5) == "0:00:00"
    assert format_duration(float("inf")) == "?" and format_duration(None) == "?"
    now = [100.0]
    rate = StepRate(0, 10, clock=lambda: now[0])
    now[0] = 105.0            # the first step traces: 5 s, left out of the rate
    rate.step_done(1)
    now[0] = 107.0            # then 2 steps in 2 s
    assert rate.steps_per_second(3) == pytest.approx(1.0)
    assert rate.eta(3) == pytest.approx(7.0)
    assert rate.first_step_seconds == pytest.approx(5.0)


def test_schedule_steps_runs_the_first_steps_of_a_longer_schedule():
    """A short run on a long run's schedule (the GPU recipe: ELECTRA-small's 10,000-step warm-up
    of a 1M-step schedule, stopped after a few hundred steps): the TensorFlow core's learning
    rate climbs the long warm-up and the run stops at its own total_steps."""
    lines = []
    _, core = new_core(lines, total_steps=8, warmup_steps=100, schedule_steps=1000,
                       learning_rate=0.1)
    summary = core.fit()
    assert summary["global_step"] == 8
    assert float(core.schedule(7)) == pytest.approx(0.1 * 7 / 100 * (1 - 7 / 1000), rel=1e-5)
    assert summary["history"][-1]["learning_rate"] == pytest.approx(float(core.schedule(7)),
                                                                   rel=1e-5)
    short = TrainSettings(total_steps=8, batch_size=4, learning_rate=0.1, warmup_steps=100)
    assert float(short.schedule()(7)) == pytest.approx(0.1 * 7 / 100 * (1 - 7 / 8), rel=1e-5)
