"""Fine-tuning on several JAX processes (issue 50 item 3): run_finetuning.py --features_dir on
KERAS_BACKEND=jax as 2 processes x 2 CPU devices, joined on loopback (training/jax_distribution.py
`start_processes`), against 1 process x 4 CPU devices: MRPC and SQuAD 1.1 (a tiny model of one
layer, 2 trials of 3 steps each, 64 tokens) give the same training losses (TensorBoard's
train/loss, within 1e-5), the same results files (dev predictions and metrics, SQuAD's answers;
the n-best probabilities within 1e-6) and the same fine-tuned MRPC models (1e-6). Every process
reads the whole features and feeds its rows of each batch; the predictions come back to every
process; process 0 alone writes (process 1's model_dir stays empty).
The two-process run that matches is a rerun: a first one lost process 1 to a SIGKILL between
two trials, and process 0 ended at once with one line naming it (training/jax_distribution.py
`lost_peer_as_error`), no traceback. The rerun reads the programs both processes compiled in the
lost run from JAX's compilation cache (training/compile_cache.py: on the CPU every process writes
its own). TensorFlow cannot be imported in any of the processes
(tests/finetune/test_run_finetuning_features.py's NO_TF_DRIVER)."""
import json
import signal
import time

import numpy as np
import pytest

from tests.conftest import shared_path, tensorboard_series
from tests.finetune.test_run_finetuning_features import TINY_MODEL, explain, start_driver
from tests.finetune.test_squad_features import features_command
from tests.pretrain.test_jax_multiprocess import finish, free_port, signal_after, stderr_end

pytest.importorskip("jax")

MAX_LEN = 64
STEPS = 3
# One layer, as TINY_MODEL: compiling the steps is most of each process's time.
HPARAMS = {"model_hparam_overrides": TINY_MODEL,
           "train_batch_size": 8, "eval_batch_size": 32,
           "predict_batch_size": 32, "max_train_examples": 32, "max_eval_examples": 24,
           "doc_stride": 32, "max_query_length": 16, "beam_size": 5, "qa_hidden_size": 32,
           "n_best_size": 5, "log_every_steps": 1, "save_finetuned_model": True}


@pytest.fixture(scope="module")
def features(tmp_path_factory):
    """MRPC (32 train pairs, both orders) and SQuAD 1.1 (one article to train, one to evaluate)."""
    root = tmp_path_factory.mktemp("multiprocess_features")
    data = json.loads(shared_path("data", "squad", "dev-v1.1.json").read_text())
    for name, articles in (("train", data["data"][:1]), ("dev", data["data"][1:2])):
        (root / f"{name}.json").write_text(json.dumps(dict(data, data=articles)))
    proc = features_command(
        "--task_names=mrpc,squadv1", f"--data_dir={shared_path('data', 'glue')}",
        f"--vocab_file={shared_path('data', 'vocab', 'bert-uncased-vocab.txt')}",
        f"--train_file={root / 'train.json'}", f"--predict_file={root / 'dev.json'}",
        f"--max_seq_length={MAX_LEN}", "--doc_stride=32", "--max_query_length=16",
        "--max_train_examples=32", "--splits=train,dev", f"--output_dir={root / 'features'}")
    assert proc.returncode == 0, explain(proc)
    return root / "features"


def start(features, model_dir, *flags, devices):
    return start_driver(["--features_dir", features, "--task_names", "mrpc,squadv1",
                         "--model_dir", model_dir, "--hparams", json.dumps(HPARAMS),
                         "--max_train_steps", STEPS, "--num_trials=2",
                         f"--num_cpu_devices={devices}", *flags],
                        "jax")


def pair(features, model_dirs):
    """Processes 0 and 1 of 2, 2 CPU devices each, on a free loopback port, each with its
    model_dir."""
    address = f"127.0.0.1:{free_port()}"
    return [start(features, model_dirs[i], f"--coordinator_address={address}",
                  "--num_processes=2", f"--process_id={i}", "--distributed_timeout=120",
                  devices=2) for i in (0, 1)]


