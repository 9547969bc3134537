"""run_pretraining.py end to end on a tiny model: loss falls, exports load, bad input fails cleanly.

Runs the driver as a subprocess (as users do). Shards come from the embedded default corpus at
max_seq_length 32, so no download and no ../shared are needed.
"""
import glob
import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import made_once

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ = 32
# A model small enough that tracing dominates: 1 layer, hidden 64, batch 8 x 32 tokens.
TINY = {"model_size": "tiny", "train_batch_size": 8, "max_seq_length": SEQ,
        "model_hparam_overrides": {"hidden_size": 64, "embedding_size": 32,
                                   "num_hidden_layers": 1, "num_attention_heads": 1,
                                   "head_ratio": 1, "intermediate_size": 128},
        "generator_hidden_size": 0.5, "num_warmup_steps": 2, "learning_rate": 2e-3,
        "shuffle_buffer": 200}
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def tiny_hparams(**changes):
    hp = json.loads(json.dumps(TINY))
    extra_model = changes.pop("model_hparam_overrides", {})
    hp["model_hparam_overrides"].update(extra_model)
    hp.update(changes)
    return hp


def tiny_shards_dir(tmp_path_factory):
    """The default corpus's shards at max_seq_length 32 (2 shards), made once per run."""
    from data.default_corpus import build_default_pretraining_data
    return made_once("tiny_pretrain_data", tmp_path_factory.getbasetemp(), lambda work:
                     build_default_pretraining_data(str(work), max_seq_length=SEQ, num_shards=2))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """(shard glob, vocab file) of the default corpus at max_seq_length 32."""
    from data.default_corpus import default_vocab_file
    return str(tiny_shards_dir(tmp_path_factory) / "pretrain_data.tfrecord*"), default_vocab_file()


