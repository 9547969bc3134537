"""GLUE readers: row counts and label balances on the real files, hand-made MNLI/QQP files,
and DataError messages that name the file and line."""
import pytest

from finetune.glue import tasks
from finetune.glue.readers import label_counts, read_examples, read_tsv
from finetune.glue.tasks import DataError
from tests.conftest import shared_path


def glue_dir():
    return shared_path("data", "glue")


# Counts from ../shared/data/PROVENANCE.md (data rows, header excluded).
REAL_COUNTS = [
    ("cola", "train", 8551), ("cola", "dev", 1043), ("cola", "test", 1063),
    ("sst", "train", 67349), ("sst", "dev", 872), ("sst", "test", 1821),
    ("mrpc", "train", 3668), ("mrpc", "dev", 408), ("mrpc", "test", 1725),
    ("sts", "train", 5749), ("sts", "dev", 1500), ("sts", "test", 1379),
    ("qnli", "dev", 5463), ("qnli", "test", 5463),
    ("rte", "train", 2490), ("rte", "dev", 277), ("rte", "test", 3000),
    ("wnli", "train", 635), ("wnli", "dev", 71), ("wnli", "test", 146),
    ("ax", "test", 1104), ("mnli", "diagnostic", 1104),
]


@pytest.mark.parametrize("task,split,count", REAL_COUNTS)
def test_real_row_counts(task, split, count):
    examples = read_examples(glue_dir(), task, split)
    assert len(examples) == count
    if split in ("test", "diagnostic"):
        assert all(e.label is None for e in examples)
    else:
        assert all(e.label is not None for e in examples)
    pair_task = task not in ("cola", "sst")
    assert all((e.text_b is not None) == pair_task for e in examples)


@pytest.mark.parametrize("task,split,expected", [
    ("sst", "dev", {"1": 444, "0": 428}),
    ("cola", "dev", {"1": 721, "0": 322}),
    ("mrpc", "train", {"1": 2474, "0": 1194}),
    ("mrpc", "dev", {"1": 279, "0": 129}),
    ("rte", "dev", {"entailment": 146, "not_entailment": 131}),
    ("wnli", "dev", {"0": 40, "1": 31}),
    ("qnli", "dev", {"entailment": 2702, "not_entailment": 2761}),
])
def test_real_label_balance(task, split, expected):
    assert label_counts(read_examples(glue_dir(), task, split)) == expected


def test_real_file_details():
    data = glue_dir()
    # MRPC starts with a UTF-8 BOM and has unbalanced quotes: neither may leak into the text.
    mrpc = read_examples(data, "mrpc", "dev")
    assert mrpc[0].label == "1"
    assert mrpc[0].text_b == '" The foodservice pie business does not fit our long-term growth strategy .'
    sts = read_examples(data, "STS-B", "dev")
    assert sts[0].label == 5.0 and sts[1].label == 4.75
    assert all(0.0 <= e.label <= 5.0 for e in sts)
    # Test-file guids are the file's own index column (needed for the leaderboard files).
    rte_test = read_examples(data, "rte", "test")
    assert [rte_test[0].guid, rte_test[-1].guid] == ["0", "2999"]
    assert rte_test[0].text_b == "Shukla is related to Mangla."
    # CoLA train/dev have no header, so the first line is data.
    cola = read_examples(data, "cola", "dev")
    assert cola[0].text_a == "The sailors rode the breeze clear of the rocks."


def test_double_unordered_mrpc_train():
    train = read_examples(glue_dir(), "mrpc", "train", double_unordered=True)
    assert len(train) == 2 * 3668
    first, swapped = train[0], train[3668]
    assert (swapped.text_a, swapped.text_b, swapped.label) == (first.text_b, first.text_a, first.label)
    assert len(read_examples(glue_dir(), "mrpc", "dev", double_unordered=True)) == 408
    assert len(read_examples(glue_dir(), "rte", "train", double_unordered=True)) == 2490


@pytest.mark.parametrize("alias,name", [
    ("SST-2", "sst"), ("sst-2", "sst"), ("STS-B", "sts"), ("sts-b", "sts"), ("CoLA", "cola"),
    ("MNLI", "mnli"), ("mnli-mm", "mnli"), ("qqp", "qqp"), ("diagnostic", "ax"), ("WNLI", "wnli"),
])
def test_task_name_aliases(alias, name):
    assert tasks.normalize_task_name(alias) == name


