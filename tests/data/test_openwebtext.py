"""The OpenWebText wrapper: tar.xz archives of .txt files, each file one document."""
import io
import tarfile

from data.pretraining_builder import build_openwebtext_pretraining_dataset
from data.tokenization import Tokenizer
from tests.data.helpers import read_examples


def _tar_xz(path, files):
    with tarfile.open(path, "w:xz") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_each_text_file_is_one_document(tmp_path, bert_vocab_file):
    owt = tmp_path / "data" / "openwebtext"
    owt.mkdir(parents=True)
    # Blank lines inside a file do not split it (blanks_separate_docs=False, as in ELECTRA).
    _tar_xz(owt / "urlsf_subset00-1_data.xz", {
        "0001-a.txt": "First document.\n\nStill the first document.\n",
        "0002-b.txt": "Second document, one line.\n",
    })
    _tar_xz(owt / "urlsf_subset00-2_data.xz", {"0003-c.txt": "Third document.\r\n"})
    summary = build_openwebtext_pretraining_dataset(
        tmp_path / "data", dict(vocab_file=str(bert_vocab_file),
                                output_dir=str(tmp_path / "out"), num_shards=2, progress=False))
    assert (summary["corpus_files"], summary["documents"], summary["examples"]) == (3, 3, 3)
    # Every example holds exactly one whole file's tokens ([CLS]/[SEP] aside).
    tokenizer = Tokenizer(bert_vocab_file)
    special = {tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id}
    packed = sorted([t for t in row if t not in special]
                    for row in read_examples(tmp_path / "out")["input_ids"].tolist())
    expected = sorted(sum(tokenizer.tokenize(text.split()), []) for text in (
        "First document. Still the first document.", "Second document, one line.",
        "Third document."))
    assert packed == expected
