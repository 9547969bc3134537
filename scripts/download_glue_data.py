#!/usr/bin/env python3
"""Download GLUE into the layout the toolkit reads: <data_dir>/<TASK>/{train,dev,test}.tsv.

    python scripts/download_glue_data.py --data_dir glue_data              # all tasks + AX
    python scripts/download_glue_data.py --data_dir glue_data --tasks CoLA,MRPC,sts

Same sources and MRPC split as GLUE's own download_glue_data.py (nyu-mll, Dec 2020 version):
the task zips from dl.fbaipublicfiles.com, and MRPC rebuilt from the SentEval copies of the
Microsoft Research Paraphrase Corpus plus GLUE's list of dev pairs. Standard library only.
Check each dataset's licence before use (several are research-only).
"""
import argparse
import hashlib
import os
import sys
import urllib.request
import zipfile

GLUE_URL = "https://dl.fbaipublicfiles.com/glue/data"
TASK_ZIPS = {   # the zips unpack to <TASK>/...
    "CoLA": f"{GLUE_URL}/CoLA.zip",
    "SST-2": f"{GLUE_URL}/SST-2.zip",
    "QQP": f"{GLUE_URL}/QQP-clean.zip",
    "STS-B": f"{GLUE_URL}/STS-B.zip",
    "MNLI": f"{GLUE_URL}/MNLI.zip",
    "QNLI": f"{GLUE_URL}/QNLIv2.zip",
    "RTE": f"{GLUE_URL}/RTE.zip",
    "WNLI": f"{GLUE_URL}/WNLI.zip",
}
AX_URL = f"{GLUE_URL}/AX.tsv"
# MRPC: (url, sha256) -- the hashes are those of the files GLUE's script has always used.
MRPC_FILES = {
    "msr_paraphrase_train.txt": (
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
        "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89"),
    "msr_paraphrase_test.txt": (
        "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
        "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784"),
    "dev_ids.tsv": (f"{GLUE_URL}/mrpc_dev_ids.tsv",
                    "971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7"),
}
ALL_TASKS = ["CoLA", "SST-2", "MRPC", "QQP", "STS-B", "MNLI", "QNLI", "RTE", "WNLI", "diagnostic"]
ALIASES = {"sst": "SST-2", "sts": "STS-B", "ax": "diagnostic"}   # ELECTRA task names


def fetch(url, path):
    print(f"  {url} -> {path}")
    tmp = path + ".part"
    urllib.request.urlretrieve(url, tmp)
    os.replace(tmp, path)   # no half-downloaded files left under the final name


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def format_mrpc(mrpc_dir):
    """Split msr_paraphrase_{train,test}.txt into GLUE's MRPC train/dev/test.tsv.

    As GLUE's script does: pairs listed in dev_ids.tsv go to dev.tsv, the rest to train.tsv
    (both keep the source header, BOM included); test.tsv gets a new header and an index column.
    """
    with open(os.path.join(mrpc_dir, "dev_ids.tsv"), encoding="utf-8") as f:
        dev_ids = {tuple(line.strip().split("\t")) for line in f if line.strip()}

    def out(name):
        return open(os.path.join(mrpc_dir, name), "w", encoding="utf-8", newline="\n")

    src = os.path.join(mrpc_dir, "msr_paraphrase_train.txt")
    with open(src, encoding="utf-8") as data, out("train.tsv") as train, out("dev.tsv") as dev:
        header = data.readline()
        train.write(header)
        dev.write(header)
        for row in data:
            label, id1, id2, s1, s2 = row.strip().split("\t")
            target = dev if (id1, id2) in dev_ids else train
            target.write(f"{label}\t{id1}\t{id2}\t{s1}\t{s2}\n")
    src = os.path.join(mrpc_dir, "msr_paraphrase_test.txt")
    with open(src, encoding="utf-8") as data, out("test.tsv") as test:
        data.readline()
        test.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for index, row in enumerate(data):
            _, id1, id2, s1, s2 = row.strip().split("\t")
            test.write(f"{index}\t{id1}\t{id2}\t{s1}\t{s2}\n")


def download_task(task, data_dir):
    print(f"{task}:")
    if task == "MRPC":
        mrpc_dir = os.path.join(data_dir, "MRPC")
        os.makedirs(mrpc_dir, exist_ok=True)
        for name, (url, digest) in MRPC_FILES.items():
            path = os.path.join(mrpc_dir, name)
            fetch(url, path)
            if sha256(path) != digest:
                sys.exit(f"{path}: sha256 mismatch (the source changed?); not using it")
        format_mrpc(mrpc_dir)
    elif task == "diagnostic":
        os.makedirs(os.path.join(data_dir, "diagnostic"), exist_ok=True)
        fetch(AX_URL, os.path.join(data_dir, "diagnostic", "diagnostic.tsv"))
    else:
        zip_path = os.path.join(data_dir, f"{task}.zip")
        fetch(TASK_ZIPS[task], zip_path)
        with zipfile.ZipFile(zip_path) as zf:
            zf.extractall(data_dir)
        os.remove(zip_path)


def parse_tasks(text):
    if text.strip().lower() == "all":
        return ALL_TASKS
    by_name = {t.lower(): t for t in ALL_TASKS}
    tasks = []
    for name in text.split(","):
        key = ALIASES.get(name.strip().lower(), name.strip())
        if key.lower() not in by_name:
            sys.exit(f"unknown task {name!r}; choose from {', '.join(ALL_TASKS)} or 'all'")
        tasks.append(by_name[key.lower()])
    return tasks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", default="glue_data", help="where to put <TASK>/ folders")
    parser.add_argument("--tasks", default="all", help="comma-separated tasks, or 'all'")
    args = parser.parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    for task in parse_tasks(args.tasks):
        download_task(task, args.data_dir)
    print(f"done: GLUE data in {args.data_dir}")


if __name__ == "__main__":
    main()