# --- MNLI and QQP are absent from ../shared: hand-made files in their GLUE formats ----------

MNLI_PARSES = "( a )\t( b )\t(ROOT a)\t(ROOT b)"


def write_tsv(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")


def make_mnli(root):
    head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
            "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]
    body = lambda i, g: [str(i), "31193", f"{i}n", g, *MNLI_PARSES.split("\t"),
                         f'He said "hi {i}.', f"premise {i} holds"]
    write_tsv(root / "MNLI" / "train.tsv", [head + ["label1", "gold_label"]] + [
        body(0, "government") + ["neutral", "neutral"],
        body(1, "telephone") + ["entailment", "entailment"]])
    dev_head = head + [f"label{k}" for k in range(1, 6)] + ["gold_label"]
    write_tsv(root / "MNLI" / "dev_matched.tsv", [dev_head] + [
        body(i, "fiction") + ["contradiction"] * 5 + ["contradiction"] for i in range(3)])
    write_tsv(root / "MNLI" / "dev_mismatched.tsv", [dev_head] + [
        body(i, "letters") + ["neutral", "entailment", "neutral", "neutral", "neutral", "neutral"]
        for i in range(4)])
    write_tsv(root / "MNLI" / "test_matched.tsv", [head] + [body(i, "fiction") for i in range(5)])
    write_tsv(root / "MNLI" / "test_mismatched.tsv", [head] + [body(i, "letters") for i in range(6)])
    write_tsv(root / "diagnostic" / "diagnostic.tsv", [["index", "sentence1", "sentence2"],
                                                       ["0", "The cat sat.", "The cat did not sit."]])


def make_qqp(root):
    head = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    rows = [["7", "15", "16", 'How do I "learn" Python?', "What is the best way to learn Python?", "1"],
            ["9", "19", "20", "Why is the sky blue?", "How tall is Everest?", "0"]]
    write_tsv(root / "QQP" / "train.tsv", [head] + rows)
    write_tsv(root / "QQP" / "dev.tsv", [head] + rows[::-1])
    write_tsv(root / "QQP" / "test.tsv", [["id", "question1", "question2"],
                                          ["0", "Is this a test?", "Is this real?"],
                                          ["1", "What?", "Why?"]])


def test_mnli_formats(tmp_path):
    make_mnli(tmp_path)
    train = read_examples(tmp_path, "mnli", "train")
    assert [e.label for e in train] == ["neutral", "entailment"]
    assert train[0].text_a == 'He said "hi 0.' and train[0].text_b == "premise 0 holds"
    assert [e.guid for e in train] == ["0", "1"]
    assert len(read_examples(tmp_path, "mnli", "dev")) == 3          # dev = dev_matched
    mismatched = read_examples(tmp_path, "MNLI", "dev_mismatched")
    assert len(mismatched) == 4 and {e.label for e in mismatched} == {"neutral"}  # gold label
    assert len(read_examples(tmp_path, "mnli", "test_matched")) == 5
    test_mm = read_examples(tmp_path, "mnli", "test_mismatched")
    assert len(test_mm) == 6 and test_mm[5].guid == "5" and test_mm[5].label is None
    ax = read_examples(tmp_path, "mnli", "diagnostic")
    assert (ax[0].text_a, ax[0].text_b, ax[0].label) == ("The cat sat.", "The cat did not sit.", None)


def test_qqp_formats(tmp_path):
    make_qqp(tmp_path)
    train = read_examples(tmp_path, "qqp", "train")
    assert [(e.guid, e.label) for e in train] == [("7", "1"), ("9", "0")]
    assert train[0].text_a == 'How do I "learn" Python?'
    assert [e.label for e in read_examples(tmp_path, "QQP", "dev")] == ["0", "1"]
    test = read_examples(tmp_path, "qqp", "test")
    assert [(e.guid, e.text_a, e.text_b, e.label) for e in test][1] == ("1", "What?", "Why?", None)


def test_quotes_are_text_and_bom_is_dropped(tmp_path):
    # An unbalanced quote would swallow the next lines under CSV quoting rules.
    path = tmp_path / "CoLA" / "train.tsv"
    path.parent.mkdir()
    path.write_bytes('\ufeffgj04\t1\t\t"Oh, he said.\ngj04\t0\t*\tThe "end.\n'.encode("utf-8"))
    examples = read_examples(tmp_path, "cola", "train")
    assert [(e.label, e.text_a) for e in examples] == [("1", '"Oh, he said.'), ("0", 'The "end.')]
    assert read_tsv(path)[1] == (2, ["gj04", "0", "*", 'The "end.'])


# --- bad input: DataError naming the file and line ----------------------------------------

def test_missing_task_dir(tmp_path):
    with pytest.raises(DataError, match=r"RTE: GLUE task directory not found") as err:
        read_examples(tmp_path, "rte", "dev")
    assert str(tmp_path / "RTE") in str(err.value) and "\n" not in str(err.value)


def test_missing_file(tmp_path):
    (tmp_path / "RTE").mkdir()
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: GLUE file not found"):
        read_examples(tmp_path, "rte", "dev")


def test_wrong_column_count(tmp_path):
    write_tsv(tmp_path / "RTE" / "dev.tsv", [["index", "sentence1", "sentence2", "label"],
                                             ["0", "a", "b", "entailment"],
                                             ["1", "a b", "entailment"]])
    with pytest.raises(DataError) as err:
        read_examples(tmp_path, "rte", "dev")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'RTE' / 'dev.tsv'}:3: ")
    assert "expected 4 tab-separated columns for rte dev, found 3" in message