def driver_env(extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.update(extra or {})
    return env


def driver_cmd(data, model_dir, hparams=None, *flags):
    pattern, vocab = data
    cmd = [sys.executable, str(REPO / "run_pretraining.py"), f"--pretrain_tfrecords={pattern}",
           f"--vocab_file={vocab}", f"--model_dir={model_dir}"]
    if hparams is not None:
        cmd.append("--hparams=" + json.dumps(hparams))
    return cmd + list(flags)


def run_driver(data, model_dir, hparams=None, *flags, env=None, timeout=240):
    return subprocess.run(driver_cmd(data, model_dir, hparams, *flags), cwd=str(REPO),
                          env=driver_env(env), capture_output=True, text=True, timeout=timeout)


def read_summary(model_dir):
    with open(os.path.join(model_dir, "pretraining_summary.json"), encoding="utf-8") as f:
        return json.load(f)


def error_line(proc):
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# ------------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("run") / "model"
    proc = run_driver(tiny_data, model_dir, tiny_hparams(), "--num_train_steps=40",
                      "--log_every_n_steps=10", "--save_checkpoints_steps=20",
                      "--keep_checkpoint_max=1", "--seed=3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return model_dir, proc


def test_no_flag_demo(tmp_path):
    """The README's demo, `python run_pretraining.py` with no flags at all: 100 steps of the tiny
    model on the embedded corpus. Both losses fall, the discriminator leaves the "nothing was
    replaced" prior (AUC well above 0.5) and the export loads. A fresh interpreter, with
    TensorFlow's graph optimizer on, as users run it (the suite's forks turn it off:
    scripts/test_env.sh)."""
    proc = subprocess.run([sys.executable, str(REPO / "run_pretraining.py")], cwd=str(tmp_path),
                          env=driver_env({"CONVBERT_TEST_ZYGOTE": "0"}), capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    model_dir = tmp_path / "runs" / "demo"
    summary = read_summary(model_dir)
    first, final = summary["first"], summary["final"]
    assert summary["global_step"] == 100
    assert final["loss"] < 0.8 * first["loss"]
    assert final["gen_loss"] < first["gen_loss"] - 0.5
    assert final["disc_loss"] < 0.6 * first["disc_loss"]
    assert final["disc_auc"] > 0.7, summary
    from model import ConvBertModel
    model = ConvBertModel.from_pretrained(str(model_dir))
    assert model.config.hidden_size == 128


def test_run_pretraining_loss_falls(trained):
    model_dir, proc = trained
    summary = read_summary(model_dir)
    assert summary["global_step"] == 40
    first, final = summary["first"], summary["final"]
    assert final["loss"] < first["loss"]
    assert final["gen_loss"] < first["gen_loss"]
    for key in ("disc_loss", "disc_accuracy", "disc_auc", "gen_accuracy", "learning_rate",
                "sequences_per_second"):
        assert key in final
    # The progress line carries every field.
    line = [l for l in proc.stdout.splitlines() if l.startswith("step 40/40")][0]
    for word in ("loss", "gen loss", "acc", "disc loss", "auc", "lr", "seq/s", "ETA"):
        assert word in line
    # A line once the first step has run (log every 10), its compilation time stated; no
    # warm-up note (40 steps past a 2-step warm-up)
    first = [l for l in proc.stdout.splitlines() if l.startswith("step 1/40 (2.5%)")]
    assert len(first) == 1 and "| first call " in first[0] and "next line at step 10" in first[0]
    assert "warm-up" not in proc.stdout


def test_run_pretraining_writes_checkpoints_exports_and_tensorboard(trained):
    model_dir, _ = trained
    # keep_checkpoint_max=1
    assert len(glob.glob(os.path.join(model_dir, "checkpoints", "ckpt-*.index"))) == 1
    assert os.path.exists(os.path.join(model_dir, "checkpoints", "ckpt-40.index"))
    assert glob.glob(os.path.join(model_dir, "train", "events.out.tfevents.*"))
    hp = json.load(open(os.path.join(model_dir, "hparams.json")))
    assert hp["seed"] == 3 and hp["max_seq_length"] == SEQ
    assert not glob.glob(os.path.join(model_dir, ".*tmp*"))

    import numpy as np
    from model import ConvBertMaskedLM, ConvBertModel
    encoder = ConvBertModel.from_pretrained(str(model_dir))
    assert encoder.config.hidden_size == 64
    generator = ConvBertMaskedLM.from_pretrained(os.path.join(model_dir, "generator"))
    ids = np.array([[101, 2000, 2001, 102] + [0] * 4], dtype="int32")
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype("int32"),
              "segment_ids": np.zeros_like(ids)}
    assert np.all(np.isfinite(np.asarray(encoder(inputs))))
    assert np.asarray(generator(inputs)).shape[-1] == encoder.config.vocab_size


def test_run_pretraining_rerun_after_the_end_resumes_and_does_nothing(trained, tiny_data):
    model_dir, _ = trained
    before = os.path.getmtime(os.path.join(model_dir, "checkpoints", "ckpt-40.index"))
    proc = run_driver(tiny_data, model_dir, tiny_hparams(), "--num_train_steps=40",
                      "--keep_checkpoint_max=1", "--seed=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumed from" in proc.stdout and "nothing to train" in proc.stdout
    assert os.path.getmtime(os.path.join(model_dir, "checkpoints", "ckpt-40.index")) == before


def test_run_pretraining_non_finite_loss_stops_and_keeps_last_checkpoint(trained, tiny_data,
                                                                       tmp_path):
    import shutil
    model_dir = tmp_path / "model"
    shutil.copytree(trained[0], model_dir)
    index = model_dir / "checkpoints" / "ckpt-40.index"
    state = (index.read_bytes(), (model_dir / "checkpoints" / "checkpoint").read_bytes())
    proc = run_driver(tiny_data, model_dir, tiny_hparams(learning_rate=1e30),
                      "--num_train_steps=60", "--save_checkpoints_steps=2",
                      "--keep_checkpoint_max=1", "--seed=3")
    assert proc.returncode != 0
    line = error_line(proc)
    assert line.startswith("error: non-finite") and "ckpt-40" in line, proc.stderr[-2000:]
    assert (index.read_bytes(), (model_dir / "checkpoints" / "checkpoint").read_bytes()) == state
    assert sorted(p.name for p in model_dir.glob("checkpoints/ckpt-*.index")) == ["ckpt-40.index"]


# ------------------------------------------------------------------------------------ bad input
def _write_bad_shard(path, names=("input_ids", "input_mask", "segment_ids"), length=SEQ):
    import tensorflow as tf
    feature = {n: tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * length))
               for n in names}
    with tf.io.TFRecordWriter(str(path)) as w:
        w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


BAD_CASES = {
    "unknown_hparam": (dict(hparams={"learning_rat": 1e-3}), "learning_rate"),
    "unknown_model_size": (dict(flags=["--model_size=huge"]), "medium-small"),
    "no_tfrecords": (dict(pattern="nowhere/*.tfrecord"), "no pre-training shards"),
    "feature_names": (dict(shard=dict(names=("ids", "mask", "segs"))), "features"),
    "feature_length": (dict(shard=dict(length=16)), "length"),
    "vocab_mismatch": (dict(hparams={"vocab_size": 123}), "vocab_size"),
    "beyond_positions": (dict(flags=["--max_seq_length=1024"]), "position embeddings"),
}


def _bad_case_args(case, tiny_data, tmp_path):
    spec, expected = BAD_CASES[case]
    pattern, vocab = tiny_data
    if "pattern" in spec:
        pattern = str(tmp_path / spec["pattern"])
    if "shard" in spec:
        _write_bad_shard(tmp_path / "pretrain_data.tfrecord-0-of-1", **spec["shard"])
        pattern = str(tmp_path / "pretrain_data.tfrecord*")
    hparams = tiny_hparams(**spec.get("hparams", {}))
    return (pattern, vocab), hparams, spec.get("flags", []), expected


def _main_in_process(argv, capsys):
    """run_pretraining.main on `argv` in this process -> (exit code, stderr lines)."""
    import run_pretraining
    run_pretraining.FLAGS.unparse_flags()
    try:
        run_pretraining.FLAGS(argv)
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            run_pretraining.main([argv[0]])
    finally:
        run_pretraining.FLAGS.unparse_flags()
    return exit_info.value.code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_run_pretraining_bad_input_is_one_line_error(case, tiny_data, tmp_path, capsys):
    """In-process (fast): main() exits 1 with one `error:` line and writes nothing."""
    data, hparams, flags_, expected = _bad_case_args(case, tiny_data, tmp_path)
    model_dir = tmp_path / "model"
    code, err = _main_in_process(driver_cmd(data, model_dir, hparams, *flags_)[1:], capsys)
    assert code == 1
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0], err
    assert not model_dir.exists()  # nothing written


