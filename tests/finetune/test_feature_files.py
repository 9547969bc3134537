"""Tokenized GLUE features written to files (`python -m finetune.features`) and read back without
TensorFlow (finetune/feature_files.py).

Most tests use a tiny synthetic GLUE directory (five tasks, a few rows each) and a 34-token
vocabulary in tmp_path; one reads the real RTE dev set from ../shared (skipped when absent). The
command runs in-process (its own absl registry, main() returns the exit status) except for one
end-to-end run and the TensorFlow-free reader, which need a process of their own and run side by
side.
"""
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from finetune import feature_files
from finetune.feature_files import FeatureFileError
from finetune.features import convert_examples_to_features
from finetune.glue.readers import add_swapped_pairs, read_examples
from tests.conftest import REPO_ROOT, shared_path

WORDS = ("the cat sat on a mat dog ran far away big small red blue house tree "
         "quickly slowly today yesterday he she it was not is".split())
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "##s", "##ed"] + WORDS
MAX_LEN = 16
TASK_DIRS = {"cola": "CoLA", "sst": "SST-2", "mrpc": "MRPC", "sts": "STS-B", "rte": "RTE"}
ROWS = {"train": 6, "dev": 4}


def sentence(i, n):
    """Deterministic text of n words (some unknown to the vocab, some long for truncation)."""
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)]
    if i % 3 == 0:
        words.append("zebras")   # [UNK]
    return " ".join(words) + " ."


