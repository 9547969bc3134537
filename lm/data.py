"""Language-model data: text files -> one stream of WordPiece ids -> blocks.

    stream = token_stream(["wiki.valid.raw"], tokenizer)          # int32 [N]
    blocks = training_blocks(stream, seq_len)                       # [num_blocks, seq_len + 1]
    windows = eval_windows(stream, seq_len, stride)                 # inputs, targets, weights

Reading (WikiText raw format, or any UTF-8 text): a path is a file or a directory (its files,
sorted, data/corpus_reader.py); every line is stripped, empty lines are skipped and every other
line is tokenized with the toolkit's tokenizer (data/tokenization.py) and followed by [SEP], the
line / paragraph end (as fairseq's </s> per line). WikiText's " = Heading = " lines stay text.

Blocks: the stream is cut into contiguous, non-overlapping blocks of `seq_len` inputs; block i
holds tokens i·L .. i·L+L (L+1 tokens: inputs are the first L, targets the last L), so every
token after the first is a target exactly once. Training drops the incomplete tail; evaluation
scores it (eval_windows).
"""
import numpy as np

from data.corpus_reader import list_corpus_files, read_corpus_file, stripped_lines
from data.errors import CorpusError
from base import fileio

LINES_PER_CALL = 10_000   # lines tokenized per op call (WikiText-103 train has ~1.8M lines)


def text_files(paths):
    """Comma-separated string or list of files / directories -> the files to read, in order."""
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p.strip()]
    files = []
    for path in paths:
        path = path.strip()
        if fileio.isdir(path):
            files.extend(list_corpus_files(path))
        elif fileio.isfile(path):
            files.append(path)
        else:
            raise CorpusError(f"text file {path}: not found")
    if not files:
        raise CorpusError("no text files given")
    return files


def token_stream(paths, tokenizer):
    """All files' non-empty lines as one int32 stream of ids, each line followed by [SEP]."""
    pieces = []
    for path in text_files(paths):
        lines = [line for line in stripped_lines(read_corpus_file(path)) if line]
        for start in range(0, len(lines), LINES_PER_CALL):
            ids, splits = tokenizer.tokenize_to_arrays(lines[start:start + LINES_PER_CALL])
            # [SEP] after each line: insert at every row end of the flat ids.
            pieces.append(np.insert(ids, splits[1:], tokenizer.sep_id).astype(np.int32))
    stream = np.concatenate(pieces) if pieces else np.zeros([0], np.int32)
    if len(stream) < 2:
        raise CorpusError(f"{', '.join(text_files(paths))}: fewer than 2 tokens of text")
    return stream


def training_blocks(stream, seq_len):
    """[num_blocks, seq_len + 1]: block i = stream[i·L : i·L + L + 1] (complete blocks only)."""
    num_blocks = (len(stream) - 1) // seq_len
    if num_blocks == 0:
        raise CorpusError(f"the training text has {len(stream)} tokens, fewer than one block of "
                          f"--seq_len {seq_len} + 1")
    index = np.arange(num_blocks)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return stream[index]


def eval_windows(stream, seq_len, stride=None):
    """Windows that score every token of `stream` after the first exactly once.

    stride = seq_len (default): non-overlapping blocks (the last one shorter). stride < seq_len:
    a sliding window of seq_len inputs moved by `stride`; each window scores only the targets
    the previous one did not, so each target sees at least seq_len - stride tokens of context
    (all before it in the first window). Returns int32 inputs [W, L], int32 targets [W, L] and
    float32 weights [W, L] (1 = scored; 0 = padding or already scored).
    """
    stride = seq_len if stride is None else stride
    if not 0 < stride <= seq_len:
        raise ValueError(f"stride must be in [1, seq_len = {seq_len}], got {stride}")
    n = len(stream)
    inputs, targets, weights = [], [], []
    scored = 1                       # targets stream[1:scored] are done
    begin = 0
    while scored < n:
        end = min(begin + seq_len, n - 1)                # inputs stream[begin:end]
        length = end - begin
        row_in = np.zeros(seq_len, np.int32)
        row_out = np.zeros(seq_len, np.int32)
        row_w = np.zeros(seq_len, np.float32)
        row_in[:length] = stream[begin:end]
        row_out[:length] = stream[begin + 1:end + 1]
        first_new = scored - (begin + 1)                 # first target index not yet scored
        row_w[first_new:length] = 1.0
        inputs.append(row_in)
        targets.append(row_out)
        weights.append(row_w)
        scored = end + 1
        begin += stride
    return np.stack(inputs), np.stack(targets), np.stack(weights)