# Bucket paths (--model_dir=ram://..., shards and vocab in ram://) train, resume and export
# without a local file: tests/pretrain/test_ram_filesystem.py.


def test_run_pretraining_bad_input_from_the_command_line(tiny_data, tmp_path):
    data, hparams, flags_, expected = _bad_case_args("feature_names", tiny_data, tmp_path)
    model_dir = tmp_path / "model"
    proc = run_driver(data, model_dir, hparams, *flags_, timeout=120)
    assert proc.returncode == 1, proc.stdout[-1000:] + proc.stderr[-2000:]
    line = error_line(proc)
    assert line.startswith("error: ") and expected in line, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not model_dir.exists()


# ------------------------------------------------------------------------------------ flags
def test_run_pretraining_flags_override_hparams_and_booleans_parse(tiny_data, tmp_path):
    import run_pretraining
    from pretrain.hparams import HParamsError, make_hparams
    pattern, vocab = tiny_data
    flags_ = run_pretraining.FLAGS
    base = ["prog", f"--pretrain_tfrecords={pattern}", f"--vocab_file={vocab}",
            "--hparams=" + json.dumps(tiny_hparams(deterministic=True, seed=5))]
    cases = [([], True), (["--deterministic"], True), (["--nodeterministic"], False),
             (["--deterministic=false"], False), (["--deterministic=true"], True)]
    try:
        for extra, expected in cases:
            flags_.unparse_flags()
            flags_(base + extra + ["--seed=9", "--learning_rate=0.5"])
            hp, model_dir, files, special = run_pretraining.resolve(flags_)
            assert hp.deterministic is expected, extra
            assert hp.seed == 9 and hp.learning_rate == 0.5 and hp.train_batch_size == 8
            assert files and special == {"cls_id": 101, "sep_id": 102, "mask_id": 103}
            assert model_dir == os.path.join("runs", "convbert_demo")
    finally:
        flags_.unparse_flags()
    # Per-size defaults (paper Table 5) and the JSON-file form of --hparams.
    small, medium, base = (make_hparams(s) for s in ("small", "medium_small", "base"))
    assert (small.learning_rate, small.train_batch_size) == (3e-4, 128)
    assert (medium.learning_rate, medium.train_batch_size, medium.linear_groups) == (5e-4, 128, 2)
    assert (base.learning_rate, base.train_batch_size) == (2e-4, 256)
    assert abs(base.generator_hidden_size - 1 / 3) < 1e-9 and small.generator_hidden_size == 0.25
    for hp in (small, medium, base):
        assert (hp.num_warmup_steps, hp.num_train_steps, hp.max_seq_length) == (10000, 10**6, 128)
        assert (hp.mask_prob, hp.disc_weight, hp.max_predictions_per_seq) == (0.15, 50.0, 19)
        assert (hp.keep_checkpoint_max, hp.save_checkpoints_steps) == (5, 10000)
    path = tmp_path / "hp.json"
    path.write_text(json.dumps({"learning_rate": 1e-4, "num_train_steps": 1e3}))
    from pretrain.hparams import parse_overrides
    hp = make_hparams("small", parse_overrides(str(path)))
    assert hp.learning_rate == 1e-4 and hp.num_train_steps == 1000
    with pytest.raises(HParamsError, match="valid keys: .*learning_rate"):
        make_hparams("small", {"lr": 1})
    # A short run on the official schedule's first steps (docs/PRETRAINING.md)
    from pretrain.hparams import train_settings
    hp = make_hparams("small", {"num_train_steps": 300, "lr_schedule_steps": 1e6})
    settings = train_settings(hp)
    assert (settings.total_steps, settings.schedule_steps, settings.warmup_steps) == (
        300, 10**6, 10000)
    assert float(settings.schedule()(300)) == pytest.approx(3e-4 * 300 / 10000 * (1 - 3e-4))
    assert train_settings(small).schedule_steps is None
    with pytest.raises(HParamsError, match="lr_schedule_steps must be an integer >= 0"):
        make_hparams("small", {"lr_schedule_steps": -1})