def write_glue(root):
    """<root>/<TASK>/{train,dev}.tsv in the GLUE download's layouts."""
    for split, n in ROWS.items():
        rows = {
            "CoLA": [f"gj04\t{i % 2}\t\t{sentence(i, 3 + i)}" for i in range(n)],
            "SST-2": ["sentence\tlabel"] + [f"{sentence(i, 2 + 2 * i)}\t{(i + 1) % 2}"
                                            for i in range(n)],
            "MRPC": ["\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
                    + [f"{i % 2}\t{100 + i}\t{200 + i}\t{sentence(i, 4 + i)}\t{sentence(i + 1, 3)}"
                       for i in range(n)],
            "STS-B": ["index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                      "sentence2\tscore"]
                     + [f"{i}\tmain\tf\t2012\t{i:04d}\tnone\tnone\t{sentence(i, 3)}\t"
                        f"{sentence(i + 2, 2 + 3 * i)}\t{(i * 1.3) % 5:.3f}" for i in range(n)],
            "RTE": ["index\tsentence1\tsentence2\tlabel"]
                   + [f"{i}\t{sentence(i, 10 + i)}\t{sentence(i + 5, 4)}\t"
                      f"{'entailment' if i % 2 else 'not_entailment'}" for i in range(n)],
        }
        for task_dir, lines in rows.items():
            (root / task_dir).mkdir(parents=True, exist_ok=True)
            (root / task_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n",
                                                          encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    return write_glue(tmp_path_factory.mktemp("glue"))


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(vocab):
    from data.tokenization import load_tokenizer
    return load_tokenizer(str(vocab), do_lower_case=True)


def expected_examples(glue, task, split, double=True, max_train=None):
    """What a fine-tuning run reads (finetune/glue/splits.py load_glue_data)."""
    examples = read_examples(glue, task, split)
    if split == "train":
        examples = examples[:max_train] if max_train else examples
        from finetune.glue.tasks import get_task
        if double and get_task(task).unordered_pair:
            examples = add_swapped_pairs(examples)
    return examples


def run_main(*args):
    """`python -m finetune.features ARGS`, in-process: its exit status."""
    from finetune import features
    return features.main(["features", *map(str, args)])


def cli_args(glue, vocab, out, *extra, tasks="cola,sst,mrpc,sts,rte"):
    return [f"--task_names={tasks}", f"--data_dir={glue}", f"--vocab_file={vocab}",
            f"--output_dir={out}", f"--max_seq_length={MAX_LEN}", *extra]


def subprocess_env(**extra):
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="3", **extra)


# The reader in a process where `import tensorflow` fails (the JAX path).
NO_TF = textwrap.dedent("""
    import json, sys
    sys.modules["tensorflow"] = None     # any `import tensorflow` now raises ImportError
    from finetune import feature_files
    out = sys.argv[1]
    manifest = feature_files.read_manifest(out)
    feature_files.check_compatible(manifest, feature_files.manifest_path(out),
                                   vocab_sha256=manifest["vocab_sha256"], max_seq_length=16,
                                   do_lower_case=True)
    result = {}
    for key, entry in manifest["files"].items():
        arrays, guids = feature_files.load_split(out, entry["task"], entry["split"], manifest)
        result[key] = {"guids": guids, **{k: [str(v.dtype), v.tolist()] for k, v in arrays.items()}}
    assert sys.modules["tensorflow"] is None
    assert not [m for m in sys.modules if m.startswith(("tensorflow.", "tensorflow_text"))]
    print(json.dumps(result))
""")


def start(args, **env):
    return subprocess.Popen([sys.executable, *map(str, args)], cwd=REPO_ROOT,
                            env=subprocess_env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc):
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def runs(glue, vocab, tmp_path_factory):
    """The runs that need a process of their own, started together (each spends seconds
    importing TensorFlow or JAX): "cli", the command end to end; "no_tf", the reader with
    TensorFlow unimportable, on features made in this process.
    {name: (CompletedProcess, its directory)}."""
    base = tmp_path_factory.mktemp("runs")
    procs = {"cli": (start(["-m", "finetune.features", *cli_args(glue, vocab, base / "cli")]),
                     base / "cli")}
    local = base / "local"
    try:
        assert run_main(*cli_args(glue, vocab, local)) == 0
    except BaseException:
        procs["cli"][0].kill()
        raise
    if importlib.util.find_spec("jax"):   # `import model` needs a Keras backend other than TF
        procs["no_tf"] = (start(["-c", NO_TF, local], KERAS_BACKEND="jax", JAX_PLATFORMS="cpu"),
                          local)
    return {name: (finish(proc), where) for name, (proc, where) in procs.items()}


# ------------------------------------------------------------------------ writing and reading
@pytest.mark.parametrize("task", list(TASK_DIRS))
def test_round_trip_equals_convert_examples_to_features(task, glue, tokenizer, tmp_path):
    for split in ("train", "dev"):
        examples = expected_examples(glue, task, split)
        arrays = convert_examples_to_features(examples, task, tokenizer, MAX_LEN)
        entry = feature_files.write_features(tmp_path, task, split, arrays,
                                             [e.guid for e in examples],
                                             vocab_size=tokenizer.vocab_size)
        assert entry["examples"] == len(examples) and entry["file"] == f"{task}_{split}.npz"
        data = (tmp_path / entry["file"]).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:   # stored types, no pickle
            assert sorted(npz.files) == sorted(feature_files.ARRAY_NAMES)
            assert npz["input_ids"].dtype == np.uint16
            assert npz["input_mask"].dtype == npz["segment_ids"].dtype == np.uint8
            assert npz["label_ids"].dtype == arrays["label_ids"].dtype
            assert npz["guids"].dtype.kind == "U"
        manifest = feature_files.make_manifest(
            {f"{task}_{split}": entry}, vocab_file=tokenizer.vocab_file, vocab_sha256="x",
            vocab_size=tokenizer.vocab_size, do_lower_case=True, max_seq_length=MAX_LEN,
            double_unordered=True, max_train_examples=None)
        loaded, guids = feature_files.load_split(tmp_path, task, split, manifest)
        assert guids == [e.guid for e in examples]
        assert set(loaded) == set(arrays)
        for name, value in arrays.items():
            assert loaded[name].dtype == value.dtype, name
            np.testing.assert_array_equal(loaded[name], value)
    if task == "sts":
        assert loaded["label_ids"].dtype == np.float32
        assert loaded["input_mask"].sum(axis=1).max() == MAX_LEN   # something was truncated


def test_input_ids_int32_for_large_vocab_and_no_silent_wrap(tmp_path):
    arrays = {"input_ids": np.array([[2, 70000, 3, 0]], np.int32),
              "input_mask": np.array([[1, 1, 1, 0]], np.int32),
              "segment_ids": np.zeros((1, 4), np.int32), "label_ids": np.array([1], np.int32)}
    entry = feature_files.write_features(tmp_path, "cola", "dev", arrays, ["g0"],
                                         vocab_size=80000)
    with np.load(tmp_path / entry["file"], allow_pickle=False) as npz:
        assert npz["input_ids"].dtype == np.int32
        assert npz["input_ids"][0, 1] == 70000
    with pytest.raises(FeatureFileError, match="input_ids has values outside uint16"):
        feature_files.write_features(tmp_path, "cola", "dev", arrays, ["g0"], vocab_size=30000)


def test_cli_end_to_end(runs, glue, vocab, tokenizer):
    proc, out = runs["cli"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 11, proc.stdout
    assert lines[0].startswith("cola train: 6 examples, ") and "cola_train.npz" in lines[0]
    assert lines[4].startswith("mrpc train: 12 examples, ")   # both sentence orders
    assert lines[-1].startswith("total: 10 files, 62 examples, ")   # 6 * 3 + 12 * 2 + 4 * 5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest == feature_files.read_manifest(out)
    assert {k: v for k, v in manifest.items() if k != "files"} == {
        "format": 1, "vocab_file": str(vocab),
        "vocab_sha256": hashlib.sha256(vocab.read_bytes()).hexdigest(),
        "vocab_size": len(VOCAB), "do_lower_case": True, "max_seq_length": MAX_LEN,
        "double_unordered": True, "max_train_examples": None}
    assert sorted(manifest["files"]) == sorted(f"{t}_{s}" for t in TASK_DIRS
                                               for s in ("train", "dev"))
    assert sorted(os.listdir(out)) == sorted(["manifest.json"] + [
        f"{key}.npz" for key in manifest["files"]])    # no temporary files left
    for key, entry in manifest["files"].items():
        task, split = key.split("_")
        assert entry["task"] == task and entry["split"] == split
        assert entry["sha256"] == hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest()
        examples = expected_examples(glue, task, split)
        assert entry["examples"] == len(examples)
        arrays, guids = feature_files.load_split(out, task, split)
        assert guids == [e.guid for e in examples]
        expected = convert_examples_to_features(examples, task, tokenizer, MAX_LEN)
        for name, value in expected.items():
            assert arrays[name].dtype == value.dtype
            np.testing.assert_array_equal(arrays[name], value)
    assert feature_files.vocab_sha256(vocab) == manifest["vocab_sha256"]
    # GLUE spellings find the same split.
    assert feature_files.load_split(out, "STS-B", "dev")[1] == feature_files.load_split(
        out, "sts", "dev")[1]


def test_reader_needs_no_tensorflow(runs):
    if "no_tf" not in runs:
        pytest.skip("jax not installed: `import model` needs a Keras backend other than TF")
    proc, out = runs["no_tf"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result) == 10
    for key, loaded in result.items():
        task, split = key.split("_")
        arrays, guids = feature_files.load_split(out, task, split)
        assert loaded["guids"] == guids
        for name, value in arrays.items():
            assert loaded[name] == [str(value.dtype), value.tolist()], (key, name)


def test_double_unordered_and_max_train_examples(glue, vocab, tmp_path, capsys):
    out = tmp_path / "doubled"
    assert run_main(*cli_args(glue, vocab, out, "--max_train_examples=4",
                              tasks="mrpc,cola")) == 0
    manifest = feature_files.read_manifest(out)
    assert manifest["max_train_examples"] == 4 and manifest["double_unordered"] is True
    _, guids = feature_files.load_split(out, "mrpc", "train")
    assert guids == ["0", "1", "2", "3", "0-swapped", "1-swapped", "2-swapped", "3-swapped"]
    assert manifest["files"]["mrpc_dev"]["examples"] == ROWS["dev"]      # dev never doubled
    assert manifest["files"]["cola_train"]["examples"] == 4              # no pairs to swap
    single = tmp_path / "single"
    assert run_main(*cli_args(glue, vocab, single, "--double_unordered=false",
                              tasks="mrpc")) == 0
    manifest = feature_files.read_manifest(single)
    assert manifest["double_unordered"] is False and manifest["max_train_examples"] is None
    assert manifest["files"]["mrpc_train"]["examples"] == ROWS["train"]
    out_text = capsys.readouterr().out
    assert "mrpc train: 8 examples" in out_text and "mrpc train: 6 examples" in out_text


def test_defaults_follow_finetuning_hparams(glue, vocab, tmp_path):
    from finetune.hparams import FinetuneHParams
    defaults = FinetuneHParams().for_task("rte")
    out = tmp_path / "out"
    assert run_main(f"--task_names=rte", f"--data_dir={glue}", f"--vocab_file={vocab}",
                    f"--output_dir={out}", "--splits=dev") == 0
    manifest = feature_files.read_manifest(out)
    assert manifest["max_seq_length"] == defaults.max_seq_length == 128
    assert manifest["do_lower_case"] is defaults.do_lower_case
    assert manifest["double_unordered"] is defaults.double_unordered
    assert list(manifest["files"]) == ["rte_dev"]


# ------------------------------------------------------------------------ refusing bad features
@pytest.fixture
def small(glue, vocab, tmp_path):
    out = tmp_path / "small"
    assert run_main(*cli_args(glue, vocab, out, "--splits=train,dev", tasks="rte,cola")) == 0
    return out


def test_check_compatible(small, vocab, tmp_path):
    manifest = feature_files.read_manifest(small)
    path = feature_files.manifest_path(small)
    sha = feature_files.vocab_sha256(vocab)
    feature_files.check_compatible(manifest, path, vocab_sha256=sha, max_seq_length=MAX_LEN,
                                   do_lower_case=True, double_unordered=True,
                                   max_train_examples=None)
    feature_files.check_compatible(manifest, path)      # nothing asked, nothing checked
    with pytest.raises(FeatureFileError) as e:
        feature_files.check_compatible(manifest, path, max_seq_length=64)
    assert str(e.value) == (f"{path}: features were made with max_seq_length {MAX_LEN}, "
                            f"this run asks for 64")
    with pytest.raises(FeatureFileError) as e:
        feature_files.check_compatible(manifest, path, do_lower_case=False)
    assert str(e.value) == (f"{path}: features were made with do_lower_case true, this run "
                            f"asks for false")
    other = tmp_path / "other_vocab.txt"
    other.write_text("\n".join(VOCAB + ["extra"]) + "\n", encoding="utf-8")
    with pytest.raises(FeatureFileError) as e:
        feature_files.check_compatible(manifest, path,
                                       vocab_sha256=feature_files.vocab_sha256(other))
    assert str(e.value).startswith(f"{path}: features were made with another vocabulary")
    assert manifest["vocab_sha256"] in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FeatureFileError, match="double_unordered true, this run asks for false"):
        feature_files.check_compatible(manifest, path, double_unordered=False)
    with pytest.raises(FeatureFileError, match="max_train_examples none, this run asks for 10"):
        feature_files.check_compatible(manifest, path, max_train_examples=10)
    from data.errors import DataError
    assert issubclass(FeatureFileError, DataError)


def test_sha_mismatch_detected(small):
    manifest = feature_files.read_manifest(small)
    entry = manifest["files"]["rte_dev"]
    npz = small / entry["file"]
    arrays, guids = feature_files.load_split(small, "rte", "dev")
    arrays["label_ids"] = 1 - arrays["label_ids"]          # a valid file, other contents
    feature_files.write_features(small, "rte", "dev", arrays, guids)
    with pytest.raises(FeatureFileError) as e:
        feature_files.load_split(small, "rte", "dev")
    message = str(e.value)
    assert message.startswith(f"{npz}: sha256 ") and entry["sha256"] in message
    assert str(feature_files.manifest_path(small)) in message and "\n" not in message


def test_size_recorded_and_checked_older_manifests_readable(small):
    """Each entry records its npz's size: a file cut short (or a bit flipped) is one line naming
    it, a manifest listing another size for the same bytes names both; manifests written before
    sizes were recorded are read as before (their sha256 alone is checked)."""
    manifest = feature_files.read_manifest(small)
    where = feature_files.manifest_path(small)
    npz = small / "rte_dev.npz"
    data = npz.read_bytes()
    assert manifest["files"]["rte_dev"]["bytes"] == len(data)
    npz.write_bytes(data[:len(data) // 2])                  # cut short
    with pytest.raises(FeatureFileError) as e:
        feature_files.load_split(small, "rte", "dev")
    message = str(e.value)
    assert message.startswith(f"{npz}: sha256 ") and f"{len(data) // 2:,} bytes where it " \
        f"lists {len(data):,}, the file cut short" in message and "\n" not in message
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x10
    npz.write_bytes(bytes(flipped))                          # same size, one bit changed
    with pytest.raises(FeatureFileError, match=r"rte_dev.npz: sha256 .* does not match .*"
                       r"manifest.json \(the file changed"):
        feature_files.load_split(small, "rte", "dev")
    npz.write_bytes(data)
    manifest["files"]["rte_dev"]["bytes"] = len(data) + 7   # the manifest edited
    feature_files.write_manifest(small, manifest)
    with pytest.raises(FeatureFileError) as e:
        feature_files.load_split(small, "rte", "dev")
    assert str(e.value).startswith(f"{npz}: {len(data):,} bytes, {where} lists "
                                   f"{len(data) + 7:,} (the manifest changed")
    for entry in manifest["files"].values():                 # an older manifest: no sizes
        del entry["bytes"]
    feature_files.write_manifest(small, manifest)
    arrays, guids = feature_files.load_split(small, "rte", "dev")
    assert len(guids) == ROWS["dev"] and arrays["input_ids"].shape == (ROWS["dev"], MAX_LEN)
    manifest["files"]["rte_dev"]["bytes"] = "12"             # not a count: malformed
    feature_files.write_manifest(small, manifest)
    with pytest.raises(FeatureFileError, match="features manifest 'files' is malformed"):
        feature_files.read_manifest(small)


def test_missing_split_names_manifest(small):
    with pytest.raises(FeatureFileError) as e:
        feature_files.load_split(small, "mrpc", "dev")
    assert str(e.value) == (f"{feature_files.manifest_path(small)}: no features for mrpc dev; "
                            f"the manifest has: cola_dev, cola_train, rte_dev, rte_train")
    (small / "rte_dev.npz").unlink()
    with pytest.raises(FeatureFileError, match=r"rte_dev.npz: features file not found"):
        feature_files.load_split(small, "rte", "dev")


def test_missing_array_detected(small):
    manifest = feature_files.read_manifest(small)
    with np.load(small / "cola_dev.npz", allow_pickle=False) as npz:
        kept = {k: npz[k] for k in npz.files if k != "guids"}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **kept)
    data = buffer.getvalue()
    (small / "cola_dev.npz").write_bytes(data)
    manifest["files"]["cola_dev"].update(sha256=hashlib.sha256(data).hexdigest(),
                                         bytes=len(data))
    feature_files.write_manifest(small, manifest)
    with pytest.raises(FeatureFileError) as e:
        feature_files.load_split(small, "cola", "dev")
    assert str(e.value).startswith(f"{small / 'cola_dev.npz'}: missing array(s) guids")


@pytest.mark.parametrize("content, needle", [
    (None, "features manifest not found"),
    ("{not json", "invalid JSON"),
    ('{"format": 2, "files": {}}', "unknown features format 2"),
    ("[1, 2]", "expected a JSON object"),
])
def test_read_manifest_errors(tmp_path, content, needle):
    if content is not None:
        (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(FeatureFileError) as e:
        feature_files.read_manifest(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'manifest.json'}: ") and needle in str(e.value)


# ------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("change, needle", [
    ({"glue": "partial", "tasks": "rte"}, "error: {tmp}/partial/RTE/dev.tsv: GLUE file not found"),
    ({"tasks": "cola,nosuchtask"}, "unknown task name 'nosuchtask'"),
    ({"vocab": "missing.txt"}, "vocab file {tmp}/missing.txt: not found"),
    ({"splits": "train,validation"}, "task 'cola' has no split 'validation'"),
    ({"splits": " , "}, "--splits is empty"),
    ({"glue": "nowhere"}, "{tmp}/nowhere: --data_dir not found"),
    ({"max_seq_length": "2"}, "max_seq_length 2 is too small"),
])
def test_cli_bad_input_one_line_no_manifest(glue, vocab, tmp_path, capsys, change, needle):
    """`python -m finetune.features` on bad input: exit status 1, one line naming the culprit,
    nothing written. (main() is what `python -m` runs; the end-to-end run covers the process.)"""
    out = tmp_path / "out"
    glue_dir = tmp_path / change["glue"] if "glue" in change else glue
    if change.get("glue") == "partial":                    # RTE without dev.tsv
        (glue_dir / "RTE").mkdir(parents=True)
        (glue_dir / "RTE" / "train.tsv").write_text((glue / "RTE" / "train.tsv").read_text())
    vocab_file = tmp_path / change["vocab"] if "vocab" in change else vocab
    args = cli_args(glue_dir, vocab_file, out, tasks=change.get("tasks", "cola,rte"))
    args += [f"--splits={change.get('splits', 'train,dev')}"]
    if "max_seq_length" in change:
        args += [f"--max_seq_length={change['max_seq_length']}"]
    assert run_main(*args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert needle.format(tmp=tmp_path) in err[0]
    assert not out.exists()


def test_failed_rerun_leaves_no_manifest(glue, vocab, tmp_path, capsys):
    data = tmp_path / "glue"
    write_glue(data)
    out = tmp_path / "out"
    assert run_main(*cli_args(data, vocab, out, tasks="cola,rte")) == 0
    with open(data / "RTE" / "dev.tsv", "a", encoding="utf-8") as f:
        f.write("9\tonly two columns\n")                       # a malformed row
    assert run_main(*cli_args(data, vocab, out, tasks="cola,rte")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: {data / 'RTE' / 'dev.tsv'}:6: expected 4 tab-separated")
    assert not (out / "manifest.json").exists()    # the old one described replaced files
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


# ------------------------------------------------------------------------ ram:// and real data
def test_ram_filesystem_round_trip(glue, vocab, capsys):
    """Data, vocab and output on TensorFlow's in-memory filesystem: every access via fileio."""
    import tensorflow as tf
    root = "ram://feature_files_test"
    gfile = tf.io.gfile
    try:
        for task_dir in ("RTE", "MRPC"):
            gfile.makedirs(f"{root}/glue/{task_dir}")    # as a bucket's prefixes
            for split in ("train", "dev"):
                with gfile.GFile(f"{root}/glue/{task_dir}/{split}.tsv", "wb") as f:
                    f.write((glue / task_dir / f"{split}.tsv").read_bytes())
        with gfile.GFile(f"{root}/vocab.txt", "wb") as f:
            f.write(vocab.read_bytes())
        assert run_main(*cli_args(f"{root}/glue", f"{root}/vocab.txt", f"{root}/out",
                                  tasks="rte,mrpc")) == 0
        assert "manifest ram://feature_files_test/out/manifest.json" in capsys.readouterr().out
        manifest = feature_files.read_manifest(f"{root}/out")
        assert manifest["vocab_file"] == f"{root}/vocab.txt"
        assert manifest["vocab_sha256"] == hashlib.sha256(vocab.read_bytes()).hexdigest()
        assert manifest["files"]["mrpc_train"]["examples"] == 2 * ROWS["train"]
        arrays, guids = feature_files.load_split(f"{root}/out", "rte", "train", manifest)
        assert guids == [str(i) for i in range(ROWS["train"])]
        assert arrays["input_ids"].shape == (ROWS["train"], MAX_LEN)
        # write_features / write_manifest / load_split directly on ram:// too.
        entry = feature_files.write_features(f"{root}/direct", "rte", "train", arrays, guids)
        feature_files.write_manifest(f"{root}/direct", dict(manifest,
                                                            files={"rte_train": entry}))
        again, again_guids = feature_files.load_split(f"{root}/direct", "rte", "train")
        assert again_guids == guids
        for name in arrays:
            np.testing.assert_array_equal(again[name], arrays[name])
        assert not os.path.exists(REPO_ROOT / "ram:") and not os.path.exists("ram:")
    finally:
        for depth in range(1, 5):
            for path in gfile.glob(root + "/*" * depth):
                if not gfile.isdir(path):
                    gfile.remove(path)


def test_real_rte_features(tmp_path):
    glue = shared_path("data", "glue")
    vocab = shared_path("data", "vocab", "bert-uncased-vocab.txt")
    from data.tokenization import load_tokenizer
    out = tmp_path / "rte"
    assert run_main("--task_names=RTE", f"--data_dir={glue}", f"--vocab_file={vocab}",
                    f"--output_dir={out}", "--splits=dev", "--max_seq_length=128") == 0
    manifest = feature_files.read_manifest(out)
    assert manifest["vocab_size"] == 30522 and manifest["files"]["rte_dev"]["examples"] == 277
    arrays, guids = feature_files.load_split(out, "rte", "dev", manifest)
    examples = read_examples(glue, "rte", "dev")
    expected = convert_examples_to_features(examples, "rte", load_tokenizer(str(vocab)), 128)
    assert guids == [e.guid for e in examples]
    for name, value in expected.items():
        assert arrays[name].dtype == value.dtype
        np.testing.assert_array_equal(arrays[name], value)
    with np.load(out / "rte_dev.npz", allow_pickle=False) as npz:
        assert npz["input_ids"].dtype == np.uint16