def test_skip_malformed_rows_is_opt_in(tmp_path, caplog):
    make_qqp(tmp_path)
    with open(tmp_path / "QQP" / "train.tsv", "a", encoding="utf-8") as f:
        f.write("11\t21\tWhy is this row broken?\n")
    with pytest.raises(DataError, match=r"QQP/train\.tsv:4: expected 6 tab-separated columns"):
        read_examples(tmp_path, "qqp", "train")
    examples = read_examples(tmp_path, "qqp", "train", skip_malformed_rows=True)
    assert [e.guid for e in examples] == ["7", "9"]
    assert "QQP/train.tsv:4" in caplog.text


def test_empty_file(tmp_path):
    write_tsv(tmp_path / "RTE" / "dev.tsv", [["index", "sentence1", "sentence2", "label"]])
    with pytest.raises(DataError, match=r"RTE/dev\.tsv: no examples"):
        read_examples(tmp_path, "rte", "dev")


def test_unknown_label(tmp_path):
    write_tsv(tmp_path / "SST-2" / "train.tsv", [["sentence", "label"], ["good", "1"],
                                                 ["bad", "0"], ["meh", "2"]])
    with pytest.raises(DataError, match=r"SST-2/train\.tsv:4: unknown label '2' for task sst"):
        read_examples(tmp_path, "sst-2", "train")


def test_bad_regression_label(tmp_path):
    head = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
            "sentence1", "sentence2", "score"]
    write_tsv(tmp_path / "STS-B" / "dev.tsv", [head, ["0", "g", "f", "y", "0", "s", "s", "a", "b", "x"]])
    with pytest.raises(DataError, match=r"STS-B/dev\.tsv:2: label 'x' is not a number"):
        read_examples(tmp_path, "sts", "dev")
    write_tsv(tmp_path / "STS-B" / "dev.tsv", [head, ["0", "g", "f", "y", "0", "s", "s", "a", "b", "7"]])
    with pytest.raises(DataError, match=r"STS-B/dev\.tsv:2: label 7.0 outside \[0.0, 5.0\]"):
        read_examples(tmp_path, "sts", "dev")


def test_unknown_task_and_split(tmp_path):
    with pytest.raises(DataError, match=r"unknown GLUE task 'squad-ish'"):
        read_examples(tmp_path, "squad-ish", "dev")
    with pytest.raises(DataError, match=r"task 'rte' has no split 'dev_matched'"):
        read_examples(tmp_path, "rte", "dev_matched")


def test_not_utf8(tmp_path):
    path = tmp_path / "WNLI" / "dev.tsv"
    path.parent.mkdir()
    path.write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\tcaf\xe9\tb\t1\n")
    with pytest.raises(DataError, match=r"WNLI/dev\.tsv:2: not valid UTF-8"):
        read_examples(tmp_path, "wnli", "dev")