def test_run_pretraining_longer_continuation_phase_copies_position_embeddings(trained, tmp_path):
    """Resume at max_seq_length 64 after 32: rows 32..63 start as copies of the trained 0..31."""
    import shutil
    import numpy as np
    from data.default_corpus import build_default_pretraining_data, default_vocab_file
    from model import ConvBertModel
    model_dir = tmp_path / "model"
    shutil.copytree(trained[0], model_dir)
    before = np.asarray(
        ConvBertModel.from_pretrained(str(model_dir)).embeddings.position_embeddings)
    build_default_pretraining_data(str(tmp_path / "data64"), max_seq_length=64, num_shards=1)
    data64 = (str(tmp_path / "data64" / "pretrain_data.tfrecord*"), default_vocab_file())
    hparams = tiny_hparams(max_seq_length=64, learning_rate=1e-6)
    proc = run_driver(data64, model_dir, hparams, "--num_train_steps=41", "--seed=3",
                      "--keep_checkpoint_max=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "max_seq_length 32 -> 64: position embeddings 32..63" in proc.stdout
    after = np.asarray(ConvBertModel.from_pretrained(str(model_dir)).embeddings.position_embeddings)
    assert np.abs(after[32:64] - before[:32]).max() < 1e-4
    assert np.abs(after[64:] - before[64:]).max() < 1e-4  # never trained, left as they were


def test_steps_per_loop_trains_the_same(tiny_data, tmp_path):
    """RTD with --steps_per_loop=4 (4 steps per compiled call, masking and sampling seeded per
    step inside the loop): the same logged losses and final weights as one step per call."""
    import numpy as np
    from safetensors.numpy import load_file
    runs = {}
    for k in (1, 4):
        model_dir = tmp_path / f"k{k}"
        proc = run_driver(tiny_data, model_dir, tiny_hparams(), "--num_train_steps=8",
                          "--log_every_n_steps=4", "--save_checkpoints_steps=8", "--seed=5",
                          "--deterministic", f"--steps_per_loop={k}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        history = read_summary(model_dir)["history"]
        runs[k] = ([h["step"] for h in history], [h["loss"] for h in history],
                   load_file(str(model_dir / "discriminator" / "model.safetensors")))
    assert runs[1][0] == runs[4][0] == [4, 8]
    # Equal up to float rounding: the step inside the tf.while body is the same computation,
    # but grappler fuses that graph a little differently (measured: losses within 3e-8 relative,
    # weights within 1.2e-7 after 8 steps; the toy task of tests/training is bit-identical).
    np.testing.assert_allclose(runs[1][1], runs[4][1], rtol=1e-6)
    for name, value in runs[1][2].items():
        np.testing.assert_allclose(value, runs[4][2][name], rtol=1e-5, atol=1e-6, err_msg=name)