def files_under(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def assert_close_json(a, b, path):
    """Equal JSON but for floats, which agree within 1e-6 (SQuAD's n-best probabilities)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), path
        for key in a:
            assert_close_json(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close_json(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert b == pytest.approx(a, abs=1e-6), path
    else:
        assert a == b, path


def test_two_processes_match_one(features, tmp_path):
    pytest.importorskip("tensorboard")
    one_dir, two_dir, other_dir = tmp_path / "one", tmp_path / "two", tmp_path / "process1"
    # The one-process run and the pair at once: the compiles overlap the others' start-up.
    single = start(features, one_dir, devices=4)
    # SIGKILL of process 1 once it starts MRPC's trial 2: process 0's next call with it (the
    # trial's start, outside the training loop) fails at once, and it ends with one line naming
    # process 1, no traceback, no C++ stack (JAX's shutdown barrier skipped).
    procs = pair(features, (two_dir, other_dir))
    signalled, _ = signal_after(procs[1], "mrpc trial 2/2: training", signal.SIGKILL)
    (_, lost), _ = [proc.communicate(timeout=120) for proc in procs]
    waited = time.time() - signalled
    assert [proc.returncode for proc in procs] == [1, -signal.SIGKILL], stderr_end(lost)
    line = lost.strip().splitlines()[-1]
    assert line.startswith("error: another process was lost (killed, or its host gone): a call "
                           "with process 1 of 2 failed ("), stderr_end(lost)
    assert line.endswith("this one stops too. Rerun every process: this run writes no "
                         "checkpoints, so it starts again"), line
    assert lost.count("error:") == 1 and "Traceback" not in lost and "terminate" not in lost
    assert waited < 60, waited
    # The rerun of both trains every trial again (fine-tuning writes no checkpoints) over what
    # the lost run wrote, and ends as the one-process run does.
    first, second = finish(pair(features, (two_dir, other_dir)))
    one, = finish([single])
    assert "JAX: 4 cpu device(s) (DataParallel)" in one
    for i, out in enumerate((first, second)):
        assert f"JAX distributed: process {i} of 2 (127.0.0.1:" in out
        assert "JAX: 4 cpu device(s) over 2 processes (DataParallel)" in out
    # Process 1 trained and predicted alongside, and wrote nothing (nor said the results).
    assert "squadv1 trial 2/2: step 3/3" in second and "dev exact_match" not in second
    assert not other_dir.exists() or files_under(other_dir) == []

    files = files_under(one_dir)
    runs = [f"{task}_trial{k}" for task in ("mrpc", "squadv1") for k in (1, 2)]
    results = [f for f in files if f.startswith("results/")]
    assert {"results/mrpc_dev_predictions_trial2.tsv", "results/mrpc_dev_summary.json",
            "results/squadv1_trial2_predictions.json", "results/squadv1_summary.json"} \
        <= set(results)
    assert [f for f in files if f.startswith("finetuned/") and f.endswith(".safetensors")] \
        == [f"finetuned/mrpc_trial{k}/model.safetensors" for k in (1, 2)]   # GLUE's only
    board = [f.split("/")[1] for f in files if f.startswith("tensorboard/")]
    # (the lost run's event files beside the rerun's in the trials it started)
    assert sorted({f.split("/")[1] for f in files_under(two_dir)
                   if f.startswith("tensorboard/")}) == board == runs
    for run in runs:
        reference = tensorboard_series(one_dir / "tensorboard" / run)
        assert sorted(reference) == list(range(1, STEPS + 1))
        losses = tensorboard_series(two_dir / "tensorboard" / run)
        assert sorted(losses) == sorted(reference)
        np.testing.assert_allclose([losses[s] for s in sorted(losses)],
                                   [reference[s] for s in sorted(reference)], rtol=1e-5)
    assert [f for f in files_under(two_dir) if not f.startswith("tensorboard/")] \
        == [f for f in files if not f.startswith("tensorboard/")]
    from safetensors.numpy import load_file
    for name in files:
        if name.startswith("tensorboard/"):
            continue
        if name.endswith(".safetensors"):
            weights = [load_file(str(d / name)) for d in (one_dir, two_dir)]
            assert sorted(weights[0]) == sorted(weights[1])
            for key, value in weights[0].items():
                np.testing.assert_allclose(weights[1][key], value, atol=1e-6, err_msg=key)
        elif name.endswith(".json"):
            assert_close_json(json.loads((one_dir / name).read_text()),
                              json.loads((two_dir / name).read_text()), name)
        else:   # the dev predictions, row by row
            assert (one_dir / name).read_text() == (two_dir / name).read_text(), name
